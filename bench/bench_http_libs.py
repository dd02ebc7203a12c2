#!/usr/bin/env python3
"""The hand-written HTTP/1.1 server and client of kaiwo_ctrl/runtime next to
well-kept libraries, on the proxy's kind of exchange (a small JSON POST, a
small JSON answer, keep-alive), each in a process of its own on uvloop.

* servers (what the proxy's front door costs): kaiwo_ctrl's ``http1server``,
  aiohttp's web server, uvicorn with its httptools protocol (a bare ASGI app);
  the same load (``--clients`` closed-loop clients on the lean pool) against
  each, and the server process's CPU per request;
* clients (what the proxy's upstream hop costs): kaiwo_ctrl's ``http1.Pool``,
  aiohttp's ClientSession, httpcore's AsyncConnectionPool (httpx's transport);
  each sends the same requests to one ``http1server``, and the client
  process's CPU per request.

    .venv/bin/python bench/bench_http_libs.py [--requests 20000] [--clients 64]

A library that is not installed is reported as such and skipped.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import statistics
import subprocess
import sys
import time
from pathlib import Path

from procstat import cpu_seconds

ROOT = Path(__file__).resolve().parents[1]
REPLY = b'{"id":"cmpl-1","object":"text_completion","choices":[{"text":"ok","index":0}]}'
BODY = b'{"model":"bench","prompt":"hello","max_tokens":1}'
SERVERS = {"http1server": None, "aiohttp": "aiohttp", "uvicorn+httptools": "uvicorn"}
CLIENTS = {"http1.Pool": None, "aiohttp": "aiohttp", "httpcore": "httpcore"}


# ------------------------------------------------------------------ servers
async def serve_http1(port: int) -> None:
    from kaiwo_ctrl.runtime.net.http1server import Request, Response, Server

    async def handle(request: Request) -> Response:
        return Response(200, [(b"Content-Type", b"application/json")], REPLY)

    await Server(handle).start("127.0.0.1", port)


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


async def serve_uvicorn(port: int) -> None:
    import uvicorn

    async def app(scope, receive, send):  # a bare ASGI app: the protocol's own cost
        more = True
        while more:
            more = (await receive()).get("more_body", False)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": REPLY})

    cfg = uvicorn.Config(app, host="127.0.0.1", port=port, http="httptools", loop="none", lifespan="off",
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


def available(module: str | None) -> bool:
    return module is None or importlib.util.find_spec(module) is not None


def bench_servers(port: int, clients: int, n: int, rounds: int) -> None:
    print(f"servers: CPU per request of the server process ({clients} closed-loop clients on http1.Pool, {n} requests, "
          f"median of {rounds} interleaved rounds)")
    results: dict[str, list[tuple[float, float]]] = {k: [] for k in SERVERS if available(SERVERS[k])}
    for _ in range(rounds):
        for impl in results:
            srv = spawn("--role=server", f"--impl={impl}", f"--port={port}")
            try:
                assert srv.stdout is not None and srv.stdout.readline().strip() == "ready"
                with _runner() as r:
                    r.run(load_http1(f"127.0.0.1:{port}", "/v1/completions", clients, clients * 10))
                    c0, t0 = cpu_seconds(srv.pid), time.perf_counter()
                    r.run(load_http1(f"127.0.0.1:{port}", "/v1/completions", clients, n))
                    results[impl].append(((cpu_seconds(srv.pid) - c0) / n * 1e6, n / (time.perf_counter() - t0)))
            finally:
                srv.terminate()
                srv.wait(10)
    _report(results, SERVERS)


def bench_clients(port: int, clients: int, n: int, rounds: int) -> None:
    print(f"\nclients: CPU per request of the client process (to one http1server, {clients} concurrent, {n} requests, "
          f"median of {rounds} interleaved rounds)")
    srv = spawn("--role=server", "--impl=http1server", f"--port={port}")
    results: dict[str, list[tuple[float, float]]] = {k: [] for k in CLIENTS if available(CLIENTS[k])}
    try:
        assert srv.stdout is not None and srv.stdout.readline().strip() == "ready"
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
    args = ap.parse_args()
    if args.role == "server":
        role_server(args.impl, args.port)
    elif args.role == "client":
        role_client(args.impl, args.port, args.clients, args.requests)
    else:
        bench_servers(args.port, args.clients, args.requests, args.rounds)
        bench_clients(args.port + 1, args.clients, args.requests, args.rounds)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
