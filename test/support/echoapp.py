"""An application for the runtime's HTTP/1.1 server that answers ``echo:<body>``, records
every body it handled, and holds its answers while ``gate`` is cleared."""

from __future__ import annotations

import asyncio

from kaiwo_ctrl.runtime.net.http1server import Request, Response

TEXT = [(b"Content-Type", b"text/plain")]


class Echo:
    def __init__(self) -> None:
        self.handled: list[bytes] = []
        self.gate = asyncio.Event()
        self.gate.set()

    async def __call__(self, request: Request) -> Response:
        self.handled.append(bytes(request.body))
        await self.gate.wait()
        return Response(200, TEXT, b"echo:" + bytes(request.body))
