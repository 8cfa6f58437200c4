#!/usr/bin/env bash
# The Python package's tests: its pytest suite (python/tests), then the
# reference's own torch-free tests and its flax tests
# (python/tests/reference/run.sh), against one of two installs:
#
# - TENSORFILE_WHEEL=PATH (CI: a wheel scripts/wheel.sh built): the wheel
#   installed with its test extra ("tensorfile[test]": numpy, ml_dtypes,
#   fsspec, pytest) and the packages compared with
#   (python/tests/requirements-compare.txt) into target/python-wheel-venv,
#   made anew on each run, so the tests see the package as pip installs it.
# - otherwise (a developer's run): the package built and installed from
#   ./python (pip install ./python, maturin from PyPI) into
#   target/python-venv, made on the first run and reused later.
#   TENSORFILE_PY_PROFILE=dev builds the extension unoptimized, reusing
#   what `cargo test` already compiled.
#
# PYTHON picks the interpreter that makes the environment (default python3).
#
# `scripts/python-tests.sh --prepare-wheel-venv` only makes
# target/python-wheel-venv anew with those packages, for a wheel to come:
# CI runs it in the background while cargo builds, and the next wheel run
# takes the prepared environment (once) instead of making its own.
set -euo pipefail
cd "$(dirname "$0")/.."

# A fresh environment for a wheel: the test extra's packages (as
# python/pyproject.toml lists them, with numpy, the package's one
# dependency) and those compared with; nothing else.
wheel_venv="target/python-wheel-venv"
prepare_wheel_venv() {
    rm -rf "$wheel_venv"
    mkdir -p target
    "${PYTHON:-python3}" -m venv "$wheel_venv"
    "$wheel_venv/bin/python" -m pip install --quiet --upgrade pip
    "$wheel_venv/bin/python" -m pip install --quiet numpy pytest ml_dtypes fsspec \
        -r python/tests/requirements-compare.txt
}
if [ "${1:-}" = --prepare-wheel-venv ]; then
    prepare_wheel_venv
    touch "$wheel_venv/.prepared"
    exit 0
fi

if [ -n "${TENSORFILE_WHEEL:-}" ]; then
    wheel="$(cd "$(dirname "$TENSORFILE_WHEEL")" && pwd)/$(basename "$TENSORFILE_WHEEL")"
    [ -f "$wheel" ] || { echo "python-tests: no wheel $TENSORFILE_WHEEL" >&2; exit 1; }
    venv="$wheel_venv"
    # A prepared environment serves one run; otherwise make it now.
    if [ -f "$venv/.prepared" ]; then
        rm "$venv/.prepared"
    else
        prepare_wheel_venv
    fi
    "$venv/bin/python" -m pip install --quiet "$wheel[test]"
    py="$PWD/$venv/bin/python"
    # The tests must import the installed package, not python/tensorfile.
    (cd / && "$py" -c 'import sys, tensorfile; assert tensorfile.__file__.startswith(sys.prefix), tensorfile.__file__')
else
    venv="target/python-venv"
    if [ ! -x "$venv/bin/python" ]; then
        mkdir -p target
        "${PYTHON:-python3}" -m venv "$venv"
        "$venv/bin/python" -m pip install --quiet --upgrade pip
        "$venv/bin/python" -m pip install --quiet maturin numpy ml_dtypes fsspec pytest
    fi
    # The reference (safetensors 0.8.0, compared with, never a dependency)
    # and jax[cpu] with flax for the flax module's tests: about 75 s more on
    # a fresh venv, installed into older venvs too.
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
fi
"$py" -m pytest -q -p no:cacheprovider python/tests
PYTHON="$py" python/tests/reference/run.sh
