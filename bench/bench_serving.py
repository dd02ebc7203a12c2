#!/usr/bin/env python3
"""Serving benchmark: routing strategies on simulated vLLM engines, multi-turn chat.

Processes: the fake engines (bench/fake_engine.py, one per loopback address,
parameters from a published vLLM figure -- see LLAMA31_8B_A100_40GB there),
zero to two proxy processes (the production handler, server and engine
scraper; the Model and Pod caches filled directly), and this load generator.

Compared in one run, on the same engines (each run starts with empty caches):

* ``random``: each request to a random engine, as a Kubernetes Service does
  (no proxy; the same figure stands in both replica blocks);
* ``LeastLoad`` and ``PrefixHash`` as KubeAI has them (the proxy's own
  in-flight counts: engine metrics off);
* ``LeastLoad+engine`` and ``PrefixHash+engine``: the same Model strategies
  with the proxy reading the engines' /metrics every ``--scrape-interval``;
* each proxied one through 1 and through 2 proxy replicas (users split
  between them, as a Service in front of the replicas would).

Workload (closed loop, ``--levels`` concurrent users): multi-turn chat
conversations shaped like ShareGPT's -- a long first message (median 2,000
tokens, a pasted document), short follow-ups (median 80), replies of a few
hundred tokens (median 220), 2-8 turns, ``--think`` s (median) between turns;
each turn resends the
whole conversation, so a prompt grows turn by turn and its beginning is what
the engine that served the last turn has cached. Lengths are log-normal
(``--seed`` fixes them; every strategy gets the same users and conversations).

Reported per level and strategy: TTFT p50/p99 (s), output tokens/s, and the
engines' prefix-cache hit rate (hit tokens / prompt tokens), over the requests
started after ``--warmup`` s in a ``--duration`` s run. Every user starts at
once, so the first minute is the ramp (short prompts, caches filling); the
default window (60-120 s) is steady state, and ``--warmup 15 --duration 50``
measures the ramp. Each level's first line says how much of the engines' KV
cache its users' conversations need (users x their mean context). The default
levels (64, 128) are within what four engines hold (~155 users); past it
finished turns are evicted before the next turn and every strategy that
balances queues alike.

``--instrument`` adds a line per run on stderr: each engine's mean batch and
waiting queue (and how often it had one), the mean spread of the engines'
batches, where the requests beyond the engines' first-token p99 spent their
time (admission queue or prefill), and PrefixHash's home/spill/fallback
shares; ``--trace-dir`` keeps the raw samples. ``--tune`` adds engine-aware
PrefixHash rows with scorer constants changed (``kaiwo_ctrl.serving.routing.score``),
to compare weights side by side in one run.

    .venv/bin/python bench/bench_serving.py [--quick] [--levels 64,128] [--replicas 1,2] [--rounds 3] [--instrument]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

HOSTS = [f"127.0.0.{41 + i}" for i in range(4)]
ENGINE_PORT = 18600
PROXY_PORT = 18650
STRATEGIES = [("random", None, 0.0), ("LeastLoad", "LeastLoad", 0.0), ("PrefixHash", "PrefixHash", 0.0),
              ("LeastLoad+engine", "LeastLoad", 1.0), ("PrefixHash+engine", "PrefixHash", 1.0)]
SYSTEM = "You are a helpful assistant. Answer the user's questions carefully and completely."


# ------------------------------------------------------------------ roles
async def _engines_main(n: int) -> None:
    from fake_engine import LLAMA31_8B_A100_40GB, serve_engines

    await serve_engines(HOSTS[:n], ENGINE_PORT, LLAMA31_8B_A100_40GB)
    print("ready", flush=True)
    await asyncio.Event().wait()


async def _proxy_main(port: int, strategy: str, scrape: float, n: int, tune: list[str], fair: bool = False) -> None:
    from prometheus_client import CollectorRegistry

    from kaiwo_ctrl.serving.limits import FairLimits, ProxyLimits
    from kaiwo_ctrl.serving.routing import score

    fair_sets: dict[str, object] = {}
    for kv in tune:  # --tune: a scorer constant (or, "fair.<field>", a fair-queuing limit) set for this run
        k, _, v = kv.partition("=")
        if k.startswith("fair."):
            fair_sets[k[5:]] = type(getattr(FairLimits(), k[5:]))(float(v))
        else:
            setattr(score, k, type(getattr(score, k))(float(v)))

    from kaiwo_ctrl.kinds import MODELS
    from kaiwo_ctrl.runtime.cache.informer import Informer
    from kaiwo_ctrl.serving.routing.endpoints import EndpointTracker
    from kaiwo_ctrl.serving.proxy.handler import ProxyHandler
    from kaiwo_ctrl.serving.routing.metrics import ProxyMetrics
    from kaiwo_ctrl.serving.routing.resolve import Resolver
    from kaiwo_ctrl.serving.routing.scrape import EngineScraper, ScrapeConfig
    from kaiwo_ctrl.serving.proxy.server import ProxyServer

    models = Informer(None, MODELS)
    models.store.put({"metadata": {"name": "bench", "namespace": "default", "resourceVersion": "1"},
                      "spec": {"features": ["TextGeneration"], "replicas": n, "loadBalancing": {"strategy": strategy}}})
    tracker = EndpointTracker()
    for i, h in enumerate(HOSTS[:n]):
        tracker.on_add({"metadata": {"name": f"p{i}", "namespace": "default", "labels": {"app": "model", "model": "bench"},
                                     "annotations": {"model-pod-port": str(ENGINE_PORT)}},
                        "status": {"podIP": h, "conditions": [{"type": "Ready", "status": "True"}]}}, True)
    registry = CollectorRegistry()
    # no Manager here: the scraper (a manager runnable in the operator) runs beside the server
    scraper = EngineScraper(tracker, registry, ScrapeConfig(interval=scrape)) if scrape > 0 else None
    # the open proxy (--proxy-auth none): the routing is measured, not callers (bench/RESULTS.md)
    # --fair: fair queuing per tenant (the client address, as with --proxy-auth none), the flags' defaults
    limits = ProxyLimits(fair=FairLimits(enabled=fair, **fair_sets))
    server = ProxyServer(ProxyHandler(Resolver(models), tracker, ProxyMetrics(registry), None, limits=limits), ("127.0.0.1", port))
    background = [asyncio.create_task(scraper.run())] if scraper is not None else []
    task = asyncio.create_task(server.run())
    await server.started.wait()
    print("ready", flush=True)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, task.cancel)
    try:
        await task
    except asyncio.CancelledError:
        pass
    # instrumentation: how PrefixHash chose (home, spill past the home, fallback: nothing under the bound)
    counts = {s.labels["outcome"]: s.value for m in registry.collect() if m.name == "kaiwo_proxy_prefixhash_choices"
              for s in m.samples if s.name.endswith("_total")}
    print("choices " + orjson.dumps(counts).decode(), flush=True)
    del background


def _spawn(role: str, *args: str) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, __file__, f"--role={role}", *args], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "ready", f"{role} did not start"
    return p


# -------------------------------------------------------------- workload
def _lognormal(rng: random.Random, median: float, sigma: float, lo: int, hi: int) -> int:
    return max(lo, min(hi, int(rng.lognormvariate(math.log(median), sigma))))


def _words(rng: random.Random, tokens: int) -> str:
    """``tokens`` tokens of text (4 characters a token, as the fake engine counts)."""
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") * 3 + " " for _ in range(tokens))


@dataclass
class Conversation:
    first: int
    turns: list[tuple[int, int]]  # (user tokens, reply tokens)


def conversation(rng: random.Random, scale: float) -> Conversation:
    first = _lognormal(rng, 2000 * scale, 0.6, 64, int(8000 * scale))
    turns = [(_lognormal(rng, 80, 0.8, 8, 600), _lognormal(rng, 220, 0.5, 16, 600)) for _ in range(rng.randint(2, 8))]
    return Conversation(first, turns)


def kv_demand(users: int, engines: int, seed: int, scale: float) -> tuple[float, float]:
    """(the share of the engines' KV cache ``users`` conversations need, the mean context a turn leaves cached)."""
    from fake_engine import LLAMA31_8B_A100_40GB

    rng, total, turns = random.Random(seed), 0, 0
    for _ in range(2000):
        conv = conversation(rng, scale)
        ctx = conv.first + len(SYSTEM) // 4
        for user_tokens, reply_tokens in conv.turns:
            ctx += user_tokens + reply_tokens
            total, turns = total + ctx, turns + 1
    mean = total / turns
    return users * mean / (engines * LLAMA31_8B_A100_40GB.kv_tokens), mean


@dataclass
class RunStats:
    ttft: list[float] = field(default_factory=list)
    tokens: int = 0
    errors: int = 0


class ChatStream:
    """A streamed chat answer read as it arrives: the time to its first content event and its text."""

    def __init__(self) -> None:
        self.t0, self.ttft, self.buf = time.perf_counter(), -1.0, b""
        self.parts: list[str] = []

    def feed(self, chunk: bytes) -> None:
        self.buf += chunk
        *events, self.buf = self.buf.split(b"\n\n")
        for ev in events:
            if ev.startswith(b"data: {"):
                if self.ttft < 0:
                    self.ttft = time.perf_counter() - self.t0
                self.parts.append(orjson.loads(ev[6:])["choices"][0]["delta"]["content"])

    @property
    def text(self) -> str:
        return "".join(self.parts)


async def _chat(pool: Any, authority: str, path: str, messages: list, max_tokens: int) -> tuple[float, str]:
    body = orjson.dumps({"model": "bench", "messages": messages, "max_tokens": max_tokens, "stream": True})
    answer = ChatStream()
    async with await pool.request("POST", authority, path, [(b"Content-Type", b"application/json")], body) as r:
        if r.status != 200:
            await r.read()
            raise OSError(f"status {r.status}")
        async for chunk in r:
            answer.feed(chunk)
    return answer.ttft, answer.text


async def run_load(targets: list[tuple[str, str]], users: int, duration: float, warmup: float, seed: int, scale: float,
                   random_route: bool, think: float) -> RunStats:
    from kaiwo_ctrl.runtime.net.http1 import Pool

    pool = Pool(connect_timeout=10, idle_timeout=60)
    stats = RunStats()
    start = time.perf_counter()
    measure_from, stop_at = start + warmup, start + duration

    async def user(u: int) -> None:
        rng = random.Random(seed * 1000 + u)
        route_rng = random.Random(seed * 7919 + u)
        authority, path = targets[u % len(targets)]
        while time.perf_counter() < stop_at:
            conv = conversation(rng, scale)
            messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"[{u}:{rng.random():.6f}] " + _words(rng, conv.first)}]
            for user_tokens, reply_tokens in conv.turns:
                if time.perf_counter() >= stop_at:
                    return
                if random_route:
                    authority = route_rng.choice(targets)[0]
                t = time.perf_counter()
                try:
                    ttft, reply = await _chat(pool, authority, path, messages, reply_tokens)
                except (OSError, ValueError, KeyError):
                    stats.errors += 1
                    await asyncio.sleep(0.1)
                    break
                if t >= measure_from:
                    stats.ttft.append(ttft)
                    stats.tokens += reply_tokens
                messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": _words(rng, user_tokens)}]
                await asyncio.sleep(rng.lognormvariate(math.log(think), 0.6))  # the user reads and types

    await asyncio.gather(*(user(u) for u in range(users)))
    stats.window = stop_at - measure_from  # type: ignore[attr-defined]
    await pool.close()
    return stats


