"""runtime/net/fetch.py: bounded requests to URLs whose servers may be hostile
(a tenant's model Pod, a replica at a Pod IP, an exporter).

Each case runs against a scripted server on loopback and asserts what the
caller gets and what the server saw: a body over the cap is refused (before
it is read when its length is announced) and its connection is not reused; a
server that stalls in the head or the body is cut off at the deadline; after
every failure the next request gets its own answer.
"""

from __future__ import annotations

import asyncio
import http.server
import threading
import time
from collections.abc import Awaitable, Callable

import orjson
import pytest

from kaiwo_ctrl.runtime.net.fetch import AnswerTooLarge, BlockingFetcher, Fetcher, fetch_blocking, split_url

Script = Callable[[bytes, asyncio.StreamWriter], Awaitable[None]]


def ok(body: bytes, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\n%bContent-Length: %d\r\n\r\n%b" % (extra, len(body), body)


class Server:
    """Reads each request (head and Content-Length body) and answers with :attr:`script`."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests: list[tuple[int, bytes, bytes]] = []  # (connection, head, body)
        self.connections = 0
        self.closed = 0

    async def __aenter__(self) -> Server:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        conn = self.connections
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                body = await reader.readexactly(length) if length else b""
                self.requests.append((conn, head, body))
                await self.script(head, writer)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.closed += 1
            writer.close()


async def echo_path(head: bytes, w: asyncio.StreamWriter) -> None:
    w.write(ok(head.split(b" ")[1]))


async def test_answer_read_whole_and_connection_kept():
    async with Server(echo_path) as s, Fetcher() as f:
        a = await f.get(f"{s.url}/one?x=1", timeout=5)
        b = await f.get(f"{s.url}/two", timeout=5)
        assert (a.status, a.body, b.body) == (200, b"/one?x=1", b"/two")
        assert a.header(b"content-length") == b"8"
        assert [r[0] for r in s.requests] == [1, 1], "one keep-alive connection for both"
        assert b"Host: 127.0.0.1:%d" % s.port in s.requests[0][1]


async def test_json_post_sends_body_and_content_type():
    async def answer(head: bytes, w: asyncio.StreamWriter) -> None:
        w.write(ok(b'{"ok": true}'))

    async with Server(answer) as s, Fetcher() as f:
        a = await f.post(f"{s.url}/v1/load", json={"name": "x"}, headers={"X-Who": "me"}, timeout=5)
        _, head, body = s.requests[0]
        assert a.json() == {"ok": True}
        assert orjson.loads(body) == {"name": "x"}
        assert b"Content-Type: application/json" in head and b"X-Who: me" in head and head.startswith(b"POST /v1/load ")


async def test_announced_body_over_the_cap_is_refused_and_the_connection_closed():
    async def big(head: bytes, w: asyncio.StreamWriter) -> None:
        if b"/big" in head:
            w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100000000\r\n\r\n" + b"x" * 1000)  # the rest never comes
        else:
            w.write(ok(b"small"))

    async with Server(big) as s, Fetcher() as f:
        t0 = time.monotonic()
        with pytest.raises(AnswerTooLarge, match="100000000 bytes"):
            await f.get(f"{s.url}/big", timeout=10, max_bytes=1 << 20)
        assert time.monotonic() - t0 < 5, "refused on the head, not after waiting for the body"
        a = await f.get(f"{s.url}/next", timeout=5)
        assert a.body == b"small"
        assert [r[0] for r in s.requests] == [1, 2], "the refused answer's connection is not reused"


async def test_chunked_body_over_the_cap_is_cut():
    async def endless(head: bytes, w: asyncio.StreamWriter) -> None:
        if b"/big" in head:
            w.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            for _ in range(64):
                w.write(b"4000\r\n" + b"y" * 0x4000 + b"\r\n")
                await w.drain()
            w.write(b"0\r\n\r\n")
        else:
            w.write(ok(b"mine"))

    async with Server(endless) as s, Fetcher() as f:
        with pytest.raises(AnswerTooLarge, match="over 65536 bytes"):
            await f.get(f"{s.url}/big", timeout=10, max_bytes=65536)
        assert (await f.get(f"{s.url}/mine", timeout=5)).body == b"mine"
        assert [r[0] for r in s.requests] == [1, 2]


@pytest.mark.parametrize("stall", ["head", "body"])
async def test_a_stalling_server_is_cut_off_at_the_deadline(stall):
    async def slow(head: bytes, w: asyncio.StreamWriter) -> None:
        if b"/slow" not in head:
            w.write(ok(b"fast"))
            return
        if stall == "body":
            w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
            await w.drain()
        await asyncio.sleep(30)

    async with Server(slow) as s, Fetcher() as f:
        t0 = time.monotonic()
        with pytest.raises(TimeoutError):
            await f.get(f"{s.url}/slow", timeout=0.5)
        assert time.monotonic() - t0 < 3
        assert (await f.get(f"{s.url}/ok", timeout=5)).body == b"fast"
        assert [r[0] for r in s.requests] == [1, 2]


async def test_oversized_head_is_refused():
    async def huge(head: bytes, w: asyncio.StreamWriter) -> None:
        w.write(b"HTTP/1.1 200 OK\r\n" + b"X-Pad: " + b"p" * (200 << 10) + b"\r\nContent-Length: 0\r\n\r\n")

    async with Server(huge) as s, Fetcher() as f:
        with pytest.raises(OSError, match="head over"):
            await f.get(s.url, timeout=5)


async def test_refused_connection_is_an_oserror():
    srv = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    srv.close()
    await srv.wait_closed()
    async with Fetcher() as f:
        with pytest.raises(OSError):
            await f.get(f"http://127.0.0.1:{port}/", timeout=5)


@pytest.mark.parametrize("url", ["ftp://x/", "exporter:5000/metrics", "http:///path", "http://x:notaport/"])
def test_only_http_urls_with_a_host(url):
    with pytest.raises(ValueError):
        split_url(url)


def test_split_url():
    assert split_url("https://[::1]/m?a=b") == ("https", "[::1]:443", "/m?a=b")
    assert split_url("http://h:81") == ("http", "h:81", "/")


async def test_blocking_fetcher_from_code_with_a_running_loop():
    """The local plane's set-up is synchronous and may run on a thread whose event loop is running."""

    class Echo(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self._answer(self.path.encode())

        def do_POST(self) -> None:
            self._answer(self.rfile.read(int(self.headers["Content-Length"])))

        def _answer(self, body: bytes) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}"
    try:
        asyncio.get_running_loop()  # this thread runs a loop: asyncio.run() here would refuse
        with BlockingFetcher(url, timeout=5) as h:
            assert h.get("/a").body == b"/a"
            assert h.post("/b", json={"k": 1}).json() == {"k": 1}
        assert fetch_blocking("GET", f"{url}/c", timeout=5).body == b"/c"
    finally:
        srv.shutdown()
        srv.server_close()
