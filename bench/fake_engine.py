"""A simulated vLLM engine for the serving benchmark (bench/bench_serving.py).

It behaves like vLLM in what matters to routing, and nothing else:

* a KV cache of fixed-size blocks (``block_tokens`` tokens), kept as vLLM's
  automatic prefix caching keeps it: a block is keyed by a hash chained over
  the text before it; a request holds its prompt's blocks (shared, by
  reference count, with any running request holding the same block: a cache
  hit takes no new block) and room for its output while it runs; when it
  ends, its full blocks stay cached and are evicted least recently used when
  running requests need the room, a request's tail blocks before its head
  (vLLM frees them in reverse order, so a conversation's beginning, which the
  next turn can still hit, outlives its end);
* a prefill time proportional to the prompt tokens that are not cached
  (chunked: at most ``max_batched_tokens`` tokens per step, decode first);
* a decode step whose time grows with the running batch
  (``step_base_s + step_per_seq_s * batch``), every running request getting one
  token per step;
* ``max_num_seqs`` running requests at most, and admission only when the KV
  blocks fit; the rest wait in FIFO order (a simplification: vLLM allocates
  the output's blocks step by step and preempts a running request when they
  run out; here they are reserved at admission, so nothing is preempted);
* streaming: the first token as its own SSE event, then one event per
  ``stream_every`` tokens (coalesced so the harness's CPU goes to what is
  measured; time to first token is exact);
* vLLM's series on ``GET /metrics``: ``vllm:num_requests_running``,
  ``vllm:num_requests_waiting``, ``vllm:kv_cache_usage_perc``,
  ``vllm:prefix_cache_queries_total`` and ``vllm:prefix_cache_hits_total``
  (tokens).

Text is tokenised as ``chars_per_token`` characters per token; a chat request
is rendered as ``<|role|>content<|end|>`` per message plus ``<|assistant|>``,
so the next turn of a conversation (which repeats the earlier messages and the
assistant's reply) starts with the blocks the last turn left cached.

Default parameters: :data:`LLAMA31_8B_A100_40GB` (see its comment).
``POST /reset`` empties the cache and counters (the benchmark calls it
between runs, with the engine idle).
"""

from __future__ import annotations

import asyncio
import math
from collections import OrderedDict, deque
from dataclasses import dataclass, field

import orjson
import xxhash

# Llama-3.1-8B-Instruct (BF16) on one NVIDIA A100 40GB, vLLM 0.23.0, as published in
# "vLLM throughput-latency sweep on NVIDIA A100" (johnmusgrave.com/p/vllm-throughput-latency-sweep-on):
# one request decodes at ~75 tokens/s (13.3 ms a step) and 8 concurrent requests give 6.6x
# that throughput (~495 tokens/s, 16.2 ms a step), so a step costs ~12.9 ms + ~0.41 ms per
# running request. Prefill: 2 x 8e9 FLOPs a token at ~50 % of the A100's 312 TFLOPS (BF16)
# = ~0.1 ms a token. KV cache: 40 GB x 0.9 (vLLM's default gpu_memory_utilization) less
# 16 GB of weights and ~2 GB of activations = ~18 GB; a token takes 2 (K, V) x 32 layers
# x 8 KV heads x 128 x 2 bytes = 128 KiB, so ~140,000 tokens. max_num_seqs: vLLM's 256.
# max_batched_tokens: vLLM's default for its OpenAI server on an A100 (or any GPU under 70 GiB),
# 2,048 tokens a step; 8,192 is its default on larger GPUs (H100, MI300x), not on this one.


@dataclass(frozen=True)
class EngineParams:
    step_base_s: float = 0.0129
    step_per_seq_s: float = 0.00041
    prefill_per_token_s: float = 0.0001
    kv_tokens: int = 140_000
    block_tokens: int = 16
    max_num_seqs: int = 256
    max_batched_tokens: int = 2048
    chars_per_token: int = 4
    stream_every: int = 4


LLAMA31_8B_A100_40GB = EngineParams()
_VOCAB = [w.ljust(4)[:4] for w in "the cat sat on mat and dog ran far off to see a big red sun set low in sky".split()]


def render(messages: list) -> str:
    parts = []
    for m in messages:
        if isinstance(m, dict):
            parts.append(f"<|{m.get('role', '')}|>{m.get('content', '')}<|end|>")
    return "".join(parts) + "<|assistant|>"


