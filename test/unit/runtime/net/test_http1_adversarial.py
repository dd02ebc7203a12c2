"""The pooled HTTP/1.1 client (kaiwo_ctrl/runtime/net/http1.py) against hostile or
quirky model servers: interim answers, cut-short bodies, bad framing, huge
heads, bytes after the answer. After each, the next caller on the same pool
gets its own answer, and a connection that served a broken exchange is never
handed to anyone else."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from kaiwo_ctrl.runtime.net.http1 import HeadTooLarge, Pool, ProtocolError, RemoteClosed
from support.rawupstream import RawUpstream, Seen, json_answer
from support import eventually

EXPECT = [(b"Expect", b"100-continue")]


@pytest.fixture
async def pool():
    p = Pool(connect_timeout=5, max_head_bytes=16 << 10)
    yield p
    await p.close()


@pytest.fixture
async def upstream():
    u = await RawUpstream().start()
    yield u
    await u.stop()


async def ask(pool: Pool, up: RawUpstream, who: str, headers=()) -> tuple[int, dict]:
    async with await pool.request("POST", up.address, "/v1/completions", list(headers), who.encode()) as resp:
        return resp.status, orjson.loads(await resp.read())


async def test_100_continue_is_not_the_answer_two_callers_share_the_connection(pool, upstream):
    """The reported leak: an upstream that answers ``Expect`` with 100 handed the
    first caller's completion to the next caller of the pooled connection."""
    assert await ask(pool, upstream, "mallory-primer", EXPECT) == (200, {"completion_for": "mallory-primer"})
    assert await ask(pool, upstream, "bob") == (200, {"completion_for": "bob"})
    assert await ask(pool, upstream, "carol", EXPECT) == (200, {"completion_for": "carol"})
    assert upstream.connections == 1, "one kept-alive connection served all three, each its own answer"


async def test_103_and_100_unasked_are_skipped_with_and_without_expect(pool):
    up = await RawUpstream(interim=b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </x>; rel=preload\r\n\r\n").start()
    try:
        for who, headers in (("alice", EXPECT), ("bob", ()), ("carol", EXPECT), ("dave", ())):
            assert await ask(pool, up, who, headers) == (200, {"completion_for": who})
        assert up.connections == 1
    finally:
        await up.stop()


async def test_interim_answers_without_end_hit_the_head_limit(pool, upstream):
    async def flood(seen: Seen, w: asyncio.StreamWriter) -> None:
        for _ in range(2000):
            w.write(b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n")
            await w.drain()

    upstream.answer = flood
    with pytest.raises(HeadTooLarge):
        await ask(pool, upstream, "alice")
    upstream.answer = upstream.normal
    assert await ask(pool, upstream, "bob") == (200, {"completion_for": "bob"})
    assert upstream.connections == 2


async def test_101_is_a_protocol_error(pool, upstream):
    async def switch(seen: Seen, w: asyncio.StreamWriter) -> None:
        w.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n" + json_answer("alice"))

    upstream.answer = switch
    with pytest.raises(ProtocolError):
        await ask(pool, upstream, "alice")
    upstream.answer = upstream.normal
    assert await ask(pool, upstream, "bob") == (200, {"completion_for": "bob"})
    assert upstream.connections == 2


async def test_bytes_after_the_answer_close_the_connection(pool, upstream):
    """A second answer to one request (the next caller's would-be answer) is never delivered to anyone."""
    async def twice(seen: Seen, w: asyncio.StreamWriter) -> None:
        w.write(json_answer(seen.tag) + json_answer("planted-for-the-next-caller"))

    upstream.answer = twice
    assert await ask(pool, upstream, "alice") == (200, {"completion_for": "alice"})
    upstream.answer = upstream.normal
    assert await ask(pool, upstream, "bob") == (200, {"completion_for": "bob"})
    assert upstream.connections == 2, "the connection with bytes beyond its answer was not reused"


async def test_bytes_while_idle_close_the_connection(pool, upstream):
    async def late(seen: Seen, w: asyncio.StreamWriter) -> None:
        w.write(json_answer(seen.tag))
        await w.drain()
        await asyncio.sleep(0.05)
        w.write(json_answer("planted-while-idle"))

    upstream.answer = late
    assert await ask(pool, upstream, "alice") == (200, {"completion_for": "alice"})
    await eventually(lambda: pool.idle_count(upstream.address) == 0, what="the idle connection that got bytes is dropped")
    upstream.answer = upstream.normal
    assert await ask(pool, upstream, "bob") == (200, {"completion_for": "bob"})


@pytest.mark.parametrize("answer, error", [
    (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly ten b", RemoteClosed),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n", ProtocolError),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nhi!", ProtocolError),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n", ProtocolError),
    (b"HTTP/1.1 200 OK\r\nX-Pad: " + b"a" * (2 << 20) + b"\r\nContent-Length: 2\r\n\r\nhi", HeadTooLarge),
    (b"HTTP/1.1 200 OK\r\n" + b"X-Many: a\r\n" * 200_000 + b"Content-Length: 2\r\n\r\nhi", HeadTooLarge),
])
async def test_broken_answers_fail_and_are_never_reused(pool, upstream, answer, error):
    async def broken(seen: Seen, w: asyncio.StreamWriter) -> None:
        w.write(answer)
        await w.drain()
        if answer.startswith(b"HTTP/1.1 200 OK\r\nContent-Length: 100"):
            w.close()  # cut short

    upstream.answer = broken
    with pytest.raises(error):
        async with await pool.request("POST", upstream.address, "/v1/completions", [], b"alice") as resp:
            await resp.read()
    assert pool.idle_count(upstream.address) == 0
    upstream.answer = upstream.normal
    assert await ask(pool, upstream, "bob") == (200, {"completion_for": "bob"})
    assert upstream.connections == 2
    await eventually(lambda: upstream.closed_by_peer >= 1, what="the broken connection closed")


async def test_answer_abandoned_mid_body_closes_the_connection(pool, upstream):
    """A client that goes away mid-answer: the rest of that answer must not reach the next caller."""
    async def slow(seen: Seen, w: asyncio.StreamWriter) -> None:
        w.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n")
        await w.drain()
        await asyncio.sleep(0.2)
        w.write(b"6\r\nsecond\r\n0\r\n\r\n")

    upstream.answer = slow
    resp = await pool.request("POST", upstream.address, "/v1/completions", [], b"alice")
    assert await anext(aiter(resp)) == b"first"
    resp.release()
    assert pool.idle_count(upstream.address) == 0
    upstream.answer = upstream.normal
    assert await ask(pool, upstream, "bob") == (200, {"completion_for": "bob"})
    assert upstream.connections == 2
