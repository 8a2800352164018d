#!/usr/bin/env bash
# A second environment for the open_clip path. open_clip imports torchvision, and the only
# torchvision wheels on hand are CUDA builds paired with torch 2.14.1 (~5.5 GB, ~1 min to
# install from local disk); the main environment stays on the small CPU torch.
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
pip() { PYTHONWARNINGS="ignore:Editable installation" "$VENV/bin/python" -m pip --disable-pip-version-check -q "$@"; }
pip install -U pip
pip install "torch==2.14.1" "torchvision==0.29.1" "open_clip_torch>=2.24"
pip install -e ".[dev]"
echo "$want" > "$stamp"
