"""Code shape: no module over ~400 lines, no function over ~60.

The developers' guide keeps modules under ~400 lines and functions under ~60 so
that each stays readable as one piece. This test walks every module of
``kaiwo_ctrl`` (domain packages and the runtime alike) with :mod:`ast` and fails
listing every offender, so a module or function that grows past the limit is
split when it grows, not in a later clean-up.

How lines are counted:

* a module's size is its line count minus the lines of its module-level
  declarative tables (an assignment whose value is a dict, list, tuple or set
  literal, such as ``rbac.CLUSTER_RULES``): a table is data, read entry by entry;
* a function's (or method's) size is the line span of its body, from the first
  statement (its docstring, if any) to its last line; a nested function counts
  towards its enclosing function and is checked on its own as well.

A function that truly must be longer goes into :data:`ALLOWED_FUNCTIONS` with a
one-line reason; a module, into :data:`ALLOWED_MODULES`.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path
from support import REPO

PACKAGE = REPO / "kaiwo_ctrl"

MODULE_LIMIT = 400
FUNCTION_LIMIT = 60

#: ``"path/relative/to/kaiwo_ctrl.py::Qualified.name"`` -> why it may be longer.
ALLOWED_FUNCTIONS: dict[str, str] = {}

#: ``"path/relative/to/kaiwo_ctrl.py"`` -> why it may be longer.
ALLOWED_MODULES: dict[str, str] = {
}

_TABLES = (ast.Dict, ast.List, ast.Tuple, ast.Set)


def _table_lines(tree: ast.Module) -> int:
    """Lines taken by module-level assignments of dict/list/tuple/set literals."""
    lines = 0
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, _TABLES):
            lines += node.end_lineno - node.lineno + 1
    return lines


def _functions(tree: ast.Module):
    """``(qualified name, body line span)`` of every function and method, nested ones too."""

    def walk(node: ast.AST, prefix: str):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                yield name, child.end_lineno - child.body[0].lineno + 1
                yield from walk(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, f"{prefix}{child.name}.")
            else:
                yield from walk(child, prefix)

    yield from walk(tree, "")


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


@functools.cache
def _sizes() -> tuple[dict[str, int], dict[str, int]]:
    """Module sizes by path and function sizes by ``path::qualified.name`` (parsed once)."""
    modules, functions = {}, {}
    for path in _modules():
        rel = path.relative_to(PACKAGE).as_posix()
        source = path.read_text()
        tree = ast.parse(source, filename=str(path))
        modules[rel] = len(source.splitlines()) - _table_lines(tree)
        functions.update({f"{rel}::{name}": span for name, span in _functions(tree)})
    return modules, functions


def test_the_walk_sees_the_whole_package():
    rels = set(_sizes()[0])
    assert {"runtime/control/controller.py", "workloads/reconcile/reconciler.py", "queues/plan.py", "cli.py"} <= rels
    assert len(rels) > 100


def _over(sizes: dict[str, int], limit: int, allowed: dict[str, str]) -> list[str]:
    return [f"{name}: {size} lines (limit {limit})" for name, size in sizes.items() if size > limit and name not in allowed]


def test_no_module_over_the_limit():
    long_modules = _over(_sizes()[0], MODULE_LIMIT, ALLOWED_MODULES)
    assert not long_modules, "modules over the limit (split them by responsibility):\n" + "\n".join(long_modules)


def test_no_function_over_the_limit():
    long_functions = _over(_sizes()[1], FUNCTION_LIMIT, ALLOWED_FUNCTIONS)
    assert not long_functions, "functions over the limit (extract well-named helpers):\n" + "\n".join(long_functions)


def test_allow_lists_name_existing_code_and_say_why():
    """An allow-list entry needs a reason and must still be needed (no stale entries)."""
    modules, functions = _sizes()
    for entry, reason in ALLOWED_FUNCTIONS.items():
        assert reason.strip(), entry
        assert functions.get(entry, 0) > FUNCTION_LIMIT, f"{entry} is no longer over the limit: drop it from the list"
    for entry, reason in ALLOWED_MODULES.items():
        assert reason.strip(), entry
        assert modules.get(entry, 0) > MODULE_LIMIT, f"{entry} is no longer over the limit: drop it from the list"


def test_the_measure_counts_bodies_and_exempts_tables():
    """The counting rules themselves, on a small synthetic module."""
    body = "\n".join(f"    x{i} = {i}" for i in range(FUNCTION_LIMIT + 1))
    source = (
        "TABLE = {\n" + "".join(f"    'k{i}': {i},\n" for i in range(10)) + "}\n"
        "def long(\n    a,\n    b,\n):\n" + body + "\n"
        "class C:\n    def short(self):\n        return 1\n"
    )
    tree = ast.parse(source)
    assert _table_lines(tree) == 12
    spans = dict(_functions(tree))
    assert spans == {"long": FUNCTION_LIMIT + 1, "C.short": 1}
