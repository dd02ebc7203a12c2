#!/usr/bin/env python3
"""Benchmark of the OpenAI-compatible proxy: added latency, throughput, SSE streams, PrefixHash.

Three processes: fake OpenAI servers on loopback addresses (127.0.0.11...),
the proxy (the production handler and server, its Model and Pod caches filled
directly instead of from an apiserver), and this load generator. Each phase
runs the same load directly against the servers and through the proxy, so
"added latency" is the difference of the two distributions at p50 and p99.

The fake servers behave like a model server: a non-streaming reply comes after
``--service-ms`` (20 ms on average, each reply's drawn from ±``--service-jitter``
(50 %) of it), an SSE stream sends its first chunk after such a time and then
``--chunks`` more, ``--chunk-ms`` (5 ms) apart. Added latency is
measured against that, as LLM proxies' published overheads are (a request
header sets the service time per request).

Prints:
* added latency, per concurrency (1, 64, 512 closed-loop clients):
  non-streaming latency and SSE time-to-first-byte, direct vs proxy, p50/p99,
  and the proxy's CPU per request in that run;
* saturation: instant servers (service time 0) and 64 closed-loop clients,
  requests/s direct vs proxy and the proxy's CPU per request. On a shared
  2-core machine this is a CPU figure: the "latency" of such a run is queueing
  behind the three processes' CPU (Little's law: clients / throughput);
* 2,000 concurrent SSE streams held open through one proxy process (errors,
  proxy peak RSS), and PrefixHash quality for a multi-tenant prompt mix (share
  of requests on their prefix's home endpoint, max/mean load);
* peers (``--peers``, on by default; ``--only-peers`` for just this part):
  ours, nginx (Debian's package) and LiteLLM's proxy (from PyPI, in the
  bench's own venv) in front of the same instant servers, with the same client,
  interleaved round by round: added p50/p99 at 1/64/512 clients, CPU per
  proxied request (the process and its children), and saturation throughput
  (bench/peers.py installs and starts them, and says when one is left out);
* streamed chunks (``--only-chunks``): ours and nginx relaying the same SSE
  streams (``--stream-chunks`` events, ``--chunk-ms`` apart), CPU per relayed
  event at 1 and 64 streams at once;
* the load average before and after.

    .venv/bin/python bench/bench_proxy.py [--quick] [--service-ms 20] [--chunk-ms 5] [--only-peers] [--baseline-tree DIR]
    .venv/bin/python bench/bench_proxy.py --only-chunks [--quick] [--stream-chunks 100] [--chunk-ms 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import resource
import secrets
import subprocess
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from procstat import cpu_seconds_fine as cpu_seconds, peak_rss_mib

HOSTS = [f"127.0.0.{11 + i}" for i in range(4)]
PORT_BASE = 18400
REPLY = orjson.dumps({"id": "cmpl-1", "object": "text_completion", "created": 1700000000, "model": "bench",
                      "choices": [{"text": "ok", "index": 0, "logprobs": None, "finish_reason": "length"}],
                      "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})


def _raise_nofile() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _loop_factory():
    from kaiwo_ctrl.runtime.process.loop import event_loop_factory

    return event_loop_factory()


# ------------------------------------------------------------------ backends
async def _backend_main(service_s: float, chunk_s: float, chunks: int, jitter: float, port: int = PORT_BASE) -> None:
    """The fake model servers, on the lean server of kaiwo_ctrl/runtime/net/http1server.py
    (about a third of aiohttp's CPU per request): real model servers run on other
    machines, so the less of the 2 cores they take here, the more the figures
    measure the proxy and not the harness."""
    from kaiwo_ctrl.runtime.net.http1server import Request, Response, Server

    rng = random.Random(7)
    json_type = [(b"Content-Type", b"application/json")]

    async def handle(request: Request) -> Response | Any:
        body = request.body
        service = request.header(b"x-service-ms")
        wait = float(service) / 1000 if service is not None else service_s
        if wait and jitter:
            # replies differ in length: without this, closed-loop clients move
            # in lockstep and every reply batch reaches the proxy at once
            wait *= rng.uniform(1 - jitter, 1 + jitter)
        t0 = time.perf_counter()
        if wait:
            await asyncio.sleep(wait)  # time to the first token, or the whole reply
        # the time this reply spent being "served", so the client can take it
        # out of what it measures and see only the time around it
        served = (b"X-Service-Us", b"%d" % int((time.perf_counter() - t0) * 1e6))
        if b'"stream":true' not in body and b'"stream": true' not in body:
            return Response(200, [*json_type, served], REPLY)
        resp = await request.stream(200, [(b"Content-Type", b"text/event-stream"), served])
        await resp.write(b'data: {"choices":[{"text":"a"}]}\n\n')
        for _ in range(chunks if wait else 0):
            await asyncio.sleep(chunk_s)
            await resp.write(b'data: {"choices":[{"text":"b"}]}\n\n')
        hold = float(request.header(b"x-hold") or 0)
        end = time.monotonic() + hold
        while time.monotonic() < end:
            await asyncio.sleep(1.0)
            await resp.write(b'data: {"choices":[{"text":"b"}]}\n\n')
        await resp.write(b"data: [DONE]\n\n")
        await resp.end()
        return resp

    server = Server(handle)
    for h in HOSTS:
        await server.start(h, port)
    _settle()
    print("ready", flush=True)
    await asyncio.Event().wait()


# --------------------------------------------------------------------- proxy
#: the bench caller's bearer token (--only-auth): its decisions are put in the proxy's caches at start
BENCH_TOKEN = "bench-token-" + "x" * 900  # about the length of a ServiceAccount token


def _warm_authorizer() -> Any:
    """An Authorizer (--proxy-auth kubernetes) whose caches already hold the bench caller's decisions:
    what every request costs once warm. It has no API client: a review it had to make would fail (503, an error)."""
    import hashlib

    from kaiwo_ctrl.serving.proxy.auth import Authorizer

    auth = Authorizer(None)  # type: ignore[arg-type]
    key, never = hashlib.sha256(BENCH_TOKEN.encode()).hexdigest(), time.monotonic() + 1e9
    auth._cache.put(("token", key), {"user": "system:serviceaccount:default:bench", "groups": []}, never)
    auth._cache.put(("sar", key, "default", "bench"), True, never)
    return auth


async def _proxy_main(port: int, backend_port: int = PORT_BASE, auth: bool = False, fair: bool = False) -> None:
    from prometheus_client import CollectorRegistry

    from kaiwo_ctrl.kinds import MODELS
    from kaiwo_ctrl.runtime.cache.informer import Informer
    from kaiwo_ctrl.serving.routing.endpoints import EndpointTracker
    from kaiwo_ctrl.serving.proxy.handler import ProxyHandler
    from kaiwo_ctrl.serving.limits import ProxyLimits
    from kaiwo_ctrl.serving.routing.metrics import ProxyMetrics
    from kaiwo_ctrl.serving.routing.resolve import Resolver
    from kaiwo_ctrl.serving.proxy.server import ProxyServer

    models = Informer(None, MODELS)  # filled by hand: the data path is what is measured
    resolver = Resolver(models)
    models.store.put({"metadata": {"name": "bench", "namespace": "default", "resourceVersion": "1"},
                      "spec": {"features": ["TextGeneration"], "replicas": 1, "loadBalancing": {"strategy": "LeastLoad"}}})
    tracker = EndpointTracker()
    for i, h in enumerate(HOSTS):
        tracker.on_add({"metadata": {"name": f"p{i}", "namespace": "default", "labels": {"app": "model", "model": "bench"},
                                     "annotations": {"model-pod-port": str(backend_port)}},
                        "status": {"podIP": h, "conditions": [{"type": "Ready", "status": "True"}]}}, True)
    # the limits `kaiwo-ctrl proxy` runs with by default (a request deadline among them)
    # (auth only when asked: a --baseline-tree from before the caller checks has no such argument)
    limits = ProxyLimits()
    if fair:  # --proxy-fair-queuing on, the other fair flags' defaults (a --baseline-tree from before it: not asked)
        from kaiwo_ctrl.serving.limits import FairLimits

        limits = ProxyLimits(fair=FairLimits(enabled=True))
    handler = ProxyHandler(resolver, tracker, ProxyMetrics(CollectorRegistry()), None, limits=limits,
                           **({"auth": _warm_authorizer()} if auth else {}))
    server = ProxyServer(handler, ("127.0.0.1", port))
    task = asyncio.create_task(server.run())
    await server.started.wait()
    _settle()
    print("ready", flush=True)
    await task


def _settle() -> None:
    """The collector settings a manager applies once its caches are synced
    (``kaiwo-ctrl run`` and ``kaiwo-ctrl proxy`` run the proxy under one); the
    fake servers and the load generator use them too, so that their own
    collections do not add pauses to what is measured."""
    from kaiwo_ctrl.runtime.process import heap

    heap.tune()
    heap.settle()


def _spawn(role: str, *args: str) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, __file__, f"--role={role}", *args], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "ready", f"{role} did not start"
    return p


# ---------------------------------------------------------------------- load
async def run_load(
    pool: Any, urls: list[tuple[str, str]], concurrency: int, total: int, stream: bool, service_ms: float | None = None,
    extra_headers: list[tuple[bytes, bytes]] = (),  # type: ignore[assignment]
) -> tuple[list[float], float, int]:
    """Closed-loop clients: latencies (s; time to first byte when streaming)
    less the service time each server reports for its reply, elapsed wall time, errors.

    ``urls`` are (host:port, path). The clients use the lean keep-alive pool
    (kaiwo_ctrl/runtime/net/http1.py) rather than aiohttp's client: about a third
    of the CPU per request, which leaves more of the 2 cores to what is measured.
    """
    body = orjson.dumps({"model": "bench", "prompt": "hello", "max_tokens": 1, "stream": stream})
    headers = [(b"Content-Type", b"application/json")]
    if service_ms is not None:
        headers.append((b"X-Service-Ms", str(service_ms).encode()))
    headers += extra_headers
    lat: list[float] = []
    errors = 0
    it = iter(range(total))

    async def worker(w: int) -> None:
        nonlocal errors
        for i in it:
            authority, path = urls[(w + i) % len(urls)]
            t0 = time.perf_counter()
            try:
                async with await pool.request("POST", authority, path, headers, body) as r:
                    served = int(r.header(b"x-service-us") or 0) / 1e6
                    if stream:
                        chunks = aiter(r)
                        await anext(chunks)
                        lat.append(time.perf_counter() - t0 - served)
                        async for _ in chunks:
                            pass
                    else:
                        await r.read()
                        lat.append(time.perf_counter() - t0 - served)
                    errors += r.status != 200
            except (OSError, StopAsyncIteration):
                errors += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    return lat, time.perf_counter() - t0, errors


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))] * 1000


def load_avg() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


async def latency_phase(proxy_port: int, proxy_pid: int, quick: bool, service_ms: float) -> None:
    direct = [(f"{h}:{PORT_BASE}", "/v1/completions") for h in HOSTS]
    proxied = [(f"127.0.0.1:{proxy_port}", "/openai/v1/completions")]
    from kaiwo_ctrl.runtime.net.http1 import Pool  # imported late: from the tree this script sits in

    s = Pool(max_idle_per_host=1024)
    _settle()
    try:
        await run_load(s, direct, 8, 400, False, 0)  # warm up connections
        await run_load(s, proxied, 8, 400, False, 0)
        print(f"\nadded latency (ms; proxy minus direct, same closed-loop load; servers answer after {service_ms:g} ms on "
              "average, SSE first chunk likewise; each column is latency less the service time the server reports "
              "for that reply)")
        print(f"{'mode':<14}{'clients':>8}{'direct p50':>12}{'proxy p50':>11}{'added p50':>11}"
              f"{'direct p99':>12}{'proxy p99':>11}{'added p99':>11}{'errors':>8}{'proxy CPU/req':>15}")
        for stream in (False, True):
            for c in (1, 64, 512):
                # p99 needs many samples: 64 closed-loop clients move together, so one
                # stall of the machine delays dozens of requests at once
                n = max(100 if quick else 300, c * (4 if quick else 12), 0 if c == 1 else (1600 if quick else 6400))
                # four interleaved quarters each, so a burst of outside load hits both sides alike
                dl: list[float] = []
                pl: list[float] = []
                errs, cpu = 0, 0.0
                for _ in range(4):
                    lat, _, e = await run_load(s, direct, c, n // 4, stream)
                    dl += lat
                    errs += e
                    cpu0 = cpu_seconds(proxy_pid)
                    lat, _, e = await run_load(s, proxied, c, n // 4, stream)
                    cpu += cpu_seconds(proxy_pid) - cpu0
                    pl += lat
                    errs += e
                mode = "SSE TTFB" if stream else "non-streaming"
                print(f"{mode:<14}{c:>8}{pct(dl, .5):>12.2f}{pct(pl, .5):>11.2f}{pct(pl, .5) - pct(dl, .5):>11.2f}"
                      f"{pct(dl, .99):>12.2f}{pct(pl, .99):>11.2f}{pct(pl, .99) - pct(dl, .99):>11.2f}{errs:>8}"
                      f"{cpu / len(pl) * 1e6:>12.0f} us", flush=True)
        # three interleaved rounds each; the medians, so one burst of outside load does not decide it
        n = 2000 if quick else 6000
        rates_d, rates_p, cpus = [], [], []
        errs = 0
        for _ in range(3):
            _, dt_d, _ = await run_load(s, direct, 64, n, False, 0)
            cpu0 = cpu_seconds(proxy_pid)
            _, dt_p, e = await run_load(s, proxied, 64, n, False, 0)
            cpus.append((cpu_seconds(proxy_pid) - cpu0) / n)
            rates_d.append(n / dt_d)
            rates_p.append(n / dt_p)
            errs += e
        rd, rp, cpu = statistics.median(rates_d), statistics.median(rates_p), statistics.median(cpus)
        print(f"\nsaturation (instant servers, 64 closed-loop clients, small bodies; a CPU figure on a shared machine; "
              f"medians of 3 rounds): direct {rd:,.0f} req/s, proxy {rp:,.0f} req/s (ratio {rp / rd:.2f}), errors {errs}; "
              f"proxy CPU {cpu * 1e6:.0f} us per request (a CPU-bound ceiling of {1 / cpu:,.0f} req/s per proxy core)")
    finally:
        await s.close()


async def auth_phase(none_port: int, none_pid: int, auth_port: int, auth_pid: int, quick: bool) -> None:
    """--proxy-auth kubernetes with warm caches beside --proxy-auth none: two proxies of this tree before the
    same instant servers, the same client, interleaved rounds; added p50 and CPU per request."""
    token = [(b"Authorization", b"Bearer " + BENCH_TOKEN.encode())]
    await compare_phase("cost of --proxy-auth kubernetes with warm caches", "auth",
                        {"none": (none_port, none_pid, []), "kubernetes": (auth_port, auth_pid, token)}, quick)


async def compare_phase(title: str, column: str, sides: dict[str, tuple[int, int, list]], quick: bool) -> None:
    """Proxies of this tree that differ in one setting (``sides``: name -> port, pid, extra request headers) before
    the same instant servers, the same client, interleaved rounds; p50/p99 and CPU per request of each."""
    from kaiwo_ctrl.runtime.net.http1 import Pool

    s = Pool(max_idle_per_host=1024)
    _settle()
    try:
        for port, _, extra_h in sides.values():
            await run_load(s, [(f"127.0.0.1:{port}", "/openai/v1/completions")], 8, 400, False, 0, extra_h)
        print(f"\n{title} (instant servers; 4 interleaved rounds per side)")
        print(f"{'clients':>8}{column:>12}{'p50 ms':>9}{'p99 ms':>9}{'CPU/req':>11}{'errors':>8}")
        for c in (1, 64):
            n = (400 if quick else 2000) if c == 1 else (4000 if quick else 16000)
            got: dict[str, tuple[list[float], float, int]] = {k: ([], 0.0, 0) for k in sides}
            for _ in range(4):
                for name, (port, pid, extra_h) in sides.items():
                    cpu0 = cpu_seconds(pid)
                    lat, _, e = await run_load(s, [(f"127.0.0.1:{port}", "/openai/v1/completions")], c, n // 4, False, 0, extra_h)
                    prev = got[name]
                    got[name] = (prev[0] + lat, prev[1] + cpu_seconds(pid) - cpu0, prev[2] + e)
            for name, (lat, cpu, e) in got.items():
                print(f"{c:>8}{name:>12}{pct(lat, .5):>9.3f}{pct(lat, .99):>9.3f}{cpu / len(lat) * 1e6:>8.0f} us{e:>8}", flush=True)
    finally:
        await s.close()


async def streams_phase(proxy_port: int, proxy_pid: int, count: int, hold: float) -> None:
    body = orjson.dumps({"model": "bench", "prompt": "x", "stream": True})
    started = 0
    errors = 0
    got_all = asyncio.Event()
    conn = aiohttp.TCPConnector(limit=0)
    rss0 = peak_rss_mib(proxy_pid)

    async def one() -> None:
        nonlocal started, errors
        try:
            async with s.post(f"http://127.0.0.1:{proxy_port}/openai/v1/chat/completions", data=body,
                              headers={"Content-Type": "application/json", "X-Hold": str(hold)}) as r:
                await r.content.readany()
                started += 1
                if started == count:
                    got_all.set()
                data = await r.read()
                errors += r.status != 200 or not data.endswith(b"data: [DONE]\n\n")
        except (aiohttp.ClientError, asyncio.TimeoutError):
            errors += 1

    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=hold + 120)) as s:
        t0 = time.perf_counter()
        tasks = [asyncio.create_task(one()) for _ in range(count)]
        try:
            await asyncio.wait_for(got_all.wait(), hold)
            all_open = f"all {count} open after {time.perf_counter() - t0:.1f}s"
        except asyncio.TimeoutError:
            all_open = f"only {started} of {count} open within {hold:.0f}s"
        await asyncio.gather(*tasks)
    print(f"\n{count} concurrent SSE streams held {hold:.0f}s through one proxy process: {all_open}; errors {errors}; "
          f"proxy peak RSS {peak_rss_mib(proxy_pid):.0f} MiB (was {rss0:.0f} MiB before)")


# --------------------------------------------------------------------- peers
INSTANT_PORT = PORT_BASE + 1


def _tree_cpu(pids: list[int]) -> float:
    from peers import tree_pids

    total = 0.0
    for root in pids:
        for p in tree_pids(root):
            try:
                total += cpu_seconds(p)
            except OSError:
                pass
    return total


async def peers_phase(ours_port: int, ours_pid: int, quick: bool, baseline: tuple[int, int] | None = None) -> None:
    """Ours, nginx and LiteLLM's proxy in front of the same instant servers, interleaved round by round."""
    from peers import start_litellm, start_nginx

    from kaiwo_ctrl.runtime.net.http1 import Pool

    backends = [f"{h}:{INSTANT_PORT}" for h in HOSTS]
    # LiteLLM's proxy refuses to start without a master key; every contender gets the same header
    key = "sk-bench-" + secrets.token_hex(16)
    auth = [(b"Authorization", b"Bearer " + key.encode())]
    started = [("nginx", start_nginx(18481, backends), 18481), ("LiteLLM", start_litellm(18482, backends, key), 18482)]
    contenders = [("ours", f"127.0.0.1:{ours_port}", "/openai/v1/completions", ours_pid)]
    if baseline is not None:  # the proxy of another checkout (--baseline-tree), same limits, same client
        contenders.append(("ours@base", f"127.0.0.1:{baseline[0]}", "/openai/v1/completions", baseline[1]))
    contenders += [(name, f"127.0.0.1:{port}", "/v1/completions", p.pid) for name, p, port in started if p is not None]
    missing = [name for name, p, _ in started if p is None]
    direct = [(b, "/v1/completions") for b in backends]
    s = Pool(max_idle_per_host=1024)
    try:
        for _, authority, path, _ in contenders:
            await run_load(s, [(authority, path)], 8, 200, False, 0, auth)  # warm up; LiteLLM's first requests are slow
        print("\npeers: added latency against instant servers (ms; the same closed-loop client, interleaved rounds; "
              f"non-streaming){'; left out: ' + ', '.join(missing) if missing else ''}")
        print(f"{'proxy':<9}{'clients':>8}{'direct p50':>12}{'p50':>9}{'added p50':>11}{'direct p99':>12}{'p99':>9}"
              f"{'added p99':>11}{'errors':>8}{'CPU/req':>11}")
        for c in (1, 64, 512):
            n = max(200 if quick else 800, c * (4 if quick else 8))
            lat: dict[str, list[float]] = {name: [] for name, *_ in contenders}
            lat["direct"] = []
            cpu = dict.fromkeys(lat, 0.0)
            errs = dict.fromkeys(lat, 0)
            for _ in range(4):
                got, _, e = await run_load(s, direct, c, n // 4, False, 0, auth)
                lat["direct"] += got
                errs["direct"] += e
                for name, authority, path, pid in contenders:
                    c0 = _tree_cpu([pid])
                    got, _, e = await run_load(s, [(authority, path)], c, n // 4, False, 0, auth)
                    cpu[name] += _tree_cpu([pid]) - c0
                    lat[name] += got
                    errs[name] += e
            d50, d99 = pct(lat["direct"], .5), pct(lat["direct"], .99)
            for name, *_ in contenders:
                xs = lat[name]
                print(f"{name:<9}{c:>8}{d50:>12.2f}{pct(xs, .5):>9.2f}{pct(xs, .5) - d50:>11.2f}{d99:>12.2f}{pct(xs, .99):>9.2f}"
                      f"{pct(xs, .99) - d99:>11.2f}{errs[name]:>8}{cpu[name] / max(1, len(xs)) * 1e6:>8.0f} us", flush=True)
        n = 1500 if quick else 4000
        print(f"\npeers: saturation (instant servers, 64 closed-loop clients, {n} requests each, 3 interleaved rounds, medians)")
        rates: dict[str, list[float]] = {name: [] for name, *_ in contenders}
        cpus: dict[str, list[float]] = {name: [] for name, *_ in contenders}
        failed = dict.fromkeys(rates, 0)
        for _ in range(3):
            for name, authority, path, pid in contenders:
                c0 = _tree_cpu([pid])
                _, dt, e = await run_load(s, [(authority, path)], 64, n, False, 0, auth)
                cpus[name].append((_tree_cpu([pid]) - c0) / n)
                rates[name].append(n / dt)
                failed[name] += e
        for name, *_ in contenders:
            print(f"{name:<9}{statistics.median(rates[name]):>10,.0f} req/s   CPU {statistics.median(cpus[name]) * 1e6:>6.0f} us per request"
                  f"   errors {failed[name]}{'  (not a figure: requests failed)' if failed[name] else ''}")
    finally:
        await s.close()
        for _, p, _ in started:
            if p is not None:
                p.terminate()
                p.wait(10)


CHUNKS_PORT = PORT_BASE + 2


async def chunks_phase(ours_port: int, ours_pid: int, chunks: int, quick: bool) -> None:
    """CPU per streamed chunk: ours and nginx relaying the same SSE streams (``chunks`` + 2 events each,
    one write apiece, ``--chunk-ms`` apart, so each usually arrives in a read of its own), interleaved rounds.
    The proxy's process tree's CPU over the run divided by the events relayed."""
    from peers import start_nginx

    from kaiwo_ctrl.runtime.net.http1 import Pool

    backends = [f"{h}:{CHUNKS_PORT}" for h in HOSTS]
    nginx = start_nginx(18483, backends)
    contenders = [("ours", f"127.0.0.1:{ours_port}", "/openai/v1/completions", ours_pid)]
    if nginx is not None:
        contenders.append(("nginx", "127.0.0.1:18483", "/v1/completions", nginx.pid))
    per_stream = chunks + 2  # the first event, the chunks, [DONE]
    s = Pool(max_idle_per_host=1024)
    try:
        for _, authority, path, _ in contenders:
            await run_load(s, [(authority, path)], 4, 8, True)
        print(f"\nstreamed chunks: CPU per relayed SSE event ({per_stream} events a stream, 3 interleaved rounds, medians)"
              f"{'' if nginx is not None else '; nginx left out'}")
        print(f"{'proxy':<9}{'streams at once':>16}{'streams':>9}{'events':>9}{'errors':>8}{'CPU/event':>12}{'CPU/stream':>12}")
        for c in (1, 64):
            n = (8 if c == 1 else 128) * (1 if quick else 4)
            cpu: dict[str, list[float]] = {name: [] for name, *_ in contenders}
            errs = dict.fromkeys(cpu, 0)
            for _ in range(3):
                for name, authority, path, pid in contenders:
                    c0 = _tree_cpu([pid])
                    _, _, e = await run_load(s, [(authority, path)], c, n, True)
                    cpu[name].append((_tree_cpu([pid]) - c0) / n)
                    errs[name] += e
            for name, *_ in contenders:
                per = statistics.median(cpu[name])
                print(f"{name:<9}{c:>16}{n:>9}{n * per_stream:>9}{errs[name]:>8}{per / per_stream * 1e6:>9.1f} us"
                      f"{per * 1e6:>9.0f} us{'  (not a figure: streams failed)' if errs[name] else ''}", flush=True)
    finally:
        await s.close()
        if nginx is not None:
            nginx.terminate()
            nginx.wait(10)


# ---------------------------------------------------------------- PrefixHash
def prefix_quality(endpoints: int = 8, tenants: int = 200, requests: int = 50000, in_flight: int = 256, seed: int = 1) -> None:
    """Event simulation of the CHWBL choice: Zipf-popular tenant prefixes, requests finishing at random."""
    from kaiwo_ctrl.serving.routing.balance import Endpoint, Ring

    rng = random.Random(seed)
    eps = {f"ns/p{i}": Endpoint(f"ns/p{i}", f"10.0.0.{i}:8000") for i in range(endpoints)}
    ring = Ring(256)
    for k in eps:
        ring.add(k)
    weights = [1 / (i + 1) for i in range(tenants)]
    prompts = [f"tenant {t:04d}: you are a helpful assistant for team {t}" for t in range(tenants)]
    active: list[tuple[Endpoint, int]] = []
    total = 0
    home = 0
    assigned: Counter[str] = Counter()
    for _ in range(requests):
        while len(active) >= in_flight:
            ep, _ = active.pop(rng.randrange(len(active)))
            ep.in_flight -= 1
            total -= 1
        prompt = rng.choices(prompts, weights)[0]
        c = ring.choose(prompt[:100], eps, total, 125)
        ep = c.endpoint
        home += ep is c.initial
        ep.in_flight += 1
        total += 1
        assigned[ep.key] += 1
        active.append((ep, 0))
    mean = requests / endpoints
    print(f"\nPrefixHash (CHWBL, meanLoadFactor 125, {endpoints} endpoints, {tenants} Zipf tenants, {in_flight} in flight, "
          f"{requests} requests): {home / requests:.1%} on their prefix's home endpoint; "
          f"max/mean requests per endpoint {max(assigned.values()) / mean:.2f}")


# ----------------------------------------------------------------------- main
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--role", choices=["backend", "proxy"], help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=18480)
    ap.add_argument("--quick", action="store_true", help="fewer requests and 500 streams")
    ap.add_argument("--streams", type=int, default=2000)
    ap.add_argument("--hold", type=float, default=20.0, help="seconds each SSE stream stays open")
    ap.add_argument("--service-ms", type=float, default=20.0,
                    help="the fake servers' reply time and SSE time to first chunk (model-like; 0 = instant)")
    ap.add_argument("--service-jitter", type=float, default=0.5,
                    help="each reply's service time is drawn uniformly from service-ms x (1 +- this); 0 = all equal")
    ap.add_argument("--chunk-ms", type=float, default=5.0, help="time between SSE chunks")
    ap.add_argument("--chunks", type=int, default=4, help="SSE chunks after the first")
    ap.add_argument("--backend-port", type=int, default=PORT_BASE, help=argparse.SUPPRESS)
    ap.add_argument("--baseline-tree", metavar="DIR",
                    help="peers: also measure the proxy as built from another checkout of this repository (e.g. main's), "
                         "run by this script with the same limits, as 'ours@base'")
    ap.add_argument("--auth", action="store_true", help=argparse.SUPPRESS)  # proxy role: --proxy-auth kubernetes, warm
    ap.add_argument("--fair", action="store_true", help=argparse.SUPPRESS)  # proxy role: --proxy-fair-queuing on
    ap.add_argument("--only-fair", action="store_true",
                    help="only the cost of --proxy-fair-queuing on beside off when nothing is saturated")
    ap.add_argument("--only-auth", action="store_true",
                    help="only the cost of --proxy-auth kubernetes (warm caches) beside --proxy-auth none")
    ap.add_argument("--tree", help=argparse.SUPPRESS)  # the checkout a proxy role imports kaiwo_ctrl from
    ap.add_argument("--peers", action=argparse.BooleanOptionalAction, default=True,
                    help="also measure nginx and LiteLLM's proxy (installed into the bench's own environment when missing)")
    ap.add_argument("--only-peers", action="store_true", help="only the peers comparison")
    ap.add_argument("--only-chunks", action="store_true",
                    help="only the CPU per relayed SSE event, ours beside nginx (--stream-chunks events a stream)")
    ap.add_argument("--stream-chunks", type=int, default=100, help="--only-chunks: SSE chunks a stream carries")
    args = ap.parse_args()
    _raise_nofile()
    factory = _loop_factory()
    if args.role:
        coro = (_backend_main(args.service_ms / 1000, args.chunk_ms / 1000, args.chunks, args.service_jitter, args.backend_port)
                if args.role == "backend" else _proxy_main(args.port, args.backend_port, args.auth, args.fair))
        with asyncio.Runner(loop_factory=factory) as r:
            r.run(coro)
        return 0
    print(f"event loop: {'uvloop' if factory else 'asyncio'}; cpus {os.cpu_count()}; load average {load_avg()} (1/5/15 min; "
          "a shared machine: figures vary with what else runs)")
    backend = _spawn("backend", f"--service-ms={args.service_ms}", f"--service-jitter={args.service_jitter}",
                     f"--chunk-ms={args.chunk_ms}", f"--chunks={args.chunks}")
    if args.only_auth:
        return _only_auth(args, factory, backend)
    if args.only_fair:
        return _only_fair(args, factory, backend)
    if args.only_chunks:
        return _only_chunks(args, factory, backend)
    proxy = _spawn("proxy", f"--port={args.port}")
    extra: list[subprocess.Popen] = []
    try:
        with asyncio.Runner(loop_factory=factory) as r:
            if not args.only_peers:
                r.run(latency_phase(args.port, proxy.pid, args.quick, args.service_ms))
                r.run(streams_phase(args.port, proxy.pid, 500 if args.quick else args.streams, args.hold))
            if args.peers or args.only_peers:
                extra.append(_spawn("backend", "--service-ms=0", "--service-jitter=0", f"--backend-port={INSTANT_PORT}"))
                extra.append(_spawn("proxy", f"--port={args.port + 10}", f"--backend-port={INSTANT_PORT}"))
                baseline = None
                if args.baseline_tree:
                    extra.append(_spawn("proxy", f"--port={args.port + 11}", f"--backend-port={INSTANT_PORT}",
                                        f"--tree={Path(args.baseline_tree).resolve()}"))
                    baseline = (args.port + 11, extra[-1].pid)
                r.run(peers_phase(args.port + 10, extra[-2 if baseline else -1].pid, args.quick, baseline))
        if not args.only_peers:
            prefix_quality(requests=10000 if args.quick else 50000)
        print(f"\nload average at the end: {load_avg()}")
    finally:
        for p in (*extra, proxy, backend):
            p.terminate()
            p.wait(10)
    return 0


def _only_auth(args: argparse.Namespace, factory: Any, backend: subprocess.Popen) -> int:
    instant = _spawn("backend", "--service-ms=0", "--service-jitter=0", f"--backend-port={INSTANT_PORT}")
    open_proxy = _spawn("proxy", f"--port={args.port + 20}", f"--backend-port={INSTANT_PORT}")
    auth_proxy = _spawn("proxy", f"--port={args.port + 21}", f"--backend-port={INSTANT_PORT}", "--auth")
    try:
        with asyncio.Runner(loop_factory=factory) as r:
            r.run(auth_phase(args.port + 20, open_proxy.pid, args.port + 21, auth_proxy.pid, args.quick))
        print(f"\nload average at the end: {load_avg()}")
    finally:
        for p in (auth_proxy, open_proxy, instant, backend):
            p.terminate()
            p.wait(10)
    return 0


def _only_fair(args: argparse.Namespace, factory: Any, backend: subprocess.Popen) -> int:
    """--proxy-fair-queuing on beside off, nothing saturated (the servers report no metrics, so the gate's
    direct path: the saturation check and a counter)."""
    instant = _spawn("backend", "--service-ms=0", "--service-jitter=0", f"--backend-port={INSTANT_PORT}")
    off = _spawn("proxy", f"--port={args.port + 22}", f"--backend-port={INSTANT_PORT}")
    on = _spawn("proxy", f"--port={args.port + 23}", f"--backend-port={INSTANT_PORT}", "--fair")
    try:
        with asyncio.Runner(loop_factory=factory) as r:
            r.run(compare_phase("cost of --proxy-fair-queuing on when nothing is saturated", "fair",
                                {"off": (args.port + 22, off.pid, []), "on": (args.port + 23, on.pid, [])}, args.quick))
        print(f"\nload average at the end: {load_avg()}")
    finally:
        for p in (on, off, instant, backend):
            p.terminate()
            p.wait(10)
    return 0


def _only_chunks(args: argparse.Namespace, factory: Any, backend: subprocess.Popen) -> int:
    streaming = _spawn("backend", "--service-ms=1", "--service-jitter=0", f"--chunk-ms={args.chunk_ms}",
                       f"--chunks={args.stream_chunks}", f"--backend-port={CHUNKS_PORT}")
    proxy = _spawn("proxy", f"--port={args.port + 30}", f"--backend-port={CHUNKS_PORT}")
    try:
        with asyncio.Runner(loop_factory=factory) as r:
            r.run(chunks_phase(args.port + 30, proxy.pid, args.stream_chunks, args.quick))
        print(f"\nload average at the end: {load_avg()}")
    finally:
        for p in (proxy, streaming, backend):
            p.terminate()
            p.wait(10)
    return 0


if __name__ == "__main__":
    _tree = next((a.partition("=")[2] for a in sys.argv if a.startswith("--tree=")), None)
    sys.path.insert(0, _tree or str(Path(__file__).resolve().parents[1]))
    raise SystemExit(main())

