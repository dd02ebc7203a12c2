"""Decoding a watch stream: newline-delimited JSON events, many at a time.

A watch response is one JSON event per line; the lines that arrive together
(:class:`~kaiwo_ctrl.runtime.api.wire.LineSplitter`) are decoded here, one by one
as the consumer takes them. A caller that never reads
``metadata.managedFields`` can have them cut out of the bytes before
decoding: they are about half of a typical object's JSON, so this roughly
halves the decoding of a streaming list.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import orjson

from kaiwo_ctrl.runtime.api.deepjson import Undecodable, encodable, too_deep_error, undecodable

#: Called with an object left out as too deeply nested (see deepjson.py).
OnUndecodable = Callable[[Undecodable], None]

_MANAGED_FIELDS = b'"managedFields":['


def cut_managed_fields(raw: bytes) -> bytes:
    """``raw`` with the first ``"managedFields":[...]`` emptied to ``[]``, or
    ``raw`` itself when that is not certain to be right.

    Managed-fields entries hold no arrays (their ``fieldsV1`` is objects
    only), so the list ends at the first ``]`` outside a string. Strings are
    told apart by counting quotes, which is exact unless a backslash is
    escaped; then nothing is cut. The caller checks that the emptied list is
    the top-level ``metadata.managedFields`` (see :func:`decode_events`).
    """
    i = raw.find(_MANAGED_FIELDS)
    if i < 0:
        return raw
    start = i + len(_MANAGED_FIELDS)
    end = raw.find(b"]", start)
    while end >= 0 and (raw.count(b'"', start, end) - raw.count(b'\\"', start, end)) % 2:
        end = raw.find(b"]", end + 1)
    if end < 0 or end == start or raw.find(b"\\\\", start, end) >= 0:
        return raw
    view = memoryview(raw)
    return b"".join((view[:start], view[end:]))


def decode_events(lines: list[bytes], drop_managed_fields: bool = False, on_undecodable: OnUndecodable | None = None) -> Iterator[dict]:
    """Decode watch-event lines one by one as they are consumed (each object
    is then transformed while it is still in the CPU cache: decoding a whole
    batch first made the transforms about half again as slow). An event
    whose object is nested too deeply to decode or encode again
    (deepjson.py) is left out and passed to ``on_undecodable``, its stub
    the event's (without one, it raises)."""
    decode = decode_event_without_managed_fields if drop_managed_fields else orjson.loads
    for line in lines:
        if on_undecodable is None:
            yield decode(line)
            continue
        try:
            ev = decode(line)
        except orjson.JSONDecodeError as e:
            if not too_deep_error(e) or (info := undecodable(line)) is None:
                raise
            on_undecodable(info)
            continue
        if not encodable(line, ev) and (info := undecodable(line)) is not None:
            on_undecodable(info)
            continue
        yield ev


def decode_event_without_managed_fields(line: bytes) -> dict:
    """One watch event whose object has no ``metadata.managedFields``."""
    return _decode_without_managed_fields(line, _event_metadata)


def decode_object_without_managed_fields(raw: bytes) -> Any:
    """One object (an API answer) without ``metadata.managedFields``."""
    return _decode_without_managed_fields(raw, _metadata)


def _decode_without_managed_fields(raw: bytes, metadata: Callable[[object], dict | None]) -> Any:
    cut = cut_managed_fields(raw)
    if cut is not raw:
        try:
            doc = orjson.loads(cut)
        except orjson.JSONDecodeError:
            doc = None
        meta = metadata(doc)
        if meta is not None and meta.get("managedFields") == []:
            del meta["managedFields"]
            return doc
        # the emptied list was not the object's own: decode it whole
    doc = orjson.loads(raw)  # broken JSON raises here, as it would have uncut
    meta = metadata(doc)
    if meta is not None:
        meta.pop("managedFields", None)
    return doc


def _event_metadata(ev: object) -> dict | None:
    return _metadata(ev.get("object") if type(ev) is dict else None)


def _metadata(obj: object) -> dict | None:
    meta = obj.get("metadata") if type(obj) is dict else None
    return meta if type(meta) is dict else None
