"""No log call passes an ``extra`` key that LogRecord reserves.

``logging`` raises KeyError at the call site for such keys, which would turn
a log line into a crashed reconcile (or, at start-up, a crashed operator).
"""

import ast
import logging
from support import REPO

RESERVED = set(vars(logging.LogRecord("n", 0, "p", 0, "m", (), None))) | {"message", "asctime"}
ROOT = REPO / "kaiwo_ctrl"


def test_no_reserved_extra_keys():
    bad = []
    for path in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            for kw in node.keywords:
                if kw.arg == "extra" and isinstance(kw.value, ast.Dict):
                    for k in kw.value.keys:
                        if isinstance(k, ast.Constant) and k.value in RESERVED:
                            bad.append(f"{path.relative_to(ROOT.parent)}:{node.lineno}: {k.value!r}")
    assert not bad, bad


def test_the_check_sees_a_reserved_key():
    assert {"name", "msg", "args", "module"} <= RESERVED
