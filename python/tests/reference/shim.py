"""conftest.py for the reference's own test suite (run.sh copies it beside
the reference's tests in a temporary directory): ``import safetensors`` and
every ``safetensors.X`` resolve to ``tensorfile`` and ``tensorfile.X``, so the
reference's tests run against tensorfile, unchanged.

Without torch installed, ``torch`` is an empty stand-in module (test_simple.py
imports it at module level) and the tests that use torch are skipped, each
saying why.
"""

import importlib
import importlib.abc
import importlib.util
import inspect
import sys
import types

import pytest


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``safetensors[.X]`` as ``tensorfile[.X]``, ahead of any installed
    safetensors."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname == "safetensors" or fullname.startswith("safetensors."):
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        return importlib.import_module("tensorfile" + spec.name[len("safetensors") :])

    def exec_module(self, module):
        pass


sys.meta_path.insert(0, _Alias())
for _name in [n for n in sys.modules if n == "safetensors" or n.startswith("safetensors.")]:
    del sys.modules[_name]

try:
    import torch  # noqa: F401

    TORCH_STUB = False
except ImportError:
    sys.modules["torch"] = types.ModuleType("torch")
    TORCH_STUB = True


def _uses_torch(item):
    function = getattr(item, "function", None)
    if function is None:
        return False
    try:
        source = inspect.getsource(function)
    except (OSError, TypeError):
        return False
    return "torch" in source or "_pt(" in source or '"pt"' in source


def pytest_collection_modifyitems(config, items):
    if not TORCH_STUB:
        return
    skip = pytest.mark.skip(reason="uses torch, which is not installed (an empty stand-in is)")
    for item in items:
        if _uses_torch(item):
            item.add_marker(skip)


def pytest_report_header(config):
    import tensorfile

    where = "an empty stand-in (torch tests skipped)" if TORCH_STUB else sys.modules["torch"].__version__
    return [f"safetensors -> tensorfile {tensorfile.__version__} ({tensorfile.__file__}); torch: {where}"]
