#!/usr/bin/env bash
# The Python package's tests: builds and installs tensorfile (pip install
# ./python, maturin from PyPI) into a virtual environment with numpy,
# ml_dtypes, fsspec and pytest (and, to compare with, the reference and
# jax; python/tests/requirements-compare.txt), runs its pytest suite
# (python/tests), then the reference's own torch-free tests and its flax
# tests (python/tests/reference/run.sh).
#
# The environment is target/python-venv, made on the first run (so fresh on
# a clean clone, as in CI) and reused later; PYTHON picks the interpreter
# that makes it (default python3). TENSORFILE_PY_PROFILE=dev builds the
# extension unoptimized, reusing what `cargo test` already compiled (CI does
# this: a release build of the whole library would add minutes).
set -euo pipefail
cd "$(dirname "$0")/.."

venv="target/python-venv"
if [ ! -x "$venv/bin/python" ]; then
    mkdir -p target
    "${PYTHON:-python3}" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    "$venv/bin/python" -m pip install --quiet maturin numpy ml_dtypes fsspec pytest
fi
# The reference (safetensors 0.8.0, compared with, never a dependency) and
# jax[cpu] with flax for the flax module's tests: about 75 s more on a fresh
# venv, installed into older venvs too.
if ! "$venv/bin/python" -c "import safetensors, jax, flax" 2>/dev/null; then
    "$venv/bin/python" -m pip install --quiet -r python/tests/requirements-compare.txt
fi
py="$PWD/$venv/bin/python"
# The build backend runs the maturin executable from PATH.
export PATH="$PWD/$venv/bin:$PATH"
if [ "${TENSORFILE_PY_PROFILE:-release}" != release ]; then
    export MATURIN_PEP517_ARGS="--profile ${TENSORFILE_PY_PROFILE}"
fi
# --no-build-isolation: maturin is already in the environment.
"$py" -m pip install --quiet --no-build-isolation --force-reinstall --no-deps ./python
"$py" -m pytest -q -p no:cacheprovider python/tests
PYTHON="$py" python/tests/reference/run.sh
