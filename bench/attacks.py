"""Issue 38's attack suite and Debian's slowhttptest, against any HTTP server on loopback.

Used by bench_proxy_attacks.py (our proxy beside nginx) and bench_http_libs.py (our
HTTP/1.1 server beside uvicorn's httptools protocol and granian). Every attack is bounded
in count and time and sends only to 127.0.0.0/8. Each returns one table row: the server's
RSS (the process tree's) before, at its peak and after the attack's connections closed;
whether a probe client (another source address, a small completion every 0.5 s, 5 s
timeout) was answered throughout; and what the attack itself got back.

The attacks (issue 38):
* ``pipelined``: one connection, 4 KiB receive buffer, 1,000 pipelined completions whose
  answers are 256 KiB each (``X-Reply-Bytes``), none read, for ``hold`` seconds;
* ``tiny-headers``: 50 connections, each a head of 65,000 empty headers (260 KB) never ended;
* ``slow-uploads``: 16 uploads declaring 32 MiB from 127.0.0.1, a byte every 5 s; then a
  4 MiB request from 127.0.0.2: how long until it is answered (20 s at most);
* ``many-headers``: 200 complete requests of 1,000 tiny headers each (20 connections): the status codes;
* slowhttptest ``slow-header`` (-H), ``slow-body`` (-B), ``slow-read`` (-X), ``--slow-seconds`` each.

slowhttptest comes from Debian's package; :func:`ensure_slowhttptest` installs it with
apt-get when missing and this runs as root (never a dependency of the product).
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from peers import tree_pids
from procstat import rss_mib

PROBE_ADDR = "127.0.0.2"  # the probe's (and the 4 MiB request's) source address: another client
BODY = b'{"model":"bench","prompt":"hello","max_tokens":1}'
PATH = "/openai/v1/completions"


@dataclass
class Target:
    """A running server: where it listens and the pid of its process tree's root."""

    name: str
    port: int
    pid: int
    path: str = PATH

    def rss(self) -> float:
        total = 0.0
        for p in tree_pids(self.pid):
            with contextlib.suppress(OSError):
                total += rss_mib(p)
        return total


def request(path: str, body: bytes = BODY, headers: bytes = b"", host: str = "bench") -> bytes:
    return (b"POST %b HTTP/1.1\r\nHost: %b\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%b\r\n%b"
            % (path.encode(), host.encode(), len(body), headers, body))


async def _connect(port: int, source: str = "127.0.0.1", rcvbuf: int = 0) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    s = socket.socket()
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.bind((source, 0))
    s.setblocking(False)
    await asyncio.get_running_loop().sock_connect(s, ("127.0.0.1", port))
    return await asyncio.open_connection(sock=s, limit=1 << 20)


async def exchange(port: int, data: bytes, timeout: float, source: str = PROBE_ADDR) -> int:
    """Send one request, read the answer's status line and its Content-Length body; the status (0: none)."""
    r, w = await _connect(port, source)
    try:
        async with asyncio.timeout(timeout):
            w.write(data)
            await w.drain()
            head = await r.readuntil(b"\r\n\r\n")
            length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            await r.readexactly(length)
            return int(head.split(b" ", 2)[1])
    except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError, IndexError):
        return 0
    finally:
        w.close()


class Prober:
    """A small completion from another source address every 0.5 s while an attack runs."""

    def __init__(self, target: Target) -> None:
        self.target, self.ok, self.total, self.worst = target, 0, 0, 0.0
        self.peak = target.rss()

    async def run(self, stop: asyncio.Event) -> None:
        sampling = asyncio.create_task(self._sample(stop))
        while not stop.is_set():
            t0 = time.perf_counter()
            status = await exchange(self.target.port, request(self.target.path), 5.0)
            self.total += 1
            self.ok += status == 200
            self.worst = max(self.worst, time.perf_counter() - t0)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.5)
        await sampling

    async def _sample(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            self.peak = max(self.peak, self.target.rss())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.2)

    def verdict(self) -> str:
        return f"{self.ok}/{self.total} probes ok, slowest {self.worst:.1f}s"


