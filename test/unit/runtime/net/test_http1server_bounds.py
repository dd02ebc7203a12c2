"""Per-connection bounds of the HTTP/1.1 server (kaiwo_ctrl/runtime/net/http1server.py): the body
budget returned exactly, write backpressure with pipelining, header counts and sizes on the wire,
slow uploads and per-client shares of the budget, and the head gate. Each case asserts who
received what."""

from __future__ import annotations

import asyncio
import re
import socket

from kaiwo_ctrl.runtime.net.http1server import Request, Response, Server
from support import eventually
from support.echoapp import TEXT, Echo




def statuses(out: bytes) -> list[int]:
    return [int(s) for s in re.findall(rb"HTTP/1\.1 (\d{3}) ", out)]


def post(body: bytes, *extra: bytes) -> bytes:
    return b"POST /x HTTP/1.1\r\nHost: a\r\n%bContent-Length: %d\r\n\r\n%b" % (b"".join(e + b"\r\n" for e in extra), len(body), body)


async def read_all(reader: asyncio.StreamReader, timeout: float = 10) -> bytes:
    out = b""
    async with asyncio.timeout(timeout):
        while chunk := await reader.read(65536):
            out += chunk
    return out


async def test_a_body_in_the_same_read_as_its_queued_head_waits_for_its_grant_and_returns_it():
    """The review's suspected bug: a head queued for the body budget, its body in the same read,
    ran with no reservation, and its later grant was never given back."""
    app = Echo()
    app.gate.clear()
    server = Server(app, max_body_bytes=1000, body_budget=1000, budget_wait=30, head_timeout=5, body_idle_timeout=5)
    port = await server.start("127.0.0.1", 0)
    try:
        r1, w1 = await asyncio.open_connection("127.0.0.1", port)
        w1.write(post(b"a" * 800, b"Connection: close"))
        await eventually(lambda: app.handled == [b"a" * 800], what="the first body is in and held")
        r2, w2 = await asyncio.open_connection("127.0.0.1", port)
        w2.write(post(b"b" * 500, b"Connection: close"))  # head and body in one write
        await eventually(lambda: len(server.budget._waiting) == 1, what="the second request queued for the budget")
        await asyncio.sleep(0.2)  # a handler started without a grant would have shown up by now
        assert app.handled == [b"a" * 800], "the second request's body is not parsed before its grant"
        app.gate.set()
        assert statuses(await read_all(r1)) == [200]
        out = await read_all(r2)
        assert statuses(out) == [200] and out.endswith(b"echo:" + b"b" * 500)
        assert app.handled == [b"a" * 800, b"b" * 500]
        await eventually(lambda: server.budget.free == 1000, what="every reservation given back")
        w1.close()
        w2.close()
    finally:
        app.gate.set()
        await server.close(drain_timeout=1)


async def connect(port: int, *, source: str = "127.0.0.1", rcvbuf: int | None = None):
    s = socket.socket()
    if rcvbuf is not None:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.bind((source, 0))
    s.setblocking(False)
    await asyncio.get_running_loop().sock_connect(s, ("127.0.0.1", port))
    return await asyncio.open_connection(sock=s)


BIG = 256 << 10


