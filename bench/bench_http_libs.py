#!/usr/bin/env python3
"""The hand-written HTTP/1.1 server and client of kaiwo_ctrl/runtime next to
well-kept libraries, on the proxy's kind of exchange (a small JSON POST, a
small JSON answer, keep-alive), each in a process of its own on uvloop.

* servers (what the proxy's front door costs): kaiwo_ctrl's ``http1server`` (with
  the limits ``kaiwo-ctrl proxy`` gives it), aiohttp's web server, uvicorn with its
  httptools protocol and granian (its Rust HTTP/1.1 server), both with a bare ASGI
  app; the same load (1 and ``--clients`` closed-loop clients on the lean pool)
  against each, and the server process tree's CPU per request;
* attacks (does our server earn its keep? issue 38): issue 38's attack suite and
  slowhttptest's slow-header, slow-body and slow-read modes (bench/attacks.py)
  against http1server, uvicorn+httptools and granian, and the decision rule: a
  library that passes every attack at no more than 1.2x our CPU per request
  should replace our server;
* clients (what the proxy's upstream hop costs): kaiwo_ctrl's ``http1.Pool``,
  aiohttp's ClientSession, httpcore's AsyncConnectionPool (httpx's transport);
  each sends the same requests to one ``http1server``, and the client
  process's CPU per request.

    .venv/bin/python bench/bench_http_libs.py [--requests 20000] [--clients 64] [--no-attacks] [--only-servers]

A library that is not installed is reported as such and skipped.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

from procstat import cpu_seconds, cpu_seconds_fine

ROOT = Path(__file__).resolve().parents[1]
REPLY = b'{"id":"cmpl-1","object":"text_completion","choices":[{"text":"ok","index":0}]}'
BODY = b'{"model":"bench","prompt":"hello","max_tokens":1}'
SERVERS = {"http1server": None, "aiohttp": "aiohttp", "uvicorn+httptools": "uvicorn", "granian": "granian"}
#: The servers the attack suite and the decision compare (aiohttp's server was replaced already).
CONTENDERS = ("http1server", "uvicorn+httptools", "granian")
CLIENTS = {"http1.Pool": None, "aiohttp": "aiohttp", "httpcore": "httpcore"}


# ------------------------------------------------------------------ servers
def _reply(size: int) -> bytes:
    return REPLY if not size else b'{"choices":[{"text":"' + b"a" * size + b'"}]}'


async def serve_http1(port: int) -> None:
    """Our server as the proxy builds it: the limits of ``kaiwo-ctrl proxy``'s defaults."""
    from prometheus_client import CollectorRegistry

    from kaiwo_ctrl.runtime.cache.informer import Informer
    from kaiwo_ctrl.kinds import MODELS
    from kaiwo_ctrl.runtime.net.http1server import Request, Response
    from kaiwo_ctrl.serving.routing.endpoints import EndpointTracker
    from kaiwo_ctrl.serving.proxy.handler import ProxyHandler
    from kaiwo_ctrl.serving.limits import ProxyLimits
    from kaiwo_ctrl.serving.routing.metrics import ProxyMetrics
    from kaiwo_ctrl.serving.routing.resolve import Resolver
    from kaiwo_ctrl.serving.proxy.server import ProxyServer

    async def handle(request: Request) -> Response:
        return Response(200, [(b"Content-Type", b"application/json")], _reply(int(request.header(b"x-reply-bytes") or 0)))

    handler = ProxyHandler(Resolver(Informer(None, MODELS)), EndpointTracker(), ProxyMetrics(CollectorRegistry()), None,
                           limits=ProxyLimits())
    await ProxyServer(handler, ("127.0.0.1", port))._server(handle).start("127.0.0.1", port)


async def serve_aiohttp(port: int) -> None:
    from aiohttp import web

    async def handle(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=REPLY, content_type="application/json")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()