# ------------------------------------------------------------------ main
async def _engine_counters(n: int) -> tuple[float, float, float]:
    """(prefix-cache query tokens, hit tokens, running+waiting) summed over the engines."""
    from kaiwo_ctrl.runtime.net.http1 import Pool
    from kaiwo_ctrl.serving.routing.enginemetrics import parse_engine_metrics

    pool = Pool()
    q = h = busy = 0.0
    for host in HOSTS[:n]:
        async with await pool.request("GET", f"{host}:{ENGINE_PORT}", "/metrics") as r:
            body = await r.read()
        for line in body.decode().splitlines():
            if line.startswith("vllm:prefix_cache_queries_total"):
                q += float(line.rsplit(" ", 1)[1])
            elif line.startswith("vllm:prefix_cache_hits_total"):
                h += float(line.rsplit(" ", 1)[1])
        s = parse_engine_metrics(body)
        busy += (s.running + s.waiting) if s else 0
    await pool.close()
    return q, h, busy


async def _reset(n: int) -> None:
    from kaiwo_ctrl.runtime.net.http1 import Pool

    pool = Pool()
    while (await _engine_counters(n))[2] > 0:  # the last run's requests drain first
        await asyncio.sleep(0.5)
    for host in HOSTS[:n]:
        async with await pool.request("POST", f"{host}:{ENGINE_PORT}", "/reset") as r:
            await r.read()
    await pool.close()


