# Sourced by setup.sh and test.sh: which Python environment rlyard lives in.
#
# An activated virtualenv or conda env is used as it is (your own environment). Otherwise the
# project's own virtualenv, .venv at the top of the checkout, made from $PYTHON (default python3).
# Sets RLYARD_ENV (the environment's folder), RLYARD_PY (its python) and RLYARD_ENV_KIND.
PYTHON=${PYTHON:-python3}
RLYARD_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
rlyard_is_venv() {  # the interpreter $1 runs inside a virtualenv (sys.prefix differs from its base)
  "$1" -c 'import sys; sys.exit(0 if sys.prefix != sys.base_prefix else 1)' 2>/dev/null
}
if [ -n "${VIRTUAL_ENV:-}" ] && [ -x "$VIRTUAL_ENV/bin/python" ]; then
  RLYARD_ENV=$VIRTUAL_ENV RLYARD_ENV_KIND="the active virtualenv"
elif [ -n "${CONDA_PREFIX:-}" ] && [ -x "$CONDA_PREFIX/bin/python" ] && [ "${CONDA_DEFAULT_ENV:-base}" != "base" ]; then
  RLYARD_ENV=$CONDA_PREFIX RLYARD_ENV_KIND="the active conda environment"
elif command -v "$PYTHON" >/dev/null && rlyard_is_venv "$PYTHON"; then
  RLYARD_ENV=$("$PYTHON" -c 'import sys; print(sys.prefix)') RLYARD_ENV_KIND="the virtualenv of PYTHON=$PYTHON"
else
  RLYARD_ENV=$RLYARD_ROOT/.venv RLYARD_ENV_KIND="the project virtualenv .venv"
fi
RLYARD_PY=$RLYARD_ENV/bin/python
