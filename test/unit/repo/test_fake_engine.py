"""The serving bench's simulated engine keeps its KV cache the way vLLM's prefix caching does."""

from __future__ import annotations

import asyncio
import sys
from dataclasses import replace

from support import REPO

sys.path.insert(0, str(REPO / "bench"))

from fake_engine import LLAMA31_8B_A100_40GB, Engine

BLOCK_CHARS = LLAMA31_8B_A100_40GB.block_tokens * LLAMA31_8B_A100_40GB.chars_per_token


def _engine(kv_blocks: int) -> Engine:
    return Engine(replace(LLAMA31_8B_A100_40GB, kv_tokens=kv_blocks * LLAMA31_8B_A100_40GB.block_tokens))


def _text(tag: str, blocks: int) -> str:
    return "".join(f"{tag}{i:05d}".ljust(BLOCK_CHARS, ".") for i in range(blocks))


def _run(engine: Engine, text: str | None = None, max_tokens: int = 1):
    """Queue ``text`` (if given) and run one admission pass, as the engine's loop does before each step."""
    async def go():
        s = await engine.generate(text, max_tokens, seed=0) if text is not None else None
        engine._admit()
        return s
    return asyncio.run(go())


def _end(engine: Engine, s) -> None:
    engine.running.remove(s)
    engine._finish(s)


def test_a_hit_reuses_the_cached_blocks_instead_of_taking_new_ones():
    eng = _engine(100)
    first = _run(eng, _text("a", 40))
    _end(eng, first)
    assert len(eng.cache) == 40 and eng.held == 0
    second = _run(eng, _text("a", 40) + _text("b", 10))
    assert second.hit_tokens == 40 * 16
    # 50 prompt blocks and one for the output, the 40 hit ones among them; nothing counted twice
    assert eng.held == 51
    assert len(eng.cache) == 0
    assert eng.held + len(eng.cache) <= eng.total_blocks


def test_two_running_requests_share_a_prefix_block_once():
    eng = _engine(100)
    a = _run(eng, _text("s", 30) + _text("x", 5))
    b = _run(eng, _text("s", 30) + _text("y", 5))
    assert b.hit_tokens == 30 * 16
    assert eng.held == 30 + 5 + 5 + 2  # the shared 30 once, each request's own 5, one output block each
    _end(eng, a)
    assert eng.held == 30 + 5 + 1  # b still holds the shared blocks
    _end(eng, b)
    assert eng.held == 0 and len(eng.cache) == 40


def test_eviction_takes_a_finished_requests_tail_before_its_head():
    eng = _engine(100)
    _end(eng, _run(eng, _text("a", 60)))
    _end(eng, _run(eng, _text("z", 60)))  # needs 61 blocks: evicts 21 of a's 60 (held 61 + cached 39 = 100)
    assert eng.held == 0
    s = _run(eng, _text("a", 60))
    assert s.hit_tokens == 39 * 16  # a's first 39 blocks survived: its tail went first


def test_a_request_waits_for_room_and_one_alone_always_runs():
    eng = _engine(50)
    big = _run(eng, _text("a", 80))
    assert eng.running == [big]  # larger than the cache, but alone: it runs
    small = _run(eng, _text("b", 5))
    assert eng.waiting[0] is small and small not in eng.running
    _end(eng, big)
    _run(eng)
    assert small in eng.running