async def _sample_engines(n: int, until: float, every: float) -> list[list[tuple[float, float, float]]]:
    """(running, waiting, KV use) per engine, every ``every`` s until ``until`` (instrumentation)."""
    from kaiwo_ctrl.runtime.net.http1 import Pool
    from kaiwo_ctrl.serving.routing.enginemetrics import parse_engine_metrics

    pool = Pool()
    out: list[list[tuple[float, float, float]]] = []
    while time.perf_counter() < until:
        row = []
        for host in HOSTS[:n]:
            async with await pool.request("GET", f"{host}:{ENGINE_PORT}", "/metrics") as r:
                s = parse_engine_metrics(await r.read())
            row.append((s.running, s.waiting, s.kv) if s else (0.0, 0.0, 0.0))
        out.append(row)
        await asyncio.sleep(every)
    await pool.close()
    return out


async def _traces(n: int, since: float = 0.0) -> tuple[float, list[tuple[float, float, int, int, str]]]:
    """The engines' clock, and per request that arrived at or after ``since`` on it: (queue s, first token s, prompt, hit tokens, tag)."""
    from kaiwo_ctrl.runtime.net.http1 import Pool

    pool = Pool()
    out: list = []
    now = 0.0
    for host in HOSTS[:n]:
        async with await pool.request("GET", f"{host}:{ENGINE_PORT}", "/trace") as r:
            got = orjson.loads(await r.read())
        now = got["now"]
        out += [t[1:] for t in got["trace"] if t[0] >= since]
    await pool.close()
    return now, out


