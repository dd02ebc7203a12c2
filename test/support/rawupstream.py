"""A scripted model server on raw sockets, for the HTTP layer's adversarial tests.

By default it behaves as uvicorn does: it answers ``Expect: 100-continue``
with an interim ``100 Continue`` before reading the body, then answers with
JSON naming the request it answers (``{"completion_for": <body or model>}``).
A test swaps :attr:`RawUpstream.answer` for a hostile one: interim answers
without being asked, a body cut short, invalid chunking, a huge head, bytes
after the answer. Every connection and every request head it saw is kept, so
a test can tell which connection served which request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import orjson

Answer = Callable[["Seen", asyncio.StreamWriter], Awaitable[None]]


class Seen:
    """One request as the upstream read it."""

    def __init__(self, conn: int, head: bytes, body: bytes) -> None:
        self.conn, self.head, self.body = conn, head, body

    @property
    def lines(self) -> list[bytes]:
        return self.head.split(b"\r\n")

    def header(self, name: bytes) -> bytes | None:
        for line in self.lines[1:]:
            k, _, v = line.partition(b":")
            if k.strip().lower() == name:
                return v.strip()
        return None

    @property
    def tag(self) -> str:
        """Whose request it is: a JSON body's ``user`` (OpenAI's end-user field), else the body itself."""
        try:
            doc = orjson.loads(self.body)
            if isinstance(doc, dict) and "user" in doc:
                return str(doc["user"])
        except orjson.JSONDecodeError:
            pass
        return self.body.decode(errors="replace")


def json_answer(tag: str, extra_head: bytes = b"") -> bytes:
    body = orjson.dumps({"completion_for": tag})
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n%bContent-Length: %d\r\n\r\n%b" % (extra_head, len(body), body)


class RawUpstream:
    def __init__(self, host: str = "127.0.0.1", *, delay: float = 0.05, interim: bytes = b"") -> None:
        self.host, self.port = host, 0
        self.delay = delay  # between the interim answer and the final one
        self.interim = interim  # interim answers sent before every final one, asked or not (e.g. a 103)
        self.answer: Answer = self.normal
        self.seen: list[Seen] = []
        self.connections = 0
        self.closed_by_peer = 0  # connections the client closed
        self.unexpected = b""  # bytes a client sent before its answer came
        self.received = 0  # request body bytes read so far, all requests together
        self.cut_body_at: int | None = None  # close a connection once its request body has come this far
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def start(self) -> RawUpstream:
        self._server = await asyncio.start_server(self._serve, self.host, 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for w in list(self._writers):
            w.transport.abort()

    async def normal(self, seen: Seen, w: asyncio.StreamWriter) -> None:
        w.write(json_answer(seen.tag))

    async def _client_left(self, r: asyncio.StreamReader) -> bool:
        """Wait ``delay`` before answering; True when the client closed meanwhile (a pooled
        client never pipelines, so any byte now is a protocol breach, kept in ``unexpected``)."""
        try:
            extra = await asyncio.wait_for(r.read(1), self.delay)
        except TimeoutError:
            return False
        if not extra:
            self.closed_by_peer += 1
            return True
        self.unexpected += extra
        return False

    async def _body(self, r: asyncio.StreamReader, length: int) -> bytes | None:
        """A request body, read as it comes (counted in ``received``); None when cut at ``cut_body_at``."""
        parts, got = [], 0
        while got < length:
            if self.cut_body_at is not None and got >= self.cut_body_at:
                return None
            chunk = await r.read(min(1 << 16, length - got))
            if not chunk:
                raise asyncio.IncompleteReadError(b"".join(parts), length)
            parts.append(chunk)
            got += len(chunk)
            self.received += len(chunk)
        return b"".join(parts)

    async def _serve(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        self.connections += 1
        conn = self.connections
        self._writers.add(w)
        try:
            while True:
                try:
                    head = await r.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    self.closed_by_peer += 1
                    return
                probe = Seen(conn, head[:-4], b"")
                if (probe.header(b"expect") or b"").lower() == b"100-continue":
                    w.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # as uvicorn does, before the body is read
                length = int(probe.header(b"content-length") or 0)
                body = await self._body(r, length)
                if body is None:
                    return
                seen = Seen(conn, head[:-4], body)
                self.seen.append(seen)
                if self.interim:
                    w.write(self.interim)
                await w.drain()
                if await self._client_left(r):
                    return
                await self.answer(seen, w)
                await w.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            self.closed_by_peer += 1
        finally:
            self._writers.discard(w)
            w.close()
