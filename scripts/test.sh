#!/usr/bin/env bash
# The test command: set up both environments, then run the suite (slow tests excluded;
# NORMRANK_TEST_PROFILE=full and `-m slow` run the long profiles outside CI).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/setup_clip.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
.venv/bin/ruff check normrank integrations benchmarks tests
.venv/bin/ruff format --check normrank integrations benchmarks tests
.venv/bin/python -m pytest -m "not slow" "$@"
# open_clip's text tower, on a tiny random model, in the environment that has torchvision.
.venv-clip/bin/python -m pytest -p no:cacheprovider -m clip tests/models/test_clip_encoders.py "$@"