def _instrument(samples: list[list[tuple[float, float, float]]], trace: list, choices: list[dict]) -> str:
    """One line: per-engine queue depth, batch spread, where the slowest first tokens lost their time, choices."""
    parts = []
    if samples:
        n = len(samples[0])
        per = []
        for i in range(n):
            run = [row[i][0] for row in samples]
            wait = [row[i][1] for row in samples]
            kv = [row[i][2] for row in samples]
            per.append(f"e{i}: run {sum(run) / len(run):.0f} wait {sum(wait) / len(wait):.1f} (>0 {sum(w > 0 for w in wait) / len(wait):.0%},"
                       f" max {max(wait):.0f}) kv {sum(kv) / len(kv):.2f}")
        spread = sum(max(r[0] + r[1] for r in row) - min(r[0] + r[1] for r in row) for row in samples) / len(samples)
        parts.append("; ".join(per) + f"; mean spread (run+wait) {spread:.1f}")
    if trace:
        ft99 = pct([t[1] for t in trace], 99)
        slow = [t for t in trace if t[1] >= ft99]
        q = sum(t[0] for t in slow) / len(slow)
        hit = sum(t[3] for t in slow) / max(1, sum(t[2] for t in slow))
        parts.append(f"at the engines: first token p99 {ft99:.2f}s, queue p99 {pct([t[0] for t in trace], 99):.2f}s; "
                     f"the requests beyond p99: queue {q:.2f}s, prefill {sum(t[1] - t[0] for t in slow) / len(slow):.2f}s, "
                     f"prompt {sum(t[2] for t in slow) / len(slow):.0f} tokens, hit {hit:.0%}")
    total: dict[str, float] = {}
    for c in choices:
        for k, v in c.items():
            total[k] = total.get(k, 0) + v
    if sum(total.values()):
        parts.append("choices " + ", ".join(f"{k} {v / sum(total.values()):.0%}" for k, v in sorted(total.items())))
    return " | ".join(parts)


def pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, int(math.ceil(p / 100 * len(s))) - 1)]


