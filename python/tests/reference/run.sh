#!/usr/bin/env bash
# Runs the reference's own Python tests (safetensors 0.8.0's source
# distribution, downloaded into a temporary directory, never kept) against
# the installed tensorfile package, through shim.py as their conftest.py.
#
#   python/tests/reference/run.sh                  # the torch-free set CI runs
#                                                  # (and flax's, with jax and flax)
#   python/tests/reference/run.sh tests/test_pt_model.py ...   # chosen files
#
# PYTHON names the interpreter (default: python3 on PATH); it needs
# tensorfile, numpy, pytest and fsspec installed, and torch for the torch tests
# (jax, flax, tensorflow + h5py, paddlepaddle or mlx for those frameworks').
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
python="${PYTHON:-python3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

"$python" -m pip download --quiet --no-deps --no-binary safetensors \
    safetensors==0.8.0 -d "$work"
tar -xzf "$work/safetensors-0.8.0.tar.gz" -C "$work"
suite="$work/safetensors-0.8.0/bindings/python"
cp "$here/shim.py" "$suite/tests/conftest.py"
if [ "$#" -eq 0 ]; then
    set -- tests/test_handle.py tests/test_simple.py
    # The flax tests where jax and flax are installed (CI installs them).
    if "$python" -c "import jax, flax" 2>/dev/null; then
        set -- "$@" tests/test_flax_comparison.py
    fi
fi
cd "$suite"
"$python" -m pytest -q -p no:cacheprovider -rs "$@"