async def asgi_app(scope, receive, send):  # a bare ASGI app: the protocol's own cost (uvicorn and granian)
    if scope["type"] != "http":
        return
    more = True
    while more:
        more = (await receive()).get("more_body", False)
    size = next((int(v) for k, v in scope["headers"] if k == b"x-reply-bytes"), 0)
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": _reply(size)})


async def serve_uvicorn(port: int) -> None:
    import uvicorn

    cfg = uvicorn.Config(asgi_app, host="127.0.0.1", port=port, http="httptools", loop="none", lifespan="off",
                         access_log=False, log_level="warning")
    asyncio.create_task(uvicorn.Server(cfg).serve())
    await asyncio.sleep(0.5)


# ------------------------------------------------------------------ clients
def _requests(n: int, seconds: float):
    """Request numbers up to ``n``, or fewer once ``seconds`` have passed (a slow client is timed, not waited for)."""
    end = time.perf_counter() + seconds
    for i in range(n):
        if time.perf_counter() > end:
            return
        yield i


async def load_http1(url_host: str, path: str, clients: int, n: int) -> int:
    from kaiwo_ctrl.runtime.net.http1 import Pool

    pool = Pool(max_idle_per_host=1024)
    it = _requests(n, MAX_SECONDS)
    headers = [(b"Content-Type", b"application/json")]
    done = 0

    async def worker() -> None:
        nonlocal done
        for _ in it:
            async with await pool.request("POST", url_host, path, headers, BODY) as r:
                await r.read()
            done += 1

    await asyncio.gather(*(worker() for _ in range(clients)))
    await pool.close()
    return done


async def load_aiohttp(url_host: str, path: str, clients: int, n: int) -> int:
    import aiohttp

    it = _requests(n, MAX_SECONDS)
    done = 0
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=clients)) as s:
        async def worker() -> None:
            nonlocal done
            for _ in it:
                async with s.post(f"http://{url_host}{path}", data=BODY, headers={"Content-Type": "application/json"}) as r:
                    await r.read()
                done += 1

        await asyncio.gather(*(worker() for _ in range(clients)))
    return done


async def load_httpcore(url_host: str, path: str, clients: int, n: int) -> int:
    import httpcore

    it = _requests(n, MAX_SECONDS)
    done = 0
    async with httpcore.AsyncConnectionPool(max_connections=clients) as pool:
        async def worker() -> None:
            nonlocal done
            for _ in it:
                await pool.request("POST", f"http://{url_host}{path}", headers={"Content-Type": "application/json"}, content=BODY)
                done += 1

        await asyncio.gather(*(worker() for _ in range(clients)))
    return done


MAX_SECONDS = 15.0
SERVE = {"http1server": serve_http1, "aiohttp": serve_aiohttp, "uvicorn+httptools": serve_uvicorn}
LOAD = {"http1.Pool": load_http1, "aiohttp": load_aiohttp, "httpcore": load_httpcore}


def _runner():
    from kaiwo_ctrl.runtime.process.loop import event_loop_factory

    return asyncio.Runner(loop_factory=event_loop_factory())


def role_server(impl: str, port: int) -> None:
    async def main() -> None:
        await SERVE[impl](port)
        print("ready", flush=True)
        await asyncio.Event().wait()

    with _runner() as r:
        r.run(main())


def role_client(impl: str, port: int, clients: int, n: int) -> None:
    """Warm up, then print the CPU seconds per request of this process and the rate."""
    async def main() -> None:
        await LOAD[impl](f"127.0.0.1:{port}", "/v1/completions", clients, clients * 10)
        c0, t0 = cpu_seconds(), time.perf_counter()
        done = await LOAD[impl](f"127.0.0.1:{port}", "/v1/completions", clients, n)
        print(f"{(cpu_seconds() - c0) / done * 1e6:.1f} {done / (time.perf_counter() - t0):.0f}", flush=True)

    with _runner() as r:
        r.run(main())


def spawn(*args: str) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, __file__, *args], stdout=subprocess.PIPE, text=True)
    return p


