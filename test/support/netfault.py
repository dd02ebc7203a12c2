"""A TCP relay between a client and the real API server, for fault injection.

``cut()`` drops every open connection and refuses new ones until ``heal()``:
what a client sees when the network partitions or a load balancer resets it.
It only forwards bytes (TLS passes through untouched).
"""

from __future__ import annotations

import asyncio
import contextlib


class Relay:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self.cut_off = False
        self._server: asyncio.AbstractServer | None = None
        self._conns: set[asyncio.StreamWriter] = set()
        self.accepted = 0

    async def start(self) -> "Relay":
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def _pipe(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            while not r.at_eof():
                data = await r.read(65536)
                if not data or self.cut_off:
                    break
                w.write(data)
                await w.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(Exception):
                w.close()

    async def _handle(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        if self.cut_off:
            cw.close()
            return
        self.accepted += 1
        try:
            ur, uw = await asyncio.open_connection(*self.target)
        except OSError:
            cw.close()
            return
        self._conns.update((cw, uw))
        await asyncio.gather(self._pipe(cr, uw), self._pipe(ur, cw))
        self._conns.discard(cw)
        self._conns.discard(uw)

    def cut(self) -> None:
        self.cut_off = True
        for w in list(self._conns):
            with contextlib.suppress(Exception):
                w.transport.abort()
        self._conns.clear()

    def heal(self) -> None:
        self.cut_off = False

    async def close(self) -> None:
        self.cut()
        if self._server:
            self._server.close()
            await self._server.wait_closed()
