#!/usr/bin/env python3
"""Peak memory of the proxy under slow clients with large bodies.

``--clients`` (200) clients each upload a ``--body-mib`` (20 MiB) body to the
proxy at the same time, slowly (the body spread over ``--send-s`` seconds, in
64 KiB writes), and wait for the answer. ``--form json`` (the default) posts a
JSON completion request (held whole by the proxy: routing needs its model);
``--form multipart`` posts an audio transcription form, its ``model`` part
first, then the file (streamed through by the proxy). The proxy is the one of
bench_proxy.py (the production server and handler, caches filled by hand), run
from the tree this script sits in; the model servers are bench_proxy.py's for
JSON and, for forms, sinks that read and drop the upload as it comes.

``--before-tree DIR`` first runs the same load against the proxy of another
checkout (e.g. ``git archive main | tar -x -C DIR``), so both figures come
from one run on one machine.

Prints, per proxy, how many uploads were answered 200 (and with what else),
and the proxy's peak RSS (VmHWM) against its RSS before the load.

    .venv/bin/python bench/bench_proxy_memory.py [--clients 200] [--body-mib 20] [--send-s 10] \\
        [--form json|multipart] [--before-tree DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from bench_proxy import HOSTS, PORT_BASE
from procstat import peak_rss_mib, rss_mib

HERE = Path(__file__).resolve().parent
BOUNDARY = b"bench-7MA4YWxkTrZu0gW"


def spawn(role: str, *args: str, tree: Path = HERE.parent) -> subprocess.Popen:
    script = tree / "bench" / ("bench_proxy_memory.py" if role == "sink" else "bench_proxy.py")
    p = subprocess.Popen([sys.executable, str(script), f"--role={role}", *args], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "ready", f"{role} did not start"
    return p


def framing(form: str, size: int) -> tuple[bytes, bytes, bytes]:
    """(request head, the body's start, its end) of a ``size``-byte body; filler goes between."""
    if form == "json":
        path, ctype, prefix, suffix = b"/openai/v1/completions", b"application/json", b'{"model":"bench","prompt":"', b'"}'
    else:
        path, ctype = b"/openai/v1/audio/transcriptions", b"multipart/form-data; boundary=" + BOUNDARY
        prefix = (b'--%b\r\nContent-Disposition: form-data; name="model"\r\n\r\nbench\r\n'
                  b'--%b\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n'
                  b"Content-Type: audio/wav\r\n\r\n" % (BOUNDARY, BOUNDARY))
        suffix = b"\r\n--%b--\r\n" % BOUNDARY
    head = (b"POST %b HTTP/1.1\r\nHost: proxy\r\nContent-Type: %b\r\n"
            b"Connection: close\r\nContent-Length: %d\r\n\r\n" % (path, ctype, size))
    return head, prefix, suffix


async def upload(port: int, size: int, send_s: float, form: str, slice_bytes: int = 64 << 10) -> str:
    """One slow client: the head, then the body in slices spread over ``send_s``, reading
    the answer meanwhile (as curl does: an early 413 or 503 stops the upload); returns its status."""
    head, prefix, suffix = framing(form, size)
    filler = size - len(prefix) - len(suffix)
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


async def run(label: str, port: int, proxy_pid: int, clients: int, size: int, send_s: float, form: str) -> None:
    rss0 = rss_mib(proxy_pid)
    t0 = time.perf_counter()
    results = await asyncio.gather(*(upload(port, size, send_s, form) for _ in range(clients)))
    elapsed = time.perf_counter() - t0
    outcome = ", ".join(f"{k}: {v}" for k, v in sorted(Counter(results).items()))
    print(f"{label}: {clients} clients x {size / 2**20:.0f} MiB {form} bodies, each sent over {send_s:g}s: answers {outcome}; "
          f"{elapsed:.1f}s in all; proxy RSS {rss0:.0f} MiB before, peak {peak_rss_mib(proxy_pid):.0f} MiB", flush=True)


async def _sink_main() -> None:
    """Model servers that read an upload as it comes, drop it, and answer a small JSON."""
    reply = b'{"text":"ok"}'

    async def serve(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await r.readuntil(b"\r\n\r\n")
                m = re.search(rb"(?i)\r\ncontent-length:\s*(\d+)", head)
                left = int(m.group(1)) if m else 0
                while left:
                    chunk = await r.read(min(left, 256 << 10))
                    if not chunk:
                        return
                    left -= len(chunk)
                w.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%b" % (len(reply), reply))
                await w.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            w.close()

    for h in HOSTS:
        await asyncio.start_server(serve, h, PORT_BASE, backlog=4096)
    print("ready", flush=True)
    await asyncio.Event().wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--role", choices=["sink"], help=argparse.SUPPRESS)
    ap.add_argument("--clients", type=int, default=200)
    ap.add_argument("--body-mib", type=float, default=20)
    ap.add_argument("--send-s", type=float, default=10.0, help="seconds each client takes to send its body")
    ap.add_argument("--form", choices=["json", "multipart"], default="json")
    ap.add_argument("--before-tree", type=Path, help="also measure the proxy of this checkout, first")
    ap.add_argument("--port", type=int, default=18490)
    args = ap.parse_args()
    if args.role == "sink":
        asyncio.run(_sink_main())
        return 0
    backend = spawn("backend", "--service-ms=0") if args.form == "json" else spawn("sink")
    trees = ([("before", args.before_tree.resolve())] if args.before_tree else []) + [("this tree", HERE.parent)]
    try:
        for label, tree in trees:
            proxy = spawn("proxy", f"--port={args.port}", tree=tree)
            try:
                asyncio.run(run(f"{label} ({tree})", args.port, proxy.pid, args.clients, int(args.body_mib * 2**20),
                                args.send_s, args.form))
            finally:
                proxy.terminate()
                proxy.wait(10)
    finally:
        backend.terminate()
        backend.wait(10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