async def one_run(args: argparse.Namespace, name: str, strategy: str | None, scrape: float, replicas: int, users: int,
                  tune: str = "", seed: int = 1) -> dict:
    await _reset(args.engines)
    procs = []
    if strategy is None:
        targets = [(f"{h}:{ENGINE_PORT}", "/v1/chat/completions") for h in HOSTS[:args.engines]]
    else:
        targets = []
        for i in range(replicas):
            port = PROXY_PORT + i
            procs.append(_spawn("proxy", f"--port={port}", f"--strategy={strategy}",
                                f"--scrape-interval={scrape and args.scrape_interval}", f"--engines={args.engines}",
                                *(f"--set={kv}" for kv in tune.split(",") if kv)))
            targets.append((f"127.0.0.1:{port}", "/openai/v1/chat/completions"))
        await asyncio.sleep(max(1.0, 2 * args.scrape_interval) if scrape else 0.2)
    try:
        stats_task = asyncio.create_task(run_load(targets, users, args.duration, args.warmup, seed, args.scale, strategy is None,
                                                  args.think))
        await asyncio.sleep(args.warmup)
        q1, h1, _ = await _engine_counters(args.engines)
        mark, _ = await _traces(args.engines)  # requests that arrived during the warm-up are left out
        sampler = asyncio.create_task(_sample_engines(args.engines, time.perf_counter() + args.duration - args.warmup, 0.25))
        stats = await stats_task
        samples = await sampler
    finally:
        choices = []
        for p in procs:
            p.terminate()
            out, _ = p.communicate()
            choices += [orjson.loads(line[8:]) for line in out.splitlines() if line.startswith("choices ")]
    q3, h3, _ = await _engine_counters(args.engines)
    hit = (h3 - h1) / (q3 - q1) if q3 > q1 else float("nan")
    if args.instrument:
        _, trace = await _traces(args.engines, mark)
        print(f"#   {name} x{replicas}: " + _instrument(samples, trace, choices), file=sys.stderr, flush=True)
        if args.trace_dir:
            Path(args.trace_dir).mkdir(parents=True, exist_ok=True)
            Path(args.trace_dir, f"{users}-{replicas}-{name}-seed{seed}.json").write_bytes(orjson.dumps(
                {"samples": samples, "trace": trace, "choices": choices, "ttft": stats.ttft}))
    return {"name": name, "replicas": replicas, "users": users, "ttft": stats.ttft, "tps": stats.tokens / stats.window,  # type: ignore[attr-defined]
            "hit": hit, "errors": stats.errors}


def _pool(runs: list[dict]) -> dict:
    """One row from a strategy's runs (one a round): TTFT percentiles over all their requests, means of the rest."""
    ttft = [t for r in runs for t in r["ttft"]]
    return {**runs[0], "n": len(ttft), "p50": pct(ttft, 50), "p99": pct(ttft, 99), "tps": sum(r["tps"] for r in runs) / len(runs),
            "hit": sum(r["hit"] for r in runs) / len(runs), "errors": sum(r["errors"] for r in runs),
            "p99s": [pct(r["ttft"], 99) for r in runs]}


def _print(rows: list[dict]) -> None:
    print(f"{'users':>5} {'proxies':>7} {'strategy':<18} {'requests':>8} {'TTFT p50':>9} {'TTFT p99':>9} {'tokens/s':>9} "
          f"{'cache hit':>9} {'errors':>6}  p99 by round")
    for r in rows:
        print(f"{r['users']:>5} {r['replicas']:>7} {r['name']:<18} {r['n']:>8} {r['p50']:>9.3f} {r['p99']:>9.3f} {r['tps']:>9.0f} "
              f"{r['hit']:>9.1%} {r['errors']:>6}  {' '.join(f'{x:.3f}' for x in r['p99s'])}", flush=True)


async def main(args: argparse.Namespace) -> None:
    engines = _spawn("engines", f"--engines={args.engines}")
    rows: list[dict] = []
    t0 = time.time()
    try:
        for users in args.levels:
            need, mean = kv_demand(users, args.engines, args.seed, args.scale)
            print(f"# {users} users: their conversations need {need:.0%} of the engines' KV cache (a turn leaves {mean:,.0f} "
                  f"tokens cached){'; past what the caches hold' if need > 1 else ''}", flush=True)
            runs: dict[tuple[int, str], list[dict]] = {}
            for rnd in range(args.rounds):  # rounds interleave, so drift on the machine touches every strategy alike
                seed = args.seed + rnd  # each round its own conversations; every strategy of a round the same ones
                for replicas in args.replicas:
                    for name, strategy, scrape, tune in [(*s, "") for s in STRATEGIES] + args.tune:
                        if args.strategies and name not in args.strategies and not tune:
                            continue
                        if strategy is None and replicas != args.replicas[0]:  # no proxy: the one figure stands in every block
                            runs[(replicas, name)] = runs[(args.replicas[0], name)]
                            continue
                        runs.setdefault((replicas, name), []).append(
                            await one_run(args, name, strategy, scrape, replicas, users, tune, seed))
                        print(f"# {users} users, round {rnd + 1}, {replicas} proxies, {name}: TTFT p99 "
                              f"{pct(runs[(replicas, name)][-1]['ttft'], 99):.3f} s, done at {time.time() - t0:.0f}s",
                              file=sys.stderr, flush=True)
            level = [{**_pool(rs), "replicas": replicas} for (replicas, _), rs in runs.items()]
            rows += level
            _print(level)
            for replicas in args.replicas:
                top = [r for r in level if r["replicas"] == replicas]
                best = min(top, key=lambda r: r["p99"])
                print(f"# {users} users, {replicas} proxies: lowest TTFT p99 -> {best['name']} ({best['p99']:.3f} s)", flush=True)
        print("\n## all levels")
        _print(rows)
    finally:
        engines.terminate()
        engines.wait()


