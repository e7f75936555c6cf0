"""server/contextsvc/_native_c.pyi types the compiled module as its Python twin's API: the same
public names, and each function (and class constructor) with the twin's parameters."""
from __future__ import annotations

import ast
import inspect
from pathlib import Path

from contextsvc import _native_py

STUB = Path(_native_py.__file__).with_name("_native_c.pyi")


def _stub():
    tree = ast.parse(STUB.read_text())
    functions = {n.name: [a.arg for a in n.args.args] for n in tree.body if isinstance(n, ast.FunctionDef)}
    # a class: its constructor's parameters, self left out (as inspect.signature gives them)
    functions.update({n.name: [a.arg for a in init.args.args][1:] for n in tree.body if isinstance(n, ast.ClassDef)
                      for init in n.body if isinstance(init, ast.FunctionDef) and init.name == "__init__"})
    names = next(n.value for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "__all__")
    return [ast.literal_eval(e) for e in names.elts], functions


def test_stub_lists_the_twins_api_with_its_parameters():
    exported, functions = _stub()
    assert exported == _native_py.__all__
    for name in _native_py.__all__:
        value = getattr(_native_py, name)
        if callable(value):
            assert functions[name] == list(inspect.signature(value).parameters), name


def test_compiled_module_has_what_the_stub_lists(impl):
    _, functions = _stub()
    for name in functions:
        if impl is not _native_py or not name.startswith("_"):
            assert callable(getattr(impl, name)), name