async def test_pipelined_answers_never_read_wait_for_the_client_and_others_are_served():
    """1,000 pipelined requests for 256 KiB answers from a client that reads nothing (4 KiB
    receive buffer): the server starts the next only once the answers before it drained."""
    handled: list[int] = []

    async def big(request: Request) -> Response:
        i = int(request.path[1:])
        handled.append(i)
        return Response(200, TEXT, b"%07d" % i + b"x" * (BIG - 7))

    server = Server(big, body_idle_timeout=30, max_pipelined=4)
    port = await server.start("127.0.0.1", 0)
    try:
        reader, writer = await connect(port, rcvbuf=4096)
        writer.write(b"".join(b"GET /%d HTTP/1.1\r\nHost: a\r\n\r\n" % i for i in range(1000)))
        await eventually(lambda: any(c._after is not None for c in server._conns), what="the server waits for the client to read")
        waiting = [c for c in server._conns if c._after is not None]
        # what the kernel's socket buffers took (a few MiB on loopback), not the 1,000
        assert len(handled) < 100, f"{len(handled)} requests answered for a client that read nothing"
        assert len(waiting[0]._queue) <= 4, "at most max_pipelined requests parsed and waiting"
        buffered = sum(c.transport.get_write_buffer_size() for c in server._conns)
        assert buffered <= 4 * BIG, f"{buffered} bytes of answers queued in memory"
        r2, w2 = await connect(port)  # another client still gets its own answer meanwhile
        w2.write(b"GET /77 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        other = await read_all(r2)
        assert statuses(other) == [200] and other.split(b"\r\n\r\n", 1)[1][:7] == b"0000077"
        w2.close()
        writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        got = 0  # the slow client reads at last: every answer, its own, in order
        async with asyncio.timeout(60):
            while got < 1000:
                await reader.readuntil(b"\r\n\r\n")
                body = await reader.readexactly(BIG)
                assert body[:7] == b"%07d" % got
                got += 1
        assert sorted(handled) == sorted([*range(1000), 77]), "each answered once"
        writer.close()
    finally:
        await server.close(drain_timeout=1)


async def test_a_client_that_never_reads_its_answers_is_cut_off():
    async def big(request: Request) -> Response:
        return Response(200, TEXT, b"x" * BIG)

    server = Server(big, body_idle_timeout=0.3)
    port = await server.start("127.0.0.1", 0)
    try:
        reader, writer = await connect(port, rcvbuf=4096)
        writer.write(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n" * 50)
        await eventually(lambda: any(c._after is not None for c in server._conns), what="the server waits for the client to read")
        await eventually(lambda: not server._conns, what="the connection cut off once its answers did not drain")
        writer.close()
    finally:
        await server.close(drain_timeout=1)


async def test_header_count_and_wire_size_limits_are_431():
    app = Echo()
    server = Server(app, max_header_bytes=4096, max_headers=100, head_timeout=5)
    port = await server.start("127.0.0.1", 0)
    try:
        def head(lines: bytes) -> bytes:
            return b"GET / HTTP/1.1\r\nHost: a\r\n" + lines + b"Connection: close\r\n\r\n"

        r, w = await connect(port)
        w.write(head(b"a:\r\n" * 98))  # 100 lines with Host and Connection
        assert statuses(await read_all(r)) == [200]
        r, w = await connect(port)
        w.write(head(b"a:\r\n" * 99))
        assert statuses(await read_all(r)) == [431], "101 header lines"
        r, w = await connect(port)
        w.write(b"GET / HTTP/1.1\r\nHost: a\r\n" + b"a:\r\n" * 65000)  # never ends its head
        assert statuses(await read_all(r)) == [431]
        assert app.handled == [b""], "only the first request reached the handler"
    finally:
        await server.close(drain_timeout=1)
    server = Server(app, max_header_bytes=4096, max_headers=10000, head_timeout=5)
    port = await server.start("127.0.0.1", 0)
    try:
        r, w = await connect(port)
        w.write(b"GET / HTTP/1.1\r\nHost: a\r\n" + b"a:\r\n" * 1100 + b"\r\n")  # 1,100 names of 1 byte: 4,400 bytes on the wire
        assert statuses(await read_all(r)) == [431], "the separators and line endings count"
        r, w = await connect(port)
        w.write(b"GET / HTTP/1.1\r\nHost: a\r\nA:" + b" " * 5000 + b"b\r\n\r\n")  # whitespace the parser drops counts too
        assert statuses(await read_all(r)) == [431]
        assert app.handled == [b""]
    finally:
        await server.close(drain_timeout=1)


async def test_a_trickled_body_is_cut_at_the_minimum_rate_and_returns_its_reservation():
    app = Echo()
    server = Server(app, body_idle_timeout=0.5, min_body_rate=1000, body_budget=1 << 20, max_body_bytes=1 << 20)
    port = await server.start("127.0.0.1", 0)
    try:
        r, w = await connect(port)
        w.write(b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 100000\r\n\r\n")
        out = b""

        async def trickle() -> None:
            for _ in range(100):
                w.write(b"z")  # one byte every 0.1 s: never idle for body_idle_timeout, far under the rate
                await asyncio.sleep(0.1)

        t = asyncio.create_task(trickle())
        try:
            out = await read_all(r)
        finally:
            t.cancel()
        assert statuses(out) == [408] and app.handled == []
        await eventually(lambda: server.budget.free == 1 << 20, what="its reservation given back")
    finally:
        await server.close(drain_timeout=1)


async def test_one_address_holds_at_most_its_share_and_another_address_is_not_held_up():
    app = Echo()
    server = Server(app, max_body_bytes=1000, body_budget=1000, body_share=500, budget_wait=30, head_timeout=30, body_idle_timeout=30)
    port = await server.start("127.0.0.1", 0)
    slow = []
    try:
        for _ in range(3):  # three uploads of 250 from one address, sending only a byte of their body
            slow.append(await connect(port))
            slow[-1][1].write(b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 250\r\n\r\nz")
        await eventually(lambda: server.budget.held.get("127.0.0.1") == 500 and len(server.budget._waiting) == 1,
                         what="two hold the address's share, the third waits")
        r, w = await connect(port, source="127.0.0.2")
        w.write(post(b"b" * 400, b"Connection: close"))
        out = await read_all(r)
        assert statuses(out) == [200] and out.endswith(b"echo:" + b"b" * 400), "answered while the slow uploads are open"
        assert app.handled == [b"b" * 400] and all(not sw.is_closing() for _, sw in slow)
        for _, sw in slow:
            sw.write(b"z" * 249)
        for sr, _ in slow:
            head = await asyncio.wait_for(sr.readuntil(b"\r\n\r\n"), 10)
            assert head.startswith(b"HTTP/1.1 200")
        assert sorted(app.handled[1:]) == [b"z" * 250] * 3
    finally:
        for _, sw in slow:
            sw.close()
        await server.close(drain_timeout=1)


async def test_the_head_gate_refuses_before_any_body_is_read_or_budgeted():
    app = Echo()
    asked: list[str] = []

    def gate(request: Request) -> Response | None:
        asked.append(request.path)
        if request.header(b"x-token") != b"good":
            return Response(403, TEXT, b"no")
        return None

    server = Server(app, max_body_bytes=64 << 20, body_budget=64 << 20, head_gate=gate)
    port = await server.start("127.0.0.1", 0)
    try:
        r, w = await connect(port)
        w.write(b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n" % (32 << 20))  # the head only
        out = await read_all(r)
        assert statuses(out) == [403] and out.endswith(b"no") and b"Connection: close" in out
        assert server.budget.free == 64 << 20 and app.handled == [] and asked == ["/x"]
        r, w = await connect(port)
        w.write(post(b"ok", b"X-Token: good", b"Connection: close"))
        assert (await read_all(r)).endswith(b"echo:ok") and app.handled == [b"ok"]
    finally:
        await server.close(drain_timeout=1)


async def test_an_awaited_head_gate_stops_parsing_until_its_verdict():
    app = Echo()
    verdicts: dict[str, asyncio.Future] = {}

    def gate(request: Request):
        fut = verdicts[request.path] = asyncio.get_running_loop().create_future()
        return fut

    server = Server(app, max_body_bytes=1000, body_budget=1000, head_gate=gate)
    port = await server.start("127.0.0.1", 0)
    try:
        r, w = await connect(port)
        w.write(post(b"a" * 600) + post(b"second", b"Connection: close"))  # both in one write
        await eventually(lambda: "/x" in verdicts, what="the gate asked")
        assert server.budget.free == 1000 and app.handled == [], "nothing budgeted or parsed past the head"
        verdicts.pop("/x").set_result(None)
        await eventually(lambda: "/x" in verdicts, what="the gate asked about the second")
        assert app.handled == [b"a" * 600]
        verdicts["/x"].set_result(Response(401, TEXT, b"denied"))
        out = await read_all(r)
        assert statuses(out) == [200, 401] and out.endswith(b"denied") and app.handled == [b"a" * 600]
        await eventually(lambda: server.budget.free == 1000, what="every reservation given back")
    finally:
        await server.close(drain_timeout=1)


async def test_an_awaited_head_gate_holds_requests_without_a_body_too():
    """A request with no body ends with its head: it must still wait for the gate's verdict. A GET and a
    POST with Content-Length 0, pipelined behind an admitted one: the refused ones never reach the
    handler (an unauthenticated listing must not run while its caller is checked)."""
    app = Echo()
    verdicts: list[asyncio.Future] = []

    def gate(request: Request):
        verdicts.append(fut := asyncio.get_running_loop().create_future())
        return fut

    server = Server(app, head_gate=gate)
    port = await server.start("127.0.0.1", 0)
    try:
        r, w = await connect(port)
        w.write(b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n" + post(b"", b"Connection: close"))
        await eventually(lambda: len(verdicts) == 1, what="the gate asked about the GET")
        assert app.handled == [], "the GET waits for its verdict"
        verdicts[0].set_result(None)
        await eventually(lambda: len(verdicts) == 2, what="the gate asked about the empty POST")
        assert app.handled == [b""], "the admitted GET was handled, the POST waits"
        verdicts[1].set_result(Response(401, TEXT, b"denied"))
        out = await read_all(r)
        assert statuses(out) == [200, 401] and out.endswith(b"denied") and app.handled == [b""]
        r, w = await connect(port)  # refused at once, with nothing after it
        w.write(b"GET /y HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n")
        await eventually(lambda: len(verdicts) == 3, what="the gate asked about the lone GET")
        verdicts[2].set_result(Response(401, TEXT, b"denied"))
        out = await read_all(r)
        assert statuses(out) == [401] and app.handled == [b""], "the refused GET never reached the handler"
    finally:
        await server.close(drain_timeout=1)


async def test_pipelined_requests_parsed_ahead_are_capped():
    app = Echo()
    app.gate.clear()
    server = Server(app, max_pipelined=3)
    port = await server.start("127.0.0.1", 0)
    try:
        r, w = await connect(port)
        w.write(b"".join(post(b"%03d" % i) for i in range(100)) + post(b"end", b"Connection: close"))
        await eventually(lambda: app.handled == [b"000"], what="the first is answered")
        conn = next(iter(server._conns))
        await eventually(lambda: conn._held is not None, what="reading paused")
        assert len(conn._queue) == 3, "three parsed and waiting, the rest held unparsed"
        app.gate.set()
        out = await read_all(r)
        assert re.findall(rb"echo:(\d{3}|end)", out) == [b"%03d" % i for i in range(100)] + [b"end"]
    finally:
        app.gate.set()
        await server.close(drain_timeout=1)
