"""The proxies users would pick instead of ours, for bench/bench_proxy.py: nginx and LiteLLM's proxy.

Neither is a dependency of the product. nginx comes from Debian's package
(``nginx-light``), installed with apt-get when missing and this runs as root;
LiteLLM's proxy (``litellm[proxy]``) is installed with pip into the bench's
own virtualenv under ``~/.cache/kaiwo-ctrl/bench-litellm``. When one cannot be
installed, :func:`start_nginx`/:func:`start_litellm` return None and say why.

Both run on loopback in front of the same fake servers as ours, with the
settings a user would choose for a reverse proxy to model servers: nginx with
one worker, upstream keep-alive and no buffering; LiteLLM with one worker, the
servers as four deployments of one model (its router balances them).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

LITELLM_VENV = Path.home() / ".cache" / "kaiwo-ctrl" / "bench-litellm"


def _say(msg: str) -> None:
    print(f"# peers: {msg}", flush=True)


def _wait_http(url: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code < 500:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    return False


def ensure_nginx() -> str | None:
    found = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
    if found:
        return found
    if os.geteuid() != 0:
        _say("nginx is missing and this is not root: no apt-get install; nginx left out")
        return None
    _say("nginx is missing: apt-get install nginx-light (Debian's package)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "nginx-light"]):
        if subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode != 0:
            _say(f"{' '.join(cmd)} failed: nginx left out")
            return None
    return shutil.which("nginx") or "/usr/sbin/nginx"


def start_nginx(port: int, backends: list[str], max_body: str = "1m") -> subprocess.Popen | None:
    """nginx on ``port`` to ``backends``; ``max_body`` is its client_max_body_size (nginx's default 1m)."""
    binary = ensure_nginx()
    if binary is None:
        return None
    d = Path(tempfile.mkdtemp(prefix="bench-nginx-"))
    servers = "".join(f"    server {b};\n" for b in backends)
    (d / "nginx.conf").write_text(
        f"worker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n"
        "events { worker_connections 8192; }\n"
        f"http {{\n  access_log off;\n  client_max_body_size {max_body};\n"
        f"  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n"
        f"  upstream models {{\n{servers}    keepalive 1024;\n  }}\n"
        f"  server {{\n    listen 127.0.0.1:{port} backlog=4096;\n    keepalive_requests 1000000;\n"
        "    location / {\n      proxy_pass http://models;\n      proxy_http_version 1.1;\n"
        "      proxy_set_header Connection \"\";\n      proxy_buffering off;\n      proxy_request_buffering off;\n    }\n  }\n}\n"
    )
    p = subprocess.Popen([binary, "-p", str(d), "-c", str(d / "nginx.conf"), "-g", "daemon off;"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if not _wait_http(f"http://127.0.0.1:{port}/", 20):
        p.terminate()
        _say("nginx did not start: left out")
        return None
    return p


def ensure_litellm() -> Path | None:
    exe = LITELLM_VENV / "bin" / "litellm"
    if exe.exists():
        return exe
    _say(f"installing LiteLLM's proxy (litellm[proxy]) into {LITELLM_VENV} (once)")
    if subprocess.run([sys.executable, "-m", "venv", str(LITELLM_VENV)]).returncode != 0:
        _say("cannot create the LiteLLM venv: LiteLLM left out")
        return None
    r = subprocess.run([str(LITELLM_VENV / "bin" / "pip"), "install", "-q", "litellm[proxy]"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0 or not exe.exists():
        _say(f"pip install litellm[proxy] failed ({r.stderr.strip()[-300:]}): LiteLLM left out")
        return None
    return exe


def start_litellm(port: int, backends: list[str], master_key: str) -> subprocess.Popen | None:
    exe = ensure_litellm()
    if exe is None:
        return None
    d = Path(tempfile.mkdtemp(prefix="bench-litellm-"))
    models = "".join(
        f"  - model_name: bench\n    litellm_params:\n      model: text-completion-openai/bench\n"
        f"      api_base: http://{b}/v1\n      api_key: none\n" for b in backends
    )
    (d / "config.yaml").write_text(f"model_list:\n{models}litellm_settings:\n  telemetry: false\n  drop_params: true\n")
    env = {**os.environ, "LITELLM_LOG": "ERROR", "LITELLM_TELEMETRY": "False", "NO_DOCS": "True", "LITELLM_MASTER_KEY": master_key}
    p = subprocess.Popen([str(exe), "--config", str(d / "config.yaml"), "--host", "127.0.0.1", "--port", str(port),
                          "--num_workers", "1"], stdout=subprocess.DEVNULL, stderr=open(d / "log", "wb"), env=env, cwd=d)  # noqa: SIM115
    if not _wait_http(f"http://127.0.0.1:{port}/health/liveliness", 180):
        p.terminate()
        _say(f"LiteLLM did not start (log: {d / 'log'}): left out")
        return None
    return p


def tree_pids(pid: int) -> list[int]:
    """``pid`` and its descendants (nginx's worker, uvicorn's)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                todo += [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                pass
    return out