def reply_text(seed: int, n: int) -> str:
    return "".join(_VOCAB[(seed + i * 7) % len(_VOCAB)] for i in range(n))


@dataclass(eq=False)
class Seq:
    text: str  # prompt text
    prompt_tokens: int
    max_tokens: int
    seed: int
    blocks: list = field(default_factory=list)  # the prompt's block hashes (hashed once, on arrival), held while it runs
    reserved: int = 0  # blocks reserved for the output while it runs
    to_prefill: int = 0
    generated: int = 0
    events: asyncio.Queue = field(default_factory=asyncio.Queue)
    arrived: float = 0.0  # loop time it was queued
    admitted: float = 0.0  # loop time it was admitted (its wait for a slot and KV blocks ends)
    hit_tokens: int = 0
    tag: str = ""  # the first user message's "[tag:" (the bench's tenant address), for per-tenant traces


class Engine:
    def __init__(self, params: EngineParams = LLAMA31_8B_A100_40GB) -> None:
        self.p = params
        self.total_blocks = params.kv_tokens // params.block_tokens
        self.cache: OrderedDict[int, None] = OrderedDict()  # free cached blocks, evicted first to last
        self.pinned: dict[int, int] = {}  # prompt blocks held by running requests: hash -> reference count
        self.reserved = 0  # blocks running requests hold for their output
        self.waiting: deque[Seq] = deque()
        self.running: list[Seq] = []
        self.queries = self.hits = 0
        #: per request: (arrived, queue s, first token s, prompt, hit tokens, tag)
        self.trace: list[tuple[float, float, float, int, int, str]] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop())

    @property
    def held(self) -> int:
        return len(self.pinned) + self.reserved

    def reset(self) -> None:
        self.cache.clear()
        self.queries = self.hits = 0
        self.trace.clear()

    def block_hashes(self, text: str) -> list[int]:
        size = self.p.block_tokens * self.p.chars_per_token
        out, h = [], 0
        for i in range(0, len(text) - size + 1, size):
            h = xxhash.xxh64_intdigest(text[i:i + size].encode(), seed=h & 0xFFFFFFFF)
            out.append(h)
        return out

    async def generate(self, text: str, max_tokens: int, seed: int) -> Seq:
        s = Seq(text, math.ceil(len(text) / self.p.chars_per_token), max(1, max_tokens), seed)
        s.blocks = self.block_hashes(text)
        i = text.find("<|user|>[")
        j = text.find(":", i + 9, i + 40) if i >= 0 else -1
        if j > 0:
            s.tag = text[i + 9:j]
        s.arrived = asyncio.get_running_loop().time()
        self.waiting.append(s)
        self._wake.set()
        return s

    # ---------------------------------------------------------------- loop
    def _admit(self) -> None:
        while self.waiting and len(self.running) < self.p.max_num_seqs:
            s = self.waiting[0]
            blocks = s.blocks
            fresh = sum(1 for h in blocks if h not in self.pinned)  # blocks it takes from the free pool
            extra = max(0, math.ceil((s.prompt_tokens + s.max_tokens) / self.p.block_tokens) - len(blocks))
            if self.held + fresh + extra > self.total_blocks and self.running:
                return  # wait for blocks (one request alone always runs)
            self.waiting.popleft()
            cached = 0
            for h in blocks:
                if h not in self.pinned and h not in self.cache:
                    break
                cached += 1
            for h in blocks:  # a hit leaves the free pool (vLLM "touches" it); the rest are computed into it
                self.cache.pop(h, None)
                self.pinned[h] = self.pinned.get(h, 0) + 1
            hit_tokens = min(cached * self.p.block_tokens, s.prompt_tokens - 1)
            self.queries += s.prompt_tokens
            self.hits += hit_tokens
            s.to_prefill = s.prompt_tokens - hit_tokens
            s.hit_tokens, s.admitted = hit_tokens, asyncio.get_running_loop().time()
            s.reserved = extra
            self.reserved += extra
            self._evict()
            self.running.append(s)

    def _evict(self) -> None:
        room = max(0, self.total_blocks - self.held)
        while len(self.cache) > room:
            self.cache.popitem(last=False)

    def _finish(self, s: Seq) -> None:
        self.reserved -= s.reserved
        for h in s.blocks:
            if self.pinned[h] > 1:
                self.pinned[h] -= 1
            else:
                del self.pinned[h]
        for h in reversed(self.block_hashes(s.text + reply_text(s.seed, s.generated))):
            if h not in self.pinned:  # tail first, so the tail is evicted first
                self.cache[h] = None
                self.cache.move_to_end(h)
        self._evict()
        s.events.put_nowait(None)

    async def _loop(self) -> None:
        while True:
            if not self.running and not self.waiting:
                self._wake.clear()
                await self._wake.wait()
            self._admit()
            decoding = [s for s in self.running if s.to_prefill == 0]
            budget = self.p.max_batched_tokens - len(decoding)
            prefilled, prefill_tokens = [], 0
            for s in self.running:
                if s.to_prefill and budget > 0:
                    take = min(s.to_prefill, budget)
                    s.to_prefill -= take
                    budget -= take
                    prefill_tokens += take
                    if s.to_prefill == 0:
                        prefilled.append(s)
            await asyncio.sleep(self.p.step_base_s + self.p.step_per_seq_s * len(self.running)
                                + self.p.prefill_per_token_s * prefill_tokens)
            self._emit(decoding + prefilled)

    def _emit(self, stepped: list[Seq]) -> None:
        done = []
        for s in stepped:
            s.generated += 1
            if s.generated == 1 and len(self.trace) < 200_000:
                now = asyncio.get_running_loop().time()
                self.trace.append((s.arrived, s.admitted - s.arrived, now - s.arrived, s.prompt_tokens, s.hit_tokens, s.tag))
            if s.generated >= s.max_tokens:
                done.append(s)
            elif s.generated == 1 or s.generated % self.p.stream_every == 0:
                s.events.put_nowait(s.generated)
        for s in done:
            s.events.put_nowait(s.generated)
            self.running.remove(s)
            self._finish(s)

    def metrics(self) -> bytes:
        return (
            f"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{{model_name=\"bench\"}} {len(self.running)}\n"
            f"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{{model_name=\"bench\"}} {len(self.waiting)}\n"
            f"# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{{model_name=\"bench\"}} "
            f"{min(1.0, self.held / self.total_blocks):.4f}\n"
            f"vllm:prefix_cache_queries_total{{model_name=\"bench\"}} {self.queries}\n"
            f"vllm:prefix_cache_hits_total{{model_name=\"bench\"}} {self.hits}\n"
        ).encode()


