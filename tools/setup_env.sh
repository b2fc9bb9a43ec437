#!/usr/bin/env bash
# Create (once) the environment that `make` uses, at $VENV (default .venv), with the grading
# toolchain: toolchain.txt pins torch, triton and numpy, and every pip install here uses it
# as constraints (-c toolchain.txt).
#
# - The venv sees the system's site-packages, so a PyTorch that is already installed (lab GPU
#   machine, conda env, Docker image) is reused when it is the pinned version; another
#   version of torch, triton or numpy is shadowed in the venv by the pinned one.
# - Without the pinned PyTorch it installs it: a wheel already on this machine (pip's
#   find-links / wheel cache) first, else the CPU build on machines without an NVIDIA GPU
#   (no multi-GB CUDA download for a laptop; 2.11.0+cpu satisfies torch==2.11.0), else
#   the default build.
# - NO_VENV=1 uses $PYTHON as it is (offline machines, your own env). Its torch and numpy
#   must be the pinned ones (ALLOW_OTHER_TOOLCHAIN=1 goes on with a warning; every report
#   then says so). Another Triton is left alone: the grading Triton is installed beside it
#   in $GRADER_TOOLCHAIN_DIR/triton-<version> (default .toolchain/), and a CPU grade puts it
#   first (grader/toolchain.py), so that the kernels are compiled as the grading GPU does.
set -euo pipefail
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
REQUIREMENTS=${REQUIREMENTS:-requirements.txt}   # make test passes requirements-dev.txt
CONSTRAINTS=toolchain.txt
STAMP="$VENV/.installed-$(basename "$REQUIREMENTS" .txt)"

pin() { sed -n "s/^$1==\([^ ;#]*\).*/\1/p" "$CONSTRAINTS"; }
TORCH=$(pin torch) TRITON=$(pin triton) NUMPY=$(pin numpy)
if [ -z "$TORCH" ] || [ -z "$TRITON" ] || [ -z "$NUMPY" ]; then
  echo "setup: $CONSTRAINTS must pin torch, triton and numpy (name==version)" >&2; exit 1
fi
LINUX=0; [ "$(uname -s)" = "Linux" ] && LINUX=1   # Triton has Linux wheels only

# The version of package $2 that python $1 imports ("" when it has none), without importing it.
have() {
  "$1" - "$2" <<'EOF' 2>/dev/null || true
import importlib.metadata as m, sys
try:
    print(m.version(sys.argv[1]))
except m.PackageNotFoundError:
    pass
EOF
}
matches() { [ -n "$1" ] && [ "${1%%+*}" = "$2" ]; }   # a local label (+cpu, +cu130) is pip's == too

# What python $1 holds other than the pins, one "name version (pinned X)" each.
differences() {
  local out="" v
  for pkg in torch numpy $([ $LINUX = 1 ] && echo triton); do
    v=$(have "$1" "$pkg")
    case $pkg in torch) want=$TORCH ;; numpy) want=$NUMPY ;; triton) want=$TRITON ;; esac
    matches "$v" "$want" || out="$out${out:+, }$pkg ${v:-not installed} (pinned $want)"
  done
  echo "$out"
}

# The grading Triton beside an environment that holds another one (NO_VENV=1).
side_triton() {
  local dir="${GRADER_TOOLCHAIN_DIR:-.toolchain}/triton-$TRITON"
  if [ -d "$dir/triton" ] && [ -d "$dir/triton-$TRITON.dist-info" ]; then
    return 0
  fi
  echo "setup: $PYTHON has triton ${1:-not installed}; installing the grading Triton $TRITON in $dir ..."
  rm -rf "$dir.tmp"
  if "$PYTHON" -m pip install --disable-pip-version-check -q --no-deps --target "$dir.tmp" "triton==$TRITON"; then
    rm -rf "$dir" && mv "$dir.tmp" "$dir" && chmod -R a+rX "$dir"
  else
    rm -rf "$dir.tmp"
    echo "setup: WARNING: could not install Triton $TRITON: a CPU grade compiles your kernels with Triton" \
         "${1:-(none)}, not the grading GPU's, and every report says so" >&2
  fi
}

if [ "${NO_VENV:-0}" = "1" ]; then
  mods="torch, pytest, pytest_jsonreport, tabulate, tqdm"
  [ "$REQUIREMENTS" = requirements-dev.txt ] && mods="$mods, xdist"
  "$PYTHON" -c "import $mods" 2>/dev/null || {
    echo "NO_VENV=1 but $PYTHON lacks one of: $mods; pip install -r $REQUIREMENTS -c $CONSTRAINTS" >&2; exit 1; }
  off=$(LINUX=0 differences "$PYTHON")
  if [ -n "$off" ]; then
    msg="NO_VENV=1: $PYTHON has $off; the grading toolchain is torch==$TORCH, numpy==$NUMPY ($CONSTRAINTS)"
    if [ "${ALLOW_OTHER_TOOLCHAIN:-0}" = "1" ]; then
      echo "setup: WARNING: $msg. Grading anyway (ALLOW_OTHER_TOOLCHAIN=1): a CPU grade's report says so." >&2
    else
      echo "setup: $msg. Install them (pip install -c $CONSTRAINTS torch==$TORCH numpy==$NUMPY), drop" \
           "NO_VENV=1 to let make set up $VENV, or set ALLOW_OTHER_TOOLCHAIN=1 to grade anyway." >&2
      exit 1
    fi
  fi
  if [ $LINUX = 1 ]; then
    t=$(have "$PYTHON" triton)
    matches "$t" "$TRITON" || side_triton "$t"
  fi
  exit 0
fi
if [ -f "$STAMP" ] && [ "$STAMP" -nt "$REQUIREMENTS" ] && [ "$STAMP" -nt requirements.txt ] \
   && [ "$STAMP" -nt "$CONSTRAINTS" ]; then
  exit 0
fi
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' || {
  echo "Python >= 3.10 is needed; found $("$PYTHON" --version 2>&1). Set PYTHON=..." >&2; exit 1; }
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv --system-site-packages "$VENV"
PY="$VENV/bin/python"
PIP=("$PY" -m pip install --disable-pip-version-check -q)

if ! matches "$(have "$PY" torch)" "$TORCH"; then
  echo "setup: installing PyTorch $TORCH into $VENV ..."
  if "${PIP[@]}" --no-index --no-deps "torch==$TORCH" 2>/dev/null; then
    echo "setup: used a local PyTorch wheel"
  elif ! command -v nvidia-smi >/dev/null 2>&1 && [ $LINUX = 1 ] \
       && "${PIP[@]}" --timeout 30 --retries 1 --index-url https://download.pytorch.org/whl/cpu \
            -c "$CONSTRAINTS" "torch==$TORCH" 2>/dev/null; then
    echo "setup: installed the CPU build of PyTorch (no NVIDIA GPU found)"
  else
    "${PIP[@]}" -c "$CONSTRAINTS" "torch==$TORCH"
  fi
fi
echo "setup: installing $REQUIREMENTS into $VENV (constraints: $CONSTRAINTS) ..."
"${PIP[@]}" -r "$REQUIREMENTS" -c "$CONSTRAINTS"
off=$(differences "$PY")
if [ -n "$off" ]; then
  echo "setup: $VENV has $off after installing: it cannot grade as the grading GPU does" >&2; exit 1
fi
"$PY" -c "import torch, pytest, tabulate; print('setup: torch', torch.__version__)"
touch "$STAMP"
