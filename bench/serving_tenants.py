"""``bench_serving.py --tenants`` (issue #41): does one tenant's flood raise another's time to first token?

Same engines and conversations as bench_serving.py. Tenant B (``--b-users`` users, ``--think`` s between turns,
from 127.0.0.3) is the steady one; tenant A (``--a-users`` users, no think time, from 127.0.0.2) floods. Each
strategy runs twice: B alone, then B under A's flood. A tenant is its client address (the proxy as with
``--proxy-auth none``). A's requests refused with 429 are counted and A goes on after 50 ms (it ignores
``Retry-After``, as a flood would).

Reported per strategy and proxy count: B's TTFT p50/p99 alone and under the flood, the ratio of the p99s, each
tenant's goodput (output tokens/s of answered requests in the window), the engines' total (A + B), A's 429s; and,
as "same n" and "same x", the ratio of the p99s over the requests B sent in the windows of both runs (the same
turns of the same conversations, so the same prompts: under the flood B gets through fewer turns, and which of
its long first prompts fall in a window moves the plain p99 as much as the flood does).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import multiprocessing
import os
import random
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import aiohttp
import orjson
from procstat import cpu_seconds
from bench_serving import ENGINE_PORT, ChatStream, HOSTS, PROXY_PORT, STRATEGIES, SYSTEM, _reset, _spawn, _traces, _words, conversation, pct

A, B = "127.0.0.2", "127.0.0.3"
ROWS = [(*s, False, "") for s in STRATEGIES] + [("PrefixHash+engine+fair", "PrefixHash", 1.0, True, "")]


class Tenant:
    def __init__(self) -> None:
        self.ttft: list[float] = []
        self.turns: dict[str, float] = {}  # "<user>:<conversation>:<turn>" -> TTFT, for the requests in the window
        self.tokens = 0
        self.rejected = 0
        self.errors = 0


async def _chat(http: aiohttp.ClientSession, url: str, messages: list, max_tokens: int) -> tuple[int, float, str]:
    body = orjson.dumps({"model": "bench", "messages": messages, "max_tokens": max_tokens, "stream": True})
    answer = ChatStream()
    async with http.post(url, data=body, headers={"Content-Type": "application/json"}) as r:
        if r.status != 200:
            await r.read()
            return r.status, 0.0, ""
        async for chunk in r.content.iter_any():
            answer.feed(chunk)
    return 200, answer.ttft, answer.text


async def tenant_load(address: str, urls: list[str], users: int, think: float, args: argparse.Namespace, seed: int,
                      random_route: bool) -> Tenant:
    out = Tenant()
    start = time.perf_counter()
    measure_from, stop_at = start + args.warmup, start + args.duration
    conn = aiohttp.TCPConnector(local_addr=(address, 0), limit=0)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=args.duration + 60)) as http:
        async def user(u: int) -> None:
            rng, route_rng = random.Random(seed * 1000 + u), random.Random(seed * 7919 + u)
            url = urls[u % len(urls)]
            c = 0
            while time.perf_counter() < stop_at:
                c += 1
                conv = conversation(rng, args.scale)
                messages = [{"role": "system", "content": SYSTEM},
                            {"role": "user", "content": f"[{address}:{u}:{rng.random():.6f}] " + _words(rng, conv.first)}]
                for k, (user_tokens, reply_tokens) in enumerate(conv.turns):
                    if time.perf_counter() >= stop_at:
                        return
                    if random_route:
                        url = route_rng.choice(urls)
                    t = time.perf_counter()
                    try:
                        code, ttft, reply = await _chat(http, url, messages, reply_tokens)
                    except (OSError, ValueError, KeyError, asyncio.TimeoutError):
                        code, ttft, reply = 0, 0.0, ""
                    if code != 200:
                        out.rejected += code == 429
                        out.errors += code != 429
                        await asyncio.sleep(0.05)
                        break
                    if t >= measure_from:
                        out.ttft.append(ttft)
                        out.turns[f"{u}:{c}:{k}"] = ttft
                        out.tokens += reply_tokens
                    messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": _words(rng, user_tokens)}]
                    if think:
                        await asyncio.sleep(rng.lognormvariate(math.log(think), 0.6))

        await asyncio.gather(*(user(u) for u in range(users)))
    return out


def _flood(*args) -> tuple[Tenant, float]:
    """A's load in its own process (so it does not delay the reading of B's streams): its tally and CPU seconds."""
    got = asyncio.run(tenant_load(*args))
    return got, time.process_time()


async def one(args: argparse.Namespace, strategy: str | None, scrape: float, fair: bool, replicas: int, flood: bool,
              sets: str = "") -> dict:
    await _reset(args.engines)
    procs = []
    if strategy is None:
        urls = [f"http://{h}:{ENGINE_PORT}/v1/chat/completions" for h in HOSTS[:args.engines]]
    else:
        urls = []
        for i in range(replicas):
            procs.append(_spawn("proxy", f"--port={PROXY_PORT + i}", f"--strategy={strategy}", f"--engines={args.engines}",
                                f"--scrape-interval={scrape and args.scrape_interval}", *(["--fair"] if fair else []),
                                *(f"--set=fair.{kv}" for kv in sets.split(",") if kv)))
            urls.append(f"http://127.0.0.1:{PROXY_PORT + i}/openai/v1/chat/completions")
        await asyncio.sleep(max(1.0, 2 * args.scrape_interval) if scrape else 0.2)
    mark = (await _traces(args.engines))[0] + args.warmup
    pids = {"engines": args.engines_pid, "load": os.getpid(), **{f"proxy{i}": p.pid for i, p in enumerate(procs)}}
    cpu0, t0 = {k: cpu_seconds(v) for k, v in pids.items()}, time.perf_counter()
    try:
        loads: list = [tenant_load(B, urls, args.b_users, args.think, args, args.seed, strategy is None)]
        if flood:
            with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
                loads.append(asyncio.get_running_loop().run_in_executor(
                    pool, _flood, A, urls, args.a_users, 0.0, args, args.seed + 500, strategy is None))
                got = await asyncio.gather(*loads)
        else:
            got = await asyncio.gather(*loads)
        elapsed = time.perf_counter() - t0
        cpu = {k: (cpu_seconds(v) - cpu0[k]) / elapsed for k, v in pids.items()}
        if flood:
            got[1], cpu["load A"] = got[1][0], got[1][1] / elapsed
    finally:
        for p in procs:
            p.terminate()
            p.communicate()
    window = args.duration - args.warmup
    b, a = got[0], (got[1] if flood else Tenant())
    if args.instrument:  # where B's first tokens waited: at the engines (admission queue, then to the first token)
        _, trace = await _traces(args.engines, mark)
        bt = [t for t in trace if t[4] == B]
        print(f"#   {strategy} x{replicas} {'flood' if flood else 'alone'}: B at the engines: {len(bt)} requests, queue p50/p99 "
              f"{pct([t[0] for t in bt], 50):.3f}/{pct([t[0] for t in bt], 99):.3f}s, first token p50/p99 "
              f"{pct([t[1] for t in bt], 50):.3f}/{pct([t[1] for t in bt], 99):.3f}s; all requests: first token p99 "
              f"{pct([t[1] for t in trace], 99):.3f}s; B's TTFT p50/p99 {pct(b.ttft, 50):.3f}/{pct(b.ttft, 99):.3f}s; CPU "
              + ", ".join(f"{k} {v:.0%}" for k, v in cpu.items()),
              file=sys.stderr, flush=True)
        if args.trace_dir:
            Path(args.trace_dir).mkdir(parents=True, exist_ok=True)
            Path(args.trace_dir, f"tenants-{replicas}-{strategy}{'-fair' if fair else ''}-{'flood' if flood else 'alone'}.json").write_bytes(
                orjson.dumps({"b_ttft": b.ttft, "trace": trace}))
    return {"p50": pct(b.ttft, 50), "p99": pct(b.ttft, 99), "b_tps": b.tokens / window, "a_tps": a.tokens / window,
            "a_429": a.rejected, "errors": a.errors + b.errors, "n": len(b.ttft), "turns": b.turns}


def same_turns(alone: dict, flood: dict) -> tuple[int, float]:
    """How many requests B sent in both runs' windows, and the ratio of their TTFT p99s (flood over alone)."""
    common = alone["turns"].keys() & flood["turns"].keys()
    if not common:
        return 0, math.nan
    return len(common), pct([flood["turns"][k] for k in common], 99) / pct([alone["turns"][k] for k in common], 99)


