"""How a connection of the HTTP/1.1 server (:mod:`kaiwo_ctrl.runtime.net.http1conn`) feeds
what it reads to the parser: in pieces that end where a head ends (the first CRLF CRLF)
or a Content-Length body ends, so that

* between two pieces at most one request has completed, and the server can stop
  parsing exactly there (a request waits for the body budget, for the head gate,
  for its turn, or for the client to read its answers), holding the rest unparsed;
* every byte of a head is counted as it came on the wire (names, values,
  separators, line endings, empty header lines), before the parser sees it.

llhttp (through httptools) cannot pause mid-buffer nor say where an error
stopped it, so the server cuts the buffer itself. A read that is one request
(head, then its body) is two pieces; a body read whole is one.
"""

from __future__ import annotations

from typing import Any

_SEP = b"\r\n\r\n"  # llhttp takes no bare LF: a head ends here, and only here


def _span_end(tail: bytes, data: bytes) -> int:
    """Where in ``data`` a CRLF CRLF that began in ``tail`` (the end of the previous read) ends; 0 if none."""
    if not tail:
        return 0
    joined = tail + data[:3]
    i = joined.find(_SEP)
    return i + 4 - len(tail) if 0 <= i < len(tail) else 0


class Reader:
    """The feeding half of ``http1conn._Conn``; the connection sets the state it reads:
    ``_in_body`` (a head complete, its message not), ``_left`` (Content-Length bytes still due,
    -1 when chunked), ``_wire`` (the head's bytes so far, against ``_head_limit``), and
    :meth:`_stopped` (parse no further: the rest of the read is held)."""


    parser: Any
    _held: list[bytes] | None
    _in_body: bool
    _left: int
    _wire: int
    _head_limit: int
    _in_head: bool
    _received: int

    def __init__(self) -> None:
        self._tail = b""  # the end of the last piece, when it may begin a CRLF CRLF
        self._head_end = 0  # while a read is fed whole: where its head ends (0: fed in pieces)
        self._stopped_at_head = False  # the head at _head_end stopped parsing: the parser was stopped there

    def _stopped(self) -> bool:
        raise NotImplementedError

    def _hold(self, rest: bytes) -> None:
        raise NotImplementedError

    def _parse(self, piece: bytes | memoryview) -> bool:
        """Feed one piece; False when the parser stopped for good (an error, a refusal, an upgrade)."""
        raise NotImplementedError

    def _head_too_large(self) -> None:
        raise NotImplementedError

    def _feed(self, data: bytes) -> None:
        n = len(data)
        if self._in_body:
            if self._left >= n:  # the common case of a large body: all of this read is body
                self._tail = b""
                self._parse(data)
                return
        elif not self._tail:
            i = data.find(_SEP)
            if i < 0 or data.find(_SEP, i + 4) < 0:
                self._feed_one(data, n, i)
                return
        self._feed_pieces(data, n)

    def _feed_one(self, data: bytes, n: int, i: int) -> None:
        """A read with at most one head end in it (the common case: a head, maybe its body, in one piece):
        fed whole, so at most one request completes. Should its head stop parsing (its body waits for the
        budget or the head gate), the parser is stopped there and a new one is brought to the same point."""
        end = n if i < 0 else i + 4
        self._wire += end
        self._tail = b"" if i >= 0 else data[-3:]
        self._head_end = end
        try:
            ok = self._parse(data)
        finally:
            self._head_end = 0
        if self._stopped_at_head:
            self._stopped_at_head = False
            self._replay(memoryview(data)[:end])
            self._hold(data[end:])
            return
        if not ok or self._in_body:
            return
        if self._in_head and i >= 0:  # the next request's head began after this one's body: its bytes so far
            self._wire = n - end - self._received
        if self._wire > self._head_limit:
            self._head_too_large()  # a head that does not end: refused before the parser holds more of it

    def _replay(self, head: memoryview) -> None:
        raise NotImplementedError

    def _feed_pieces(self, data: bytes, n: int) -> None:
        pos = 0
        view = memoryview(data)
        first = _span_end(self._tail, data)
        while pos < n:
            cut = False
            if self._in_body and self._left > 0:
                end = min(n, pos + self._left)
            elif first:
                end, first, cut = first, 0, True
            else:
                i = data.find(_SEP, pos)
                end, cut = (n, False) if i < 0 else (i + 4, True)
            if not self._in_body:
                self._wire += end - pos
            self._tail = b"" if cut or (self._in_body and self._left > 0) else data[max(pos, end - 3):end]
            if not self._parse(view[pos:end] if pos or end < n else data):
                return
            pos = end
            if not self._in_body and self._wire > self._head_limit:
                self._head_too_large()  # a head that does not end: refused before the parser holds more of it
                return
            if pos < n and self._stopped():
                self._hold(data[pos:])
                return
