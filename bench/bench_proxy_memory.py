#!/usr/bin/env python3
"""Peak memory of the proxy under slow clients with large bodies.

``--clients`` (200) clients each upload a ``--body-mib`` (20 MiB) JSON body to
the proxy at the same time, slowly (the body spread over ``--send-s``
seconds, in 64 KiB writes), and wait for the answer. The proxy and the fake
model servers are the ones of bench_proxy.py (the proxy's production server
and handler, caches filled by hand), run from the tree this script sits in.

Prints how many uploads were answered 200, and with what else, and the
proxy's peak RSS (VmHWM) against its RSS before the load.

    .venv/bin/python bench/bench_proxy_memory.py [--clients 200] [--body-mib 20] [--send-s 10]
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from procstat import peak_rss_mib, rss_mib

BENCH_PROXY = Path(__file__).resolve().parent / "bench_proxy.py"


def spawn(role: str, *args: str) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, str(BENCH_PROXY), f"--role={role}", *args], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "ready", f"{role} did not start"
    return p


async def upload(port: int, size: int, send_s: float, slice_bytes: int = 64 << 10) -> str:
    """One slow client: the head, then the body in slices spread over ``send_s``, reading
    the answer meanwhile (as curl does: an early 413 or 503 stops the upload); returns its status."""
    prefix = b'{"model":"bench","prompt":"'
    suffix = b'"}'
    filler = size - len(prefix) - len(suffix)
    head = (b"POST /openai/v1/completions HTTP/1.1\r\nHost: proxy\r\nContent-Type: application/json\r\n"
            b"Connection: close\r\nContent-Length: %d\r\n\r\n" % size)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return "connect error"

    async def send() -> None:
        writer.write(head + prefix)
        pause = send_s / max(1, filler // slice_bytes)
        piece = b"x" * slice_bytes
        sent = 0
        while sent < filler:
            n = min(slice_bytes, filler - sent)
            writer.write(piece[:n])
            sent += n
            await writer.drain()
            await asyncio.sleep(pause)
        writer.write(suffix)
        await writer.drain()

    sender = asyncio.create_task(send())
    try:
        line = await asyncio.wait_for(reader.readline(), 600)
        return line.split(b" ")[1].decode() if line.startswith(b"HTTP/1.1 ") else "closed"
    except (OSError, asyncio.IncompleteReadError, TimeoutError):
        return "broken"
    finally:
        sender.cancel()
        writer.close()


async def run(port: int, proxy_pid: int, clients: int, size: int, send_s: float) -> None:
    rss0 = rss_mib(proxy_pid)
    t0 = time.perf_counter()
    results = await asyncio.gather(*(upload(port, size, send_s) for _ in range(clients)))
    elapsed = time.perf_counter() - t0
    outcome = ", ".join(f"{k}: {v}" for k, v in sorted(Counter(results).items()))
    print(f"{clients} clients x {size / 2**20:.0f} MiB JSON bodies, each sent over {send_s:g}s: answers {outcome}; "
          f"{elapsed:.1f}s in all; proxy RSS {rss0:.0f} MiB before, peak {peak_rss_mib(proxy_pid):.0f} MiB", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=200)
    ap.add_argument("--body-mib", type=float, default=20)
    ap.add_argument("--send-s", type=float, default=10.0, help="seconds each client takes to send its body")
    ap.add_argument("--port", type=int, default=18490)
    args = ap.parse_args()
    backend = spawn("backend", "--service-ms=0")
    proxy = spawn("proxy", f"--port={args.port}")
    try:
        asyncio.run(run(args.port, proxy.pid, args.clients, int(args.body_mib * 2**20), args.send_s))
    finally:
        for p in (proxy, backend):
            p.terminate()
            p.wait(10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