async def measured(target: Target, attack: Callable[[Target], Coroutine[Any, Any, tuple[str, bool]]]) -> dict[str, Any]:
    """Run ``attack`` with a prober beside it; RSS before, peak, and 2 s after its connections closed."""
    before = target.rss()
    prober = Prober(target)
    stop = asyncio.Event()
    probing = asyncio.create_task(prober.run(stop))
    try:
        outcome, attack_ok = await attack(target)
    finally:
        stop.set()
        await probing
    await asyncio.sleep(2.0)
    after_probe = await exchange(target.port, request(target.path), 5.0)
    return {"before": before, "peak": prober.peak, "after": target.rss(), "available": prober.verdict(),
            "probes_ok": prober.ok == prober.total, "after_probe": after_probe, "outcome": outcome, "attack_ok": attack_ok}


#: The bar a server passes on every attack: the probe answered throughout and after, RSS at most this
#: much above where it started, and the attack's own check (see each attack).
MAX_GROWTH_MIB = 64


def passed(attack: str, row: dict[str, Any]) -> bool:
    return (row["probes_ok"] and row["after_probe"] == 200 and row["peak"] - row["before"] <= MAX_GROWTH_MIB
            and row["attack_ok"])


# ------------------------------------------------------------------ the attacks
async def pipelined(target: Target, hold: float = 10.0, n: int = 1000, reply: int = 256 << 10) -> tuple[str, bool]:
    """Passes on memory alone (the RSS bound)."""
    r, w = await _connect(target.port, rcvbuf=4096)
    one = request(target.path, headers=b"X-Reply-Bytes: %d\r\n" % reply)
    w.write(one * n)  # written by the transport as the server reads; nothing of the answers is read
    await asyncio.sleep(hold)
    sent = n * len(one) - w.transport.get_write_buffer_size()
    closed = r.at_eof()
    w.transport.abort()
    return f"{sent // len(one)} of {n} requests taken by the server{', it closed' if closed else ''}", True


async def tiny_headers(target: Target, hold: float = 10.0, conns: int = 50, count: int = 65000) -> tuple[str, bool]:
    """Passes when no head is still being read after ``hold`` (each refused or closed)."""
    head = b"POST %b HTTP/1.1\r\nHost: bench\r\n" % target.path.encode() + b"a:\r\n" * count  # never ended

    async def one() -> str:
        try:
            r, w = await _connect(target.port)
        except OSError:
            return "refused"
        try:
            w.write(head)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(hold):
                    line = await r.readline()
                    return line.split(b" ", 2)[1].decode() if line.startswith(b"HTTP/") else "closed"
            return "open"
        except (OSError, IndexError):
            return "closed"
        finally:
            w.transport.abort()

    got = Counter(await asyncio.gather(*(one() for _ in range(conns))))
    return ", ".join(f"{k} x{v}" for k, v in sorted(got.items())), "open" not in got


async def slow_uploads(target: Target, conns: int = 16, declared: int = 32 << 20, every: float = 5.0,
                       big: int = 4 << 20, wait: float = 20.0) -> tuple[str, bool]:
    """Passes when the other address's 4 MiB request is answered 200 within 5 s."""
    head = (b"POST %b HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{"
            % (target.path.encode(), declared))
    writers = []
    for _ in range(conns):
        with contextlib.suppress(OSError):
            writers.append((await _connect(target.port))[1])
    for w in writers:
        w.write(head)

    async def trickle() -> None:
        while True:
            await asyncio.sleep(every)
            for w in writers:
                if not w.is_closing():
                    w.write(b" ")

    dripping = asyncio.create_task(trickle())
    await asyncio.sleep(2.0)  # the uploads hold their budget
    body = b'{"model":"bench","prompt":"' + b"x" * (big - 40) + b'"}'
    t0 = time.perf_counter()
    status = await exchange(target.port, request(target.path, body), wait)
    took = time.perf_counter() - t0
    dripping.cancel()
    for w in writers:
        w.transport.abort()
    return f"4 MiB from another address: {status or 'no answer'} after {took:.1f}s", status == 200 and took <= 5.0


