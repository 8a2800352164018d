#!/usr/bin/env bash
# A second environment for the open_clip path. open_clip imports torchvision, and the only
# torchvision wheels on hand here are CUDA builds paired with torch 2.14.1 (~5.5 GB, ~1 min to
# install from local disk); elsewhere the CPU builds come from PyTorch's CPU index.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=.venv-clip
stamp="$VENV/.normrank-installed"
want=$(cat pyproject.toml scripts/setup_clip.sh | sha256sum | cut -c1-16)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
"$PY" -m venv "$VENV"
# setuptools' "Editable installation" notice filtered as in setup.sh.
# The machine's file:// index warnings ("Location ... is ignored") dropped as in setup.sh.
pip() {
  { PYTHONWARNINGS="ignore:Editable installation" "$VENV/bin/python" -m pip --disable-pip-version-check -q "$@" \
    2>&1 1>&3 3>&- | sed -u "/^WARNING: Location 'file:.*' is ignored: it is neither a file nor a directory\.\$/d" >&2; } 3>&1
}
pip install -U pip
# The CPU builds from PyTorch's CPU index where there is no GPU (setup.sh's rule); where that
# index is unreachable, whatever the machine's pip offers (here: local CUDA wheels).
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU' \
  || ! pip install --timeout 10 --retries 0 --index-url https://download.pytorch.org/whl/cpu \
    "torch==2.14.1+cpu" "torchvision==0.29.1+cpu" 2>/dev/null; then
  pip install "torch==2.14.1" "torchvision==0.29.1"
fi
pip install "open_clip_torch>=2.24"
pip install -e ".[dev]"
echo "$want" > "$stamp"
