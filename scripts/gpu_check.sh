#!/usr/bin/env bash
# The GPU check of one machine, about 4 minutes on one H200 (at most 8): GRPO steps of a
# 0.5B-shaped model with their MFU, rlyard's FSDP2 learner on NCCL, the vLLM engine with a
# weight push (or a SKIP saying why), nvidia-smi and versions. bench/gpu_check.py says what
# each part runs; docs/benchmarks.md has the last results.
#
#   scripts/gpu_check.sh                         # writes $OUT (else ./gpu_check_out)/gpu_check.json and .log
#   scripts/gpu_check.sh --out DIR --parts grpo,fsdp1
#   scripts/gpu_check.sh --cpu-dry-run           # the same code paths on CPU with a tiny model (~20 s)
#
# Python: $PYTHON, else the checkout's .venv, else python3 (a GPU image's torch). Wheels in
# .whl/ (rlyard's dependencies missing on a machine without a network: pydantic, a newer
# transformers) are installed into /tmp/gpu-check-site first, without touching the machine's own packages.
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
# rlyard needs transformers >= 5.24 (the `cache=` keyword of the forward; 5.17 ignores it) and pydantic
NEEDS='import sys, pydantic, starlette, transformers; from packaging.version import Version as V; sys.exit(V(transformers.__version__) < V("5.24"))'
if compgen -G ".whl/*.whl" >/dev/null && ! "$PY" -c "$NEEDS" 2>/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/gpu-check-site .whl/*.whl \
    || { echo "gpu_check: installing .whl/ failed" >&2; exit 1; }
  export PYTHONPATH="/tmp/gpu-check-site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
exec "$PY" bench/gpu_check.py "$@"
