#!/usr/bin/env bash
# The main job: set up, then the alpha-sweep on SciFact with all-MiniLM-L6-v2, offline.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
.venv/bin/normrank sweep scifact --model all-MiniLM-L6-v2 --folds 5 --out runs/scifact-minilm "$@"
