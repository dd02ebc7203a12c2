"""The ``model`` part of a multipart/form-data body (audio uploads), found as the body arrives.

Routing needs the Model's name before the body can go anywhere, and a form
names it in a part of its own, which the proxy takes out (the model server
gets the rest of the form). :class:`ModelPartScanner` reads a form's prefix
chunk by chunk, chunks split anywhere (in a delimiter, in ``\\r\\n\\r\\n``),
until the model part has ended, the form has ended, or the prefix has grown
past its window. :func:`take_model_part` does so for a body the server
streams: when the model part ends within the window, only that prefix is
held, however large the file after it, and the rest of the form goes on as a
:class:`StreamBody` of the right length (the held prefix less the model part,
then the client's bytes as they come). A form whose model part comes later
(the file first, as OpenAI's own examples send it) still works as it always
did: it is held whole after all, under the body budget as a JSON body is, and
forwarded whole less its model part.

Delimiters are ``--boundary`` at the very start of the body, else
``\\r\\n--boundary`` (RFC 2046): a boundary string inside a line of a file is
not one. The part taken out runs from its delimiter's ``--`` to the next
one's, so the form stays well-formed wherever the part was.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

from kaiwo_ctrl.runtime.net.http1body import BodyStream, Chunk, StreamBody
from kaiwo_ctrl.runtime.net.http1budget import BudgetBusy
from kaiwo_ctrl.serving.routing.resolve import ProxyError

_MODEL_PART = re.compile(rb'(?im)^content-disposition:[^\r\n]*;\s*name="?model"?\s*(;|$)')
#: RFC 2046: a boundary is 1 to 70 characters
MAX_BOUNDARY = 70


class ModelPartScanner:
    """Feed a form's chunks until :attr:`done`; :attr:`over` when ``window`` passed first."""

    __slots__ = ("buf", "window", "model", "span", "done", "_dd", "_delim", "_cur", "_searched")

    def __init__(self, boundary: bytes, window: int, buf: bytes | bytearray | None = None) -> None:
        self.buf = bytearray() if buf is None else buf  # the prefix read so far (a whole body is scanned in place)
        self.window = window
        self.model: str | None = None
        self.span: tuple[int, int] | None = None  # the model part's bytes in ``buf``
        self.done = False  # the model part, or the form's end, was seen
        self._dd = b"--" + boundary
        self._delim = b"\r\n--" + boundary
        self._cur = -1  # where the current part's delimiter ("--boundary") starts; -1 before the first
        self._searched = 0  # the search for the next delimiter resumes here

    @property
    def over(self) -> bool:
        return not self.done and len(self.buf) > self.window

    def feed(self, chunk: bytes | bytearray | memoryview) -> bool:
        """Add a chunk; True once done."""
        self.buf += chunk
        if not self.done:
            self._scan()
        return self.done

    def _next_delim(self) -> int:
        """Where the next delimiter's ``--`` starts, at or after ``_searched``; -1 until it has come."""
        i = self.buf.find(self._delim, self._searched)
        if i == -1:
            self._searched = max(self._searched, len(self.buf) - len(self._delim) + 1)
            return -1
        return i + 2

    def _scan(self) -> None:
        buf, dd = self.buf, self._dd
        if self._cur == -1:
            if buf.startswith(dd):
                self._cur = 0
            elif dd.startswith(buf):
                return  # the first delimiter has not all come
            elif (first := self._next_delim()) == -1:
                return  # still in a preamble
            else:
                self._cur = first
        while True:
            start = self._cur + len(dd)
            if len(buf) < start + 2:
                return
            if buf[start:start + 2] == b"--":
                self.done = True  # the form's closing delimiter: no model part
                return
            self._searched = max(self._searched, start)
            nxt = self._next_delim()
            if nxt == -1:
                return  # this part has not ended yet
            head_end = buf.find(b"\r\n\r\n", start, nxt)
            if head_end != -1 and _MODEL_PART.search(buf, start, head_end):
                self.model = bytes(buf[head_end + 4:nxt]).removesuffix(b"\r\n").decode(errors="replace").strip()
                self.span = (self._cur, nxt)
                self.done = True
                return
            self._cur = nxt


def split_multipart_model(body: bytes | bytearray, boundary: str) -> tuple[str | None, bytes | bytearray]:
    """Take the ``model`` part out of a whole multipart body; returns (model, the rest of the form).

    The rest is made in one copy (an audio upload may be tens of MB); a body
    without a model part is returned as it is."""
    scan = ModelPartScanner(boundary.encode(), len(body), body)
    scan._scan()
    if scan.span is None:
        return None, body
    view = memoryview(body)
    return scan.model, b"".join((view[:scan.span[0]], view[scan.span[1]:]))


def check_boundary(boundary: str | None) -> bytes:
    if not boundary:
        raise ProxyError(400, "bad request: multipart body without a boundary")
    if len(boundary) > MAX_BOUNDARY or not boundary.isascii():
        raise ProxyError(400, f"bad request: a multipart boundary is 1 to {MAX_BOUNDARY} ASCII characters")
    return boundary.encode()


async def take_model_part(stream: BodyStream, boundary: bytes, window: int) -> tuple[str | None, StreamBody | bytearray]:
    """Read ``stream`` until its model part has ended; returns (the model, or None when the form
    has none, and the rest of the form to send: streamed when the model part ended within
    ``window`` bytes, else the whole form held)."""
    scan = ModelPartScanner(boundary, window)
    chunks = stream.chunks()
    async for chunk in chunks:
        if scan.feed(chunk):
            break
        del chunk  # held in the scanner's buffer only
        if scan.over:
            return await _take_whole(stream, scan, chunks)
    buf, span = scan.buf, scan.span
    if span is None:
        return None, StreamBody(stream.length, _then([buf], chunks))
    view = memoryview(buf)
    return scan.model, StreamBody(stream.length - (span[1] - span[0]), _then([view[:span[0]], view[span[1]:]], chunks))


async def _take_whole(stream: BodyStream, scan: ModelPartScanner, chunks: AsyncIterator[bytes]) -> tuple[str | None, bytearray]:
    """No model part within the window: hold the form whole (its Content-Length taken from the
    body budget first, waiting as a JSON body does, 503 when it stays spent), go on scanning to its
    end, and take the model part out in place."""
    try:
        await stream.hold_whole()
    except BudgetBusy:
        raise ProxyError(503, "server busy, try again") from None
    async for chunk in chunks:
        scan.feed(chunk)
    buf, span = scan.buf, scan.span
    assert isinstance(buf, bytearray)  # the scanner's own buffer
    if span is not None:
        del buf[span[0]:span[1]]  # in place: no second copy of the form
    return scan.model, buf


async def _then(held: list[Chunk], rest: AsyncIterator[bytes]) -> AsyncIterator[Chunk]:
    """The held prefix (not copied again), then the rest of the client's body as it comes."""
    while held:
        part = held.pop(0)
        if part:
            yield part
    async for chunk in rest:
        yield chunk