def start_server(impl: str, port: int) -> subprocess.Popen:
    """A server process listening on ``port``: granian through its own command line (a worker
    process under it, uvloop), the others in a role of this script."""
    if impl != "granian":
        srv = spawn("--role=server", f"--impl={impl}", f"--port={port}")
        assert srv.stdout is not None and srv.stdout.readline().strip() == "ready", f"{impl} did not start"
        return srv
    srv = subprocess.Popen([str(Path(sys.executable).parent / "granian"), "--interface", "asgi", "--host", "127.0.0.1",
                            "--port", str(port), "--workers", "1", "--runtime-threads", "1", "--http", "1", "--no-ws",
                            "--loop", "uvloop", "--log-level", "warning", "--working-dir", str(ROOT / "bench"),
                            "bench_http_libs:asgi_app"], stdout=subprocess.DEVNULL)
    end = time.monotonic() + 30
    while time.monotonic() < end:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return srv
        time.sleep(0.1)
    srv.kill()
    raise RuntimeError("granian did not start")


def stop_server(srv: subprocess.Popen) -> None:
    srv.terminate()
    try:
        srv.wait(10)
    except subprocess.TimeoutExpired:
        srv.kill()
        srv.wait(5)


def tree_cpu(pid: int) -> float:
    from peers import tree_pids

    return sum(cpu_seconds_fine(p) for p in tree_pids(pid))


def available(module: str | None) -> bool:
    return module is None or importlib.util.find_spec(module) is not None