async def serve_engines(hosts: list[str], port: int, params: EngineParams) -> list[Engine]:
    """One engine per host on ``port`` (lean HTTP server of the runtime)."""
    from kaiwo_ctrl.runtime.net.http1server import Request, Response, Server

    engines = []
    for h in hosts:
        eng = Engine(params)
        eng.start()
        engines.append(eng)
        server = Server(_handler(eng, Request, Response))
        await server.start(h, port)
    return engines


def _handler(eng: Engine, Request, Response):  # the runtime's classes, imported lazily
    text_type = [(b"Content-Type", b"text/plain; version=0.0.4")]

    async def handle(request):
        if request.path == "/metrics":
            return Response(200, text_type, eng.metrics())
        if request.path == "/trace":  # the bench's instrumentation: per-request queue and first-token times, and the clock
            return Response(200, [(b"Content-Type", b"application/json")],
                            orjson.dumps({"now": asyncio.get_running_loop().time(), "trace": eng.trace}))
        if request.path == "/reset":
            eng.reset()
            return Response(200, text_type, b"ok")
        body = orjson.loads(request.body)
        seed = xxhash.xxh32_intdigest(request.body[:256])
        s = await eng.generate(render(body.get("messages") or []), int(body.get("max_tokens") or 16), seed)
        resp = await request.stream(200, [(b"Content-Type", b"text/event-stream")])
        sent = 0
        try:
            while (n := await s.events.get()) is not None:
                chunk = reply_text(seed, n)[sent * 4:]
                sent = n
                await resp.write(b"data: " + orjson.dumps({"choices": [{"index": 0, "delta": {"content": chunk}}]}) + b"\n\n")
            await resp.write(b"data: [DONE]\n\n")
            await resp.end()
        except (OSError, ConnectionError):
            pass
        return resp

    return handle