async def many_headers(target: Target, conns: int = 20, per_conn: int = 10, count: int = 1000) -> tuple[str, bool]:
    """Passes when no request of 1,000 headers is served (Envoy and hyper allow 100)."""
    headers = b"".join(b"x-h%d: 1\r\n" % i for i in range(count))
    statuses: Counter[int] = Counter()

    async def one() -> None:
        for _ in range(per_conn):
            statuses[await exchange(target.port, request(target.path, headers=headers), 10.0, "127.0.0.1")] += 1

    await asyncio.gather(*(one() for _ in range(conns)))
    return ", ".join(f"{k or 'no answer'} x{v}" for k, v in sorted(statuses.items())), 200 not in statuses


ATTACKS: dict[str, Callable[[Target], Coroutine[Any, Any, tuple[str, bool]]]] = {
    "pipelined": pipelined, "tiny-headers": tiny_headers, "slow-uploads": slow_uploads, "many-headers": many_headers}


# ------------------------------------------------------------------ slowhttptest
def ensure_slowhttptest() -> str | None:
    """Debian's slowhttptest: apt-get install it when missing and root; None (and why) otherwise."""
    found = shutil.which("slowhttptest")
    if found or os.geteuid() != 0 or not shutil.which("apt-get"):
        if not found:
            print("  slowhttptest missing (apt-get install slowhttptest, as root): its modes are left out", flush=True)
        return found
    for cmd in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "slowhttptest"]):
        if subprocess.run(cmd, capture_output=True, check=False).returncode != 0:
            print(f"  {' '.join(cmd)} failed: slowhttptest modes left out", flush=True)
            return None
    return shutil.which("slowhttptest")


def slow_modes(seconds: int) -> dict[str, list[str]]:
    common = ["-i", "5", "-r", "200", "-l", str(seconds), "-p", "3"]
    return {
        "slow-header": ["-H", "-c", "800", "-x", "24", *common],
        "slow-body": ["-B", "-c", "800", "-s", "8192", "-t", "POST", "-f", "application/json", *common],
        "slow-read": ["-X", "-c", "500", "-w", "512", "-y", "1024", "-n", "5", "-z", "32", "-k", "3", *common],
    }


def slowhttptest_attack(binary: str, mode: str, seconds: int) -> Callable[[Target], Coroutine[Any, Any, tuple[str, bool]]]:
    async def attack(target: Target) -> tuple[str, bool]:
        d = Path(tempfile.mkdtemp(prefix="bench-slowhttp-"))
        path = "/openai/v1/models" if mode == "slow-read" else target.path  # slow read needs a GET answer
        argv = [binary, *slow_modes(seconds)[mode], "-u", f"http://127.0.0.1:{target.port}{path}", "-g", "-o", str(d / "s")]
        proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        out, _ = await asyncio.wait_for(proc.communicate(), seconds + 60)
        text = re.sub(r"\x1b\[[0-9;]*m", "", out.decode(errors="replace"))  # its colours
        status = next((line.split("Exit status:", 1)[1].strip() for line in text.splitlines()
                       if "Exit status:" in line), f"exit {proc.returncode}")
        down, peak_conns = _csv_summary(d / "s.csv")
        shutil.rmtree(d, ignore_errors=True)
        return f"slowhttptest: {status}; service unavailable {down}s; up to {peak_conns} connections held", down == 0
    return attack


def _csv_summary(path: Path) -> tuple[int, int]:
    """(seconds slowhttptest's own probe found the service unavailable, most connections connected at once)."""
    try:
        rows = list(csv.DictReader(path.open()))
    except OSError:
        return -1, -1
    down = sum(1 for r in rows if (r.get("service available") or r.get("Service Available") or "").strip() in ("0", "no"))
    conns = max((int(r.get("connected") or r.get("Connected") or 0) for r in rows), default=0)
    return down, conns


def print_table(rows: list[tuple[str, str, dict[str, Any]]]) -> None:
    print(f"\n{'attack':<13} {'server':<19} {'RSS before/peak/after MiB':>27}  {'available during':<30} after  pass  what the attack got")
    for attack, server, r in rows:
        rss = f"{r['before']:.0f} / {r['peak']:.0f} / {r['after']:.0f}"
        after = "ok" if r["after_probe"] == 200 else f"{r['after_probe'] or 'none'}"
        verdict = "yes" if passed(attack, r) else "NO"
        print(f"{attack:<13} {server:<19} {rss:>27}  {r['available']:<30} {after:<6} {verdict:<5} {r['outcome']}", flush=True)