def bench_servers(port: int, clients_list: list[int], n: int, rounds: int) -> dict[tuple[str, int], float]:
    """CPU per request (us) of each server process tree, per number of clients; printed, and returned."""
    out: dict[tuple[str, int], float] = {}
    for clients in clients_list:
        reqs = n if clients > 1 else max(n // 4, 1000)  # one client is slow: fewer requests, same statistics
        print(f"servers: CPU per request of the server process tree ({clients} closed-loop client(s) on http1.Pool, "
              f"{reqs} requests, median of {rounds} interleaved rounds)", flush=True)
        results: dict[str, list[tuple[float, float]]] = {k: [] for k in SERVERS if available(SERVERS[k])}
        for _ in range(rounds):
            for impl in results:
                srv = start_server(impl, port)
                try:
                    with _runner() as r:
                        r.run(load_http1(f"127.0.0.1:{port}", "/v1/completions", clients, clients * 10 + 100))
                        c0, t0 = tree_cpu(srv.pid), time.perf_counter()
                        done = r.run(load_http1(f"127.0.0.1:{port}", "/v1/completions", clients, reqs))
                        results[impl].append(((tree_cpu(srv.pid) - c0) / done * 1e6, done / (time.perf_counter() - t0)))
                finally:
                    stop_server(srv)
        _report(results, SERVERS)
        out.update({(impl, clients): statistics.median(c for c, _ in v) for impl, v in results.items()})
    return out


def bench_attacks(port: int, slow_seconds: int) -> dict[str, bool]:
    """Issue 38's attacks and slowhttptest against each contender; whether each passed every one."""
    from attacks import ATTACKS, Target, ensure_slowhttptest, measured, passed, print_table, slow_modes, slowhttptest_attack

    attacks = dict(ATTACKS)
    binary = ensure_slowhttptest()
    if binary:
        attacks.update({m: slowhttptest_attack(binary, m, slow_seconds) for m in slow_modes(slow_seconds)})
    rows = []
    for name, attack in attacks.items():
        for impl in (c for c in CONTENDERS if available(SERVERS[c])):
            srv = start_server(impl, port)
            try:
                with asyncio.Runner() as r:
                    rows.append((name, impl, r.run(measured(Target(impl, port, srv.pid, "/v1/completions"), attack))))
                print(f"  {name} against {impl}: {rows[-1][2]['outcome']}", flush=True)
            finally:
                stop_server(srv)
    print_table(rows)
    verdict: dict[str, bool] = {}
    for name, impl, row in rows:
        verdict[impl] = verdict.get(impl, True) and passed(name, row)
    return verdict


def decide(cpu: dict[tuple[str, int], float], verdict: dict[str, bool], clients_list: list[int]) -> None:
    """Issue 38's rule: a library that passes every attack at no more than 1.2x our CPU per request replaces ours."""
    print("\ndecision (issue 38: replace our server with a library that passes every attack at <= 1.2x our CPU/request):")
    for impl in CONTENDERS:
        if impl == "http1server" or impl not in verdict:
            continue
        ratios = [cpu[(impl, c)] / cpu[("http1server", c)] for c in clients_list if (impl, c) in cpu and ("http1server", c) in cpu]
        cheap = bool(ratios) and max(ratios) <= 1.2
        ratio_text = ", ".join(f"{r:.2f}x at {c}" for r, c in zip(ratios, clients_list, strict=False))
        print(f"  {impl:<20} attacks {'all passed' if verdict[impl] else 'not all passed'}; CPU/request {ratio_text} ours "
              f"-> {'REPLACE ours with it' if verdict[impl] and cheap else 'keep ours'}")
    print(f"  {'http1server':<20} attacks {'all passed' if verdict.get('http1server') else 'not all passed'} (ours)")


def bench_clients(port: int, clients: int, n: int, rounds: int) -> None:
    print(f"\nclients: CPU per request of the client process (to one http1server, {clients} concurrent, {n} requests, "
          f"median of {rounds} interleaved rounds)")
    srv = start_server("http1server", port)
    results: dict[str, list[tuple[float, float]]] = {k: [] for k in CLIENTS if available(CLIENTS[k])}
    try:
        for _ in range(rounds):
            for impl in results:
                out = subprocess.run([sys.executable, __file__, "--role=client", f"--impl={impl}", f"--port={port}",
                                      f"--clients={clients}", f"--requests={n}"], capture_output=True, text=True, check=True)
                cpu, rate = out.stdout.split()
                results[impl].append((float(cpu), float(rate)))
    finally:
        srv.terminate()
        srv.wait(10)
    _report(results, CLIENTS)


def _report(results: dict[str, list[tuple[float, float]]], impls: dict[str, str | None]) -> None:
    for impl, module in impls.items():
        if impl not in results:
            print(f"  {impl:<20} not installed ({module})")
            continue
        cpu = statistics.median(c for c, _ in results[impl])
        rate = statistics.median(r for _, r in results[impl])
        print(f"  {impl:<20} {cpu:8.1f} us CPU/request  {rate:8.0f} req/s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--role", choices=["server", "client"], help=argparse.SUPPRESS)
    ap.add_argument("--impl", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=18530)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--attacks", action=argparse.BooleanOptionalAction, default=True,
                    help="also run issue 38's attacks and slowhttptest against the contenders, and decide")
    ap.add_argument("--slow-seconds", type=int, default=10, help="length of each slowhttptest run")
    ap.add_argument("--only-servers", action="store_true", help="servers (and attacks), not the clients")
    args = ap.parse_args()
    if args.role == "server":
        role_server(args.impl, args.port)
    elif args.role == "client":
        role_client(args.impl, args.port, args.clients, args.requests)
    else:
        print(f"cpus {os.cpu_count()}; load average {'/'.join(f'{x:.2f}' for x in os.getloadavg())} "
              "(a shared machine: figures vary with what else runs)", flush=True)
        clients_list = sorted({1, args.clients})
        cpu = bench_servers(args.port, clients_list, args.requests, args.rounds)
        if args.attacks:
            decide(cpu, bench_attacks(args.port + 2, args.slow_seconds), clients_list)
        if not args.only_servers:
            bench_clients(args.port + 1, args.clients, args.requests, args.rounds)
        print(f"load average at the end: {'/'.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
