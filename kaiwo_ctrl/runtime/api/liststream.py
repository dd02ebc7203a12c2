"""Decoding a list response as it arrives, item by item.

A list of 10k objects is tens of MiB of JSON. Decoding it whole would hold
the bytes and every untrimmed object at once; here each item's bytes are cut
out of the stream as soon as the next item's start shows the item complete,
and decoded (without ``metadata.managedFields`` if asked) one by one as the
consumer takes them. Peak memory is one chunk and one item.

The API server writes a list compactly, its items one after another, each
opening with the same bytes up to its ``"metadata":{`` (``{"metadata":{`` for
built-in kinds; ``{"apiVersion":...,"kind":...,"metadata":{`` for custom
resources, whose keys come sorted). So ``},`` followed by those bytes
separates two items. The same bytes could in principle occur inside an item
(an array of objects of that shape); a piece cut there is not valid JSON on
its own, so it is joined with the next piece and decoded again. The list's
own fields (``kind``, ``metadata`` with its ``resourceVersion``) may come
before or after ``items`` and are decoded at the end.

A body of any other layout (an indented one, ``"items":null``) is decoded
whole at the end: correct, only without the streaming.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson

from kaiwo_ctrl.runtime.api.deepjson import encodable, too_deep_error, undecodable
from kaiwo_ctrl.runtime.api.watchstream import OnUndecodable, decode_object_without_managed_fields

_ITEMS = b'"items":['
_METADATA = b'"metadata":{'
#: how far into the body ``"items":[`` may be, and into the first item its
#: ``"metadata":{``, before the body counts as of another layout
_HEAD_LIMIT = 1 << 16
_PREFIX_LIMIT = 1 << 10


class MalformedList(ValueError):
    """The response is not a JSON list."""


class ListSplitter:
    """Feed the body's chunks; each call returns the items it completed as
    bytes (see the module docstring). :meth:`finish`, once the body is
    complete, returns the last ones and the list's own fields."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []  # bytes not yet returned (the current item onwards), as received
        self._window = b""  # their last len(separator) - 1 bytes: a separator may straddle two chunks
        self._head: bytes | None = None  # the body up to and including '"items":['
        self._sep: bytes | None = None  # b"}," + the bytes every item opens with
        self._whole = False  # another layout: decoded whole by finish()
        self._carry = b""  # a piece that did not decode alone (see decode)

    def feed(self, chunk: bytes) -> list[bytes]:
        self._parts.append(chunk)
        if self._sep is None:
            if self._whole or (self._head is None and not self._find_head()) or not self._learn_prefix():
                return []
            return self._split()
        window = self._window + chunk
        if self._sep not in window:  # the current item goes on: keep the chunk, copy nothing
            self._window = window[1 - len(self._sep) :]
            return []
        return self._split()

    def _pending(self) -> bytes:
        if len(self._parts) != 1:
            self._parts = [b"".join(self._parts)]
        return self._parts[0]

    def _split(self) -> list[bytes]:
        data, sep, out, start = self._pending(), self._sep, [], 0
        assert sep is not None
        j = data.find(sep, 1)
        while j >= 0:
            out.append(data[start : j + 1])
            start = j + 2
            j = data.find(sep, start + 1)
        rest = data[start:] if start else data
        self._parts, self._window = [rest], rest[1 - len(sep) :]
        return out

    def _find_head(self) -> bool:
        data = self._pending()
        i = data.find(_ITEMS, 0, _HEAD_LIMIT)
        if i < 0:
            self._whole = len(data) > _HEAD_LIMIT
            return False
        i += len(_ITEMS)
        self._head, self._parts = data[:i], [data[i:]]
        return True

    def _learn_prefix(self) -> bool:
        data = self._pending()
        if data[:1] == b"]":
            return False  # no items: finish() reads the rest
        if data[:1] != b"{":
            self._whole = bool(data)
            return False
        i = data.find(_METADATA, 0, _PREFIX_LIMIT)
        if i < 0:
            self._whole = len(data) >= _PREFIX_LIMIT
            return False
        self._sep = b"}," + data[: i + len(_METADATA)]
        return True

    def finish(self) -> tuple[list[bytes], dict[str, Any]]:
        """The items not yet returned, and the list without them; raises
        :class:`MalformedList` when the body is not a complete JSON list."""
        if self._whole or self._head is None:
            return self._decode_whole(self._head or b"")
        data = self._pending() if self._parts else b""
        end = len(data)
        while (end := data.rfind(b"]", 0, end)) >= 0:  # the array's end: the list's own fields follow it
            try:
                envelope = orjson.loads(self._head + data[end:])
            except orjson.JSONDecodeError:
                continue
            if isinstance(envelope, dict):
                envelope.pop("items", None)
                last = data[:end].strip()
                return ([last] if last else []), envelope
        raise MalformedList("the list response is not a complete JSON list")

    def _decode_whole(self, head: bytes) -> tuple[list[bytes], dict[str, Any]]:
        try:
            doc = orjson.loads(b"".join([head, *self._parts]))
        except orjson.JSONDecodeError as e:
            raise MalformedList(f"the list response is not JSON: {e}") from None
        if not isinstance(doc, dict):
            raise MalformedList("the list response is not a JSON object")
        items = doc.pop("items", None) or []
        return [orjson.dumps(item) for item in items], doc

    def decode(self, pieces: list[bytes], drop_managed_fields: bool = False, on_undecodable: OnUndecodable | None = None) -> Iterator[dict]:
        """Decode ``pieces`` one by one as they are consumed. A piece that is
        not valid JSON on its own is held and joined with the next one. An
        item nested too deeply to decode or encode again (deepjson.py) is
        left out and passed to ``on_undecodable`` (without one, it fails
        the list)."""
        for piece in pieces:
            if self._carry:
                piece = self._carry + b"," + piece
            try:
                obj = decode_object_without_managed_fields(piece) if drop_managed_fields else orjson.loads(piece)
            except orjson.JSONDecodeError as e:
                if on_undecodable is not None and too_deep_error(e) and (info := undecodable(piece)) is not None:
                    self._carry = b""
                    on_undecodable(info)
                    continue
                self._carry = piece
                continue
            self._carry = b""
            if on_undecodable is not None and not encodable(piece, obj):
                if (info := undecodable(piece)) is not None:
                    on_undecodable(info)
                    continue
            yield obj

    def check_complete(self) -> None:
        """After the last :meth:`decode`: raises when a piece never decoded."""
        if self._carry:
            raise MalformedList("an item of the list response is not valid JSON")
