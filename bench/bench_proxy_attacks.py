#!/usr/bin/env python3
"""Issue 38's attacks and slowhttptest against the model proxy, beside nginx.

Our proxy is bench_proxy.py's (the production ProxyServer and handler with the
limits ``kaiwo-ctrl proxy`` runs with by default, caches filled by hand), from
the tree this script sits in; nginx is Debian's (peers.py: a reverse proxy as
users configure one, no request or answer buffering). Both send to the same
fake model servers on 127.0.0.11-14, which answer ``X-Reply-Bytes`` bytes. Each
(attack, server) pair starts a fresh server process, so every row's RSS starts
from the same state. Loopback only; bounded in count and time (about 4 minutes
with the defaults; ``--quick`` for about 2).

    .venv/bin/python bench/bench_proxy_attacks.py [--attacks pipelined,tiny-headers,...] [--slow-seconds 15]
        [--servers ours,nginx] [--quick]

Set-up (not committed, never a product dependency): ``apt-get install slowhttptest nginx-light``;
run as root, the script installs them itself when missing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
from pathlib import Path

from attacks import ATTACKS, Target, ensure_slowhttptest, measured, print_table, slow_modes, slowhttptest_attack
from bench_proxy import HOSTS, _raise_nofile, _settle, load_avg
from peers import start_nginx

HERE = Path(__file__).resolve().parent
BACKEND_PORT = 18620


async def _backend_main(port: int) -> None:
    """Fake model servers: a JSON answer of ``X-Reply-Bytes`` bytes (default small), any body up to 64 MiB."""
    from kaiwo_ctrl.runtime.net.http1server import Request, Response, Server

    async def handle(request: Request) -> Response:
        size = int(request.header(b"x-reply-bytes") or 0)
        text = b'{"id":"cmpl-1","object":"text_completion","choices":[{"text":"' + b"a" * size + b'","index":0}]}'
        return Response(200, [(b"Content-Type", b"application/json")], text)

    server = Server(handle, max_body_bytes=64 << 20, body_budget=1 << 30)
    for h in HOSTS:
        await server.start(h, port)
    _settle()
    print("ready", flush=True)
    await asyncio.Event().wait()


def spawn_ours(port: int) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, str(HERE / "bench_proxy.py"), "--role=proxy", f"--port={port}",
                          f"--backend-port={BACKEND_PORT}"], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "ready", "our proxy did not start"
    return p


def spawn(server: str, port: int) -> subprocess.Popen | None:
    if server == "ours":
        return spawn_ours(port)
    return start_nginx(port, [f"{h}:{BACKEND_PORT}" for h in HOSTS], max_body="32m")  # our proxy's default limit


def stop(p: subprocess.Popen) -> None:
    p.terminate()
    try:
        p.wait(10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait(5)


def run_suite(servers: list[str], attacks: dict, port: int) -> list:
    rows = []
    for name, attack in attacks.items():
        for server in servers:
            proc = spawn(server, port)
            if proc is None:
                continue
            try:
                with asyncio.Runner() as r:
                    rows.append((name, server, r.run(measured(Target(server, port, proc.pid), attack))))
                print(f"  {name} against {server}: {rows[-1][2]['outcome']}", flush=True)
            finally:
                stop(proc)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--role", choices=["backend"], help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=18610)
    ap.add_argument("--servers", default="ours,nginx")
    ap.add_argument("--attacks", default=",".join([*ATTACKS, *slow_modes(1)]))
    ap.add_argument("--slow-seconds", type=int, default=15, help="length of each slowhttptest run")
    ap.add_argument("--quick", action="store_true", help="slowhttptest runs of 8 s")
    args = ap.parse_args()
    _raise_nofile()
    if args.role == "backend":
        with asyncio.Runner() as r:
            r.run(_backend_main(BACKEND_PORT))
        return 0
    seconds = 8 if args.quick else args.slow_seconds
    chosen = args.attacks.split(",")
    attacks = {k: v for k, v in ATTACKS.items() if k in chosen}
    binary = ensure_slowhttptest() if set(chosen) & set(slow_modes(1)) else None
    if binary:
        attacks.update({m: slowhttptest_attack(binary, m, seconds) for m in slow_modes(seconds) if m in chosen})
    print(f"cpus {os.cpu_count()}; load average {load_avg()} (a shared machine: figures vary with what else runs)", flush=True)
    backend = subprocess.Popen([sys.executable, __file__, "--role=backend"], stdout=subprocess.PIPE, text=True)
    assert backend.stdout is not None and backend.stdout.readline().strip() == "ready"
    try:
        rows = run_suite(args.servers.split(","), attacks, args.port)
    finally:
        stop(backend)
    print_table(rows)
    print(f"\nload average at the end: {load_avg()}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent))
    raise SystemExit(main())