def _tune_rows(spec: str) -> list[tuple[str, str, float, str]]:
    rows = []
    for v in spec.split(";"):
        name, _, sets = v.partition(":")
        name, _, strategy = name.partition("@")
        strategy = strategy or "PrefixHash"
        rows.append((f"{'LL' if strategy == 'LeastLoad' else 'PH'}+engine[{name}]", strategy, 1.0, sets))
    return rows


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--role", default="main", choices=["main", "engines", "proxy"])
    p.add_argument("--port", type=int, default=PROXY_PORT)
    p.add_argument("--strategy", default="LeastLoad")
    p.add_argument("--engines", type=int, default=4)
    p.add_argument("--levels", type=lambda s: [int(x) for x in s.split(",")], default=[64, 128])
    p.add_argument("--duration", type=float, default=120.0)
    p.add_argument("--warmup", type=float, default=60.0)
    p.add_argument("--scrape-interval", type=float, default=1.0, help="the proxy's --proxy-engine-metrics-interval (default 1 s)")
    p.add_argument("--scale", type=float, default=1.0, help="scales the first message's length")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--rounds", type=int, default=1, help="runs of every strategy, interleaved, each with its own conversations "
                   "(seed, seed+1, ...); TTFT percentiles are over all of a strategy's requests")
    p.add_argument("--think", type=float, default=2.0, help="median seconds a user waits between turns")
    p.add_argument("--strategies", type=lambda x: x.split(","), default=[], help="only these (comma-separated names)")
    p.add_argument("--instrument", action="store_true", help="per run on stderr: engine queue depth, batch spread, "
                   "where the slowest first tokens waited, PrefixHash choices")
    p.add_argument("--trace-dir", default="", help="with --instrument: write each run's samples and traces there (JSON)")
    p.add_argument("--replicas", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2], help="proxy replica counts")
    p.add_argument("--tune", type=_tune_rows, default=[],
                   help="extra engine-aware rows with scorer constants set: 'NAME:HOME_SLACK=2,W_KV=8;NAME2@LeastLoad:...' "
                        "(PrefixHash unless @LeastLoad)")
    p.add_argument("--set", action="append", default=[], help=argparse.SUPPRESS)
    p.add_argument("--quick", action="store_true", help="one level (64 users), 20 s runs")
    p.add_argument("--fair", action="store_true", help=argparse.SUPPRESS)  # proxy role: fair queuing on
    p.add_argument("--tenants", action="store_true", help="issue 41: tenant B steady, tenant A flooding (bench/serving_tenants.py)")
    p.add_argument("--b-users", type=int, default=16, help="with --tenants: tenant B's users (think --think s between turns)")
    p.add_argument("--fair-tune", type=lambda spec: [tuple(v.partition(":")[::2]) for v in spec.split(";") if v], default=[],
                   help="with --tenants: extra fair rows with limits set: 'NAME:reserve=0,prefill_yield=0;NAME2:reserve=4'")
    p.add_argument("--a-users", type=int, default=96, help="with --tenants: tenant A's flooding users (no think time)")
    args = p.parse_args(argv)
    if args.quick:
        args.levels, args.duration, args.warmup = [64], 20.0, 8.0
    return args


if __name__ == "__main__":
    a = parse(sys.argv[1:])
    if a.role == "engines":
        asyncio.run(_engines_main(a.engines))
    elif a.role == "proxy":
        asyncio.run(_proxy_main(a.port, a.strategy, a.scrape_interval, a.engines, a.set, a.fair))
    elif a.tenants:
        from serving_tenants import tenants_main

        asyncio.run(tenants_main(a))
    else:
        asyncio.run(main(a))
