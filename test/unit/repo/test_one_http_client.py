"""One HTTP client in the process: the runtime's (kaiwo_ctrl.runtime.net).

API requests, watches and log streams go through the transport's HTTP/1.1
pool; every other URL (model Pods, adapter loaders, peer proxies, the GPU
exporter, the local plane's set-up) through runtime/net/fetch.py. aiohttp
stays as a *server* (``aiohttp.web``: webhooks, metrics, probes, the adapter
loader). The one aiohttp client is the CLI's WebSocket session (exec,
port-forward: the runtime's client does not speak WebSocket), in
kaiwo_cli/streams.py, which the operator's process never imports. httpx is a
test tool only.

The module walk (:mod:`ast`) fails listing every offender; the subprocess
check imports the operator's entry points and looks at what was loaded.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from support import REPO

ROOT = REPO
PACKAGE = ROOT / "kaiwo_ctrl"

#: The one module that may use aiohttp's client (WebSockets, in the CLI's process).
WEBSOCKET_MODULE = "kaiwo_cli/streams.py"
#: What of aiohttp a module may import elsewhere: its server.
AIOHTTP_SERVER = {"web"}
#: aiohttp client names: creating or calling any of them is a second HTTP client.
CLIENT_NAMES = {"ClientSession", "TCPConnector", "request", "ws_connect", "ClientTimeout"}


def offences(rel: str, tree: ast.AST) -> list[str]:
    """What in one module breaks the one-client rule (``rel``: path under kaiwo_ctrl)."""
    out = []
    ws_ok = rel == WEBSOCKET_MODULE
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "httpx":
                    out.append(f"{rel}:{node.lineno}: imports httpx")
                elif a.name.split(".")[0] == "aiohttp" and a.name != "aiohttp.web" and not ws_ok:
                    out.append(f"{rel}:{node.lineno}: imports {a.name} (only aiohttp.web, the server, may be imported)")
        elif isinstance(node, ast.ImportFrom) and node.module:
            top = node.module.split(".")[0]
            if top == "httpx":
                out.append(f"{rel}:{node.lineno}: imports from httpx")
            elif top == "aiohttp" and not ws_ok:
                names = {a.name for a in node.names}
                if node.module == "aiohttp" and not names <= AIOHTTP_SERVER:
                    out.append(f"{rel}:{node.lineno}: imports {sorted(names - AIOHTTP_SERVER)} from aiohttp")
                elif node.module not in ("aiohttp", "aiohttp.web"):
                    out.append(f"{rel}:{node.lineno}: imports from {node.module}")
        elif isinstance(node, ast.Attribute) and node.attr in CLIENT_NAMES and not ws_ok:
            base = node.value
            if isinstance(base, ast.Name) and base.id == "aiohttp" or node.attr in ("ClientSession", "ws_connect"):
                out.append(f"{rel}:{node.lineno}: uses aiohttp's client ({node.attr})")
    return out


def scan() -> list[str]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        out += offences(rel, ast.parse(path.read_text(), str(path)))
    return out


def test_kaiwo_ctrl_has_one_http_client():
    bad = scan()
    assert not bad, "a second HTTP client in kaiwo_ctrl (use kaiwo_ctrl.runtime.net.fetch):\n" + "\n".join(bad)


def test_the_websocket_session_is_the_one_aiohttp_client():
    tree = ast.parse((PACKAGE / WEBSOCKET_MODULE).read_text())
    sessions = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                and n.func.attr == "ClientSession"]
    assert len(sessions) == 1, "kaiwo_cli/streams.py creates its WebSocket session in ws_session() only"


def test_the_rule_catches_each_kind_of_second_client():
    """The walk is not vacuous: each way in is reported."""
    cases = {
        "import httpx": "imports httpx",
        "from httpx import AsyncClient": "imports from httpx",
        "import aiohttp": "imports aiohttp",
        "from aiohttp import ClientSession": "from aiohttp",
        "from aiohttp.client import ClientSession": "imports from aiohttp.client",
        "import aiohttp.web\ns = aiohttp.ClientSession()": "uses aiohttp's client (ClientSession)",
        "async def f(s):\n    await s.ws_connect('u')": "uses aiohttp's client (ws_connect)",
    }
    for source, message in cases.items():
        found = offences("serving/x.py", ast.parse(source))
        assert any(message in f for f in found), (source, found)
    assert offences("serving/x.py", ast.parse("from aiohttp import web\nimport aiohttp.web")) == []
    assert offences(WEBSOCKET_MODULE, ast.parse("import aiohttp\ns = aiohttp.ClientSession()")) == []


#: What the operator's process (``kaiwo-ctrl run``) imports, eagerly or when it wires its controllers.
OPERATOR_PACKAGES = ("runtime", "settings", "workloads", "queues", "serving", "aim", "monitoring", "webhooks")


def test_the_operator_process_loads_neither_httpx_nor_the_websocket_module():
    code = (
        "import importlib, pkgutil, sys\n"
        "import kaiwo_ctrl.cli, kaiwo_ctrl.operator\n"
        f"for name in {OPERATOR_PACKAGES!r}:\n"
        "    pkg = importlib.import_module('kaiwo_ctrl.' + name)\n"
        "    for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'):\n"
        "        importlib.import_module(m.name)\n"
        "assert 'kaiwo_ctrl.serving.model.adapters' in sys.modules and 'kaiwo_ctrl.monitoring.monitor' in sys.modules\n"
        "bad = [m for m in ('httpx', 'kaiwo_ctrl.kaiwo_cli.streams') if m in sys.modules]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "", f"the operator's process imports {out.stdout.strip()}"
