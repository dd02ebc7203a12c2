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

    def __init__(self) -> None:
        self._tail = b""  # the end of the last piece, when it may begin a CRLF CRLF

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
        n, pos = len(data), 0
        view: memoryview | None = None
        first = _span_end(self._tail, data)
        while pos < n:
            cut = False
            if self._in_body and self._left > 0:
                end = min(n, pos + self._left)
                self._tail = b""
            elif first:
                end, first, cut = first, 0, True
            else:
                i = data.find(_SEP, pos)
                end, cut = (n, False) if i < 0 else (i + 4, True)
            if not self._in_body:
                self._wire += end - pos
            if pos == 0 and end == n:
                piece: bytes | memoryview = data
            else:
                if view is None:
                    view = memoryview(data)
                piece = view[pos:end]
            if not (self._in_body and self._left > 0):
                self._tail = b"" if cut else data[max(pos, end - 3):end]
            if not self._parse(piece):
                return
            pos = end
            if not self._in_body and self._wire > self._head_limit:
                self._head_too_large()  # a head that does not end: refused before the parser holds more of it
                return
            if pos < n and self._stopped():
                self._hold(data[pos:])
                return