async def tenants_main(args: argparse.Namespace) -> None:
    engines = _spawn("engines", f"--engines={args.engines}")
    args.engines_pid = engines.pid
    try:
        print(f"# tenants: B {args.b_users} users (think {args.think}s), A {args.a_users} flooding users; "
              f"{args.duration:.0f}s runs, the first {args.warmup:.0f}s not measured", flush=True)
        print(f"{'proxies':>7} {'strategy':<24} {'B p50 alone':>11} {'B p99 alone':>11} {'B p50 flood':>11} {'B p99 flood':>11} "
              f"{'p99 x':>6} {'B tok/s':>8} {'A tok/s':>8} {'total':>8} {'A 429s':>7} {'errors':>6} {'same n':>6} {'same x':>6}",
              flush=True)
        for replicas in args.replicas:
            tuned = [(f"PH+engine+fair[{n}]", "PrefixHash", 1.0, True, sets) for n, sets in args.fair_tune]
            for name, strategy, scrape, fair, sets in ROWS + tuned:
                if args.strategies and name not in args.strategies and not sets:
                    continue
                if strategy is None and replicas != args.replicas[0]:
                    continue
                alone = await one(args, strategy, scrape, fair, replicas, False, sets)
                flood = await one(args, strategy, scrape, fair, replicas, True, sets)
                same = same_turns(alone, flood)
                print(f"{replicas:>7} {name:<24} {alone['p50']:>11.3f} {alone['p99']:>11.3f} {flood['p50']:>11.3f} "
                      f"{flood['p99']:>11.3f} {flood['p99'] / alone['p99']:>6.2f} {flood['b_tps']:>8.0f} {flood['a_tps']:>8.0f} "
                      f"{flood['b_tps'] + flood['a_tps']:>8.0f} {flood['a_429']:>7} {alone['errors'] + flood['errors']:>6} "
                      f"{same[0]:>6} {same[1]:>6.2f}", flush=True)
    finally:
        engines.terminate()
        engines.wait()
