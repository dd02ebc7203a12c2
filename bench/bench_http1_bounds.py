#!/usr/bin/env python3
"""The HTTP/1.1 server's per-connection bounds under issue 38's attacks, this tree beside another.

The server (:mod:`kaiwo_ctrl.runtime.net.http1server`, with the proxy's default limits)
runs in a process of its own, from this checkout and from ``--baseline-tree DIR``
(e.g. ``git archive main | tar -x -C DIR``), one after the other in the same run; its
handler answers ``GET /big`` with 256 KiB and echoes the size of anything else. The
attacks, from this process over loopback:

* pipelined: one connection with a 4 KiB receive buffer sends 1,000 ``GET /big`` and
  reads nothing for ``--hold`` seconds;
* endless heads: 50 connections each send a head of 65,000 empty header lines and never
  end it;
* slow uploads: 16 uploads declaring 32 MiB from 127.0.0.1, a byte a second, then a
  4 MiB upload from 127.0.0.2, timed (given up after ``--hold`` * 2 seconds).

Prints the serving process's RSS before and at its peak during each attack (from
/proc/<pid>/status), and what the other client got.

    .venv/bin/python bench/bench_http1_bounds.py [--baseline-tree DIR] [--hold 8]
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import subprocess
import sys
import time
from pathlib import Path

from procstat import rss_mib

HERE = Path(__file__).resolve().parent
MIB = 1 << 20
PROXY_LIMITS = dict(max_body_bytes=32 * MIB, body_budget=512 * MIB, budget_wait=120.0, max_header_bytes=64 << 10,
                    head_timeout=30.0, body_idle_timeout=30.0, max_headers=100, max_pipelined=16,
                    min_body_rate=8 << 10, body_share=128 * MIB)


async def serve(port: int) -> None:
    import inspect

    from kaiwo_ctrl.runtime.net.http1server import Response, Server

    big = b"x" * (256 << 10)

    async def handler(request):
        if request.path == "/big":
            return Response(200, [(b"Content-Type", b"text/plain")], big)
        return Response(200, [(b"Content-Type", b"text/plain")], b"%d" % len(request.body))

    known = inspect.signature(Server).parameters
    server = Server(handler, **{k: v for k, v in PROXY_LIMITS.items() if k in known})  # an older tree lacks the new limits
    await server.start("127.0.0.1", port)
    print("ready", flush=True)
    await asyncio.Event().wait()


async def connect(port: int, source: str = "127.0.0.1", rcvbuf: int | None = None):
    s = socket.socket()
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.bind((source, 0))
    s.setblocking(False)
    await asyncio.get_running_loop().sock_connect(s, ("127.0.0.1", port))
    return await asyncio.open_connection(sock=s)


class Peak:
    def __init__(self, pid: int) -> None:
        self.pid, self.before = pid, rss_mib(pid)
        self.peak = self.before
        self.task = asyncio.create_task(self.run())

    async def run(self) -> None:
        while True:
            self.peak = max(self.peak, rss_mib(self.pid))
            await asyncio.sleep(0.05)


async def other(port: int, source: str, size: int, timeout: float) -> str:
    t0 = time.monotonic()
    try:
        r, w = await connect(port, source)
        w.write(b"POST /x HTTP/1.1\r\nHost: a\r\nConnection: close\r\nContent-Length: %d\r\n\r\n" % size + b"y" * size)
        out = await asyncio.wait_for(r.read(200), timeout)
        w.close()
        return f"{out[9:12].decode() or 'closed'} in {time.monotonic() - t0:.2f} s"
    except (TimeoutError, ConnectionError):
        return f"no answer in {timeout:.0f} s"


async def attacks(port: int, pid: int, hold: float) -> list[tuple[str, float, float, str]]:
    rows = []
    p = Peak(pid)
    r, w = await connect(port, rcvbuf=4096)
    w.write(b"GET /big HTTP/1.1\r\nHost: a\r\n\r\n" * 1000)
    await asyncio.sleep(hold)
    rows.append(("1,000 pipelined 256 KiB answers, unread", p.before, p.peak, await other(port, "127.0.0.2", 10, hold)))
    w.close()
    p.task.cancel()
    await asyncio.sleep(1)

    p = Peak(pid)
    conns = [await connect(port) for _ in range(50)]
    for _, cw in conns:
        cw.write(b"POST /x HTTP/1.1\r\nHost: a\r\n" + b"a:\r\n" * 65000)
    await asyncio.sleep(hold)
    rows.append(("50 endless heads of 65,000 empty headers", p.before, p.peak, await other(port, "127.0.0.2", 10, hold)))
    for _, cw in conns:
        cw.close()
    p.task.cancel()
    await asyncio.sleep(1)

    p = Peak(pid)
    slow = [await connect(port) for _ in range(16)]
    for _, sw in slow:
        sw.write(b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n" % (32 * MIB))

    async def drip() -> None:
        while True:
            await asyncio.sleep(1)
            for _, sw in slow:
                sw.write(b"z")

    d = asyncio.create_task(drip())
    await asyncio.sleep(1)
    rows.append(("16 slow 32 MiB uploads, then 4 MiB from another address", p.before, p.peak,
                 await other(port, "127.0.0.2", 4 * MIB, hold * 2)))
    d.cancel()
    for _, sw in slow:
        sw.close()
    p.task.cancel()
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--role", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=18590)
    ap.add_argument("--tree", help=argparse.SUPPRESS)
    ap.add_argument("--baseline-tree", metavar="DIR")
    ap.add_argument("--hold", type=float, default=8.0)
    args = ap.parse_args()
    if args.role == "server":
        asyncio.run(serve(args.port))
        return 0
    trees = [("this tree", str(HERE.parent))] + ([("baseline", str(Path(args.baseline_tree).resolve()))] if args.baseline_tree else [])
    for i, (name, tree) in enumerate(trees):
        port = args.port + i
        proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--role=server", f"--port={port}", f"--tree={tree}"],
                                stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
            rows = asyncio.run(attacks(port, proc.pid, args.hold))
        finally:
            proc.terminate()
            proc.wait(10)
        print(f"\n{name} ({tree})")
        print(f"{'attack':<58}{'RSS before':>11}{'peak':>8}{'growth':>8}   another client")
        for label, before, peak, got in rows:
            print(f"{label:<58}{before:>9.0f} M{peak:>6.0f} M{peak - before:>6.0f} M   {got}")
    return 0


if __name__ == "__main__":
    _tree = next((a.partition("=")[2] for a in sys.argv if a.startswith("--tree=")), None)
    sys.path.insert(0, _tree or str(HERE.parent))
    raise SystemExit(main())
