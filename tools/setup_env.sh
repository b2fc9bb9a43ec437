#!/usr/bin/env bash
# Create (once) the environment that `make` uses, at $VENV (default .venv).
#
# - The venv sees the system's site-packages, so a PyTorch / Triton that is
#   already installed (lab GPU machine, conda env, Docker image) is reused,
#   never reinstalled: pip skips what already satisfies requirements.txt.
# - With no PyTorch at all it installs one: a wheel already on this machine
#   (pip's find-links / wheel cache) first, else the CPU build on machines
#   without an NVIDIA GPU (no multi-GB CUDA download for a laptop), else the
#   default build.
# - Set NO_VENV=1 to use $PYTHON as it is (offline machines, your own env).
set -euo pipefail
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
REQUIREMENTS=${REQUIREMENTS:-requirements.txt}   # make test passes requirements-dev.txt
STAMP="$VENV/.installed-$(basename "$REQUIREMENTS" .txt)"

if [ "${NO_VENV:-0}" = "1" ]; then
  mods="torch, pytest, pytest_jsonreport, tabulate, tqdm"
  [ "$REQUIREMENTS" = requirements-dev.txt ] && mods="$mods, xdist"
  "$PYTHON" -c "import $mods" 2>/dev/null || {
    echo "NO_VENV=1 but $PYTHON lacks one of: $mods; pip install -r $REQUIREMENTS" >&2; exit 1; }
  exit 0
fi
if [ -f "$STAMP" ] && [ "$STAMP" -nt "$REQUIREMENTS" ] && [ "$STAMP" -nt requirements.txt ] \
   && { [ ! -f requirements-serve.txt ] || [ "$STAMP" -nt requirements-serve.txt ]; }; then
  exit 0
fi
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' || {
  echo "Python >= 3.10 is needed; found $("$PYTHON" --version 2>&1). Set PYTHON=..." >&2; exit 1; }
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv --system-site-packages "$VENV"
PY="$VENV/bin/python"
PIP=("$PY" -m pip install --disable-pip-version-check -q)

if ! "$PY" -c "import torch" 2>/dev/null; then
  echo "setup: installing PyTorch into $VENV ..."
  if "${PIP[@]}" --no-index --no-deps torch 2>/dev/null; then
    echo "setup: used a local PyTorch wheel"
  elif ! command -v nvidia-smi >/dev/null 2>&1 && [ "$(uname -s)" = "Linux" ] \
       && "${PIP[@]}" --timeout 30 --retries 1 --index-url https://download.pytorch.org/whl/cpu torch 2>/dev/null; then
    echo "setup: installed the CPU build of PyTorch (no NVIDIA GPU found)"
  else
    "${PIP[@]}" torch
  fi
fi
echo "setup: installing $REQUIREMENTS into $VENV ..."
"${PIP[@]}" -r "$REQUIREMENTS"
"$PY" -c "import torch, pytest, tabulate; print('setup: torch', torch.__version__)"
touch "$STAMP"
