#!/usr/bin/env bash
# The main job: set up, then the alpha-sweep on SciFact with all-MiniLM-L6-v2, offline.
# From nothing most of the wait is encoding SciFact once (a bar on a terminal, a line every 15 s
# in a log); the embeddings are cached, so a second run takes about a second. NORMRANK_VENV: as
# in setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
"${NORMRANK_VENV:-.venv}/bin/normrank" sweep scifact --model all-MiniLM-L6-v2 --folds 5 --out runs/scifact-minilm "$@"
