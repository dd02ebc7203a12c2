"""Objects nested too deeply for the JSON codec.

orjson refuses to decode more than 1,024 levels of nesting and to encode
more than 254. A field the API server stores without a schema of its own
(``x-kubernetes-preserve-unknown-fields``) can nest deeper than either, so
one such object could fail a whole list, or every reconcile of itself.

The decoders of lists and watches (liststream.py, watchstream.py) therefore
hand such an object to :func:`undecodable` instead of failing: it returns a
*stub* - the same object with every value nested deeper than
:data:`STUB_DEPTH` replaced by ``null`` - and the field where the nesting
starts to go too deep. The stub carries the metadata and status, enough to
log the object by name and to report the field on it; the object itself is
left out of the cache.

An object that decodes but could not be encoded again counts as too deep
too: :func:`encodable` checks it, at the cost of one encode, only for
objects with more than :data:`ENCODE_LIMIT` opening brackets (every object
within the limit has fewer levels than brackets).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson

#: orjson's limits: levels it decodes, and levels it encodes.
DECODE_LIMIT = 1024
ENCODE_LIMIT = 254
#: Levels kept in a stub; deeper values become ``null``.
STUB_DEPTH = 24
#: Path segments named in :attr:`Undecodable.path` (then ``…``).
PATH_SEGMENTS = 6
#: Fields that go too deep, named at most.
MAX_PATHS = 8

_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[{}\[\],:]', re.S)


@dataclass(frozen=True)
class Undecodable:
    """An object left out: its stub, the field where it goes too deep
    (``spec.job.a.a…``), and its depth (at least)."""

    stub: dict[str, Any]
    path: str
    depth: int
    #: every field where the nesting passes the limit (at most MAX_PATHS)
    paths: tuple[str, ...] = ()


def encodable(raw: bytes, obj: Any) -> bool:
    """Whether ``obj`` (decoded from ``raw``) can be encoded again."""
    if raw.count(b"{") + raw.count(b"[") <= ENCODE_LIMIT:
        return True
    try:
        orjson.dumps(obj)
    except TypeError:  # orjson: "Recursion limit reached"
        return False
    return True


def too_deep_error(e: orjson.JSONDecodeError) -> bool:
    return "depth limit" in str(e) or "recursion" in str(e).lower()


def undecodable(raw: bytes, limit: int = ENCODE_LIMIT) -> Undecodable | None:
    """The stub of the complete JSON object ``raw``; ``None`` when ``raw`` is
    not one complete object (e.g. a piece of a list cut in the wrong place)."""
    out: list[bytes] = []
    start = 0  # bytes of raw copied to out up to here
    cut_at = -1  # offset where a cut value began (depth > STUB_DEPTH), or -1
    stack: list[list[Any]] = []  # per level: [is_object, key or index, expecting a key]
    depth = max_depth = 0
    paths: list[str] = []
    for m in _TOKEN.finditer(raw):
        tok = m.group()
        c = tok[:1]
        if c in b"{[":
            depth += 1
            max_depth = max(max_depth, depth)
            if depth == limit + 1 and len(paths) < MAX_PATHS:
                paths.append(_path(stack))
            if depth == STUB_DEPTH + 1 and cut_at < 0:
                cut_at = m.start()
            stack.append([c == b"{", 0, c == b"{"])
        elif c in b"}]":
            if not stack or stack[-1][0] != (c == b"}"):
                return None
            stack.pop()
            depth -= 1
            if depth == STUB_DEPTH and cut_at >= 0:
                out += [raw[start:cut_at], b"null"]
                start, cut_at = m.end(), -1
        elif stack:
            top = stack[-1]
            if c == b",":
                top[1], top[2] = (top[1] if top[0] else top[1] + 1), top[0]
            elif c == b'"' and top[0] and top[2]:
                top[1], top[2] = tok[1:-1].decode(errors="replace"), False
    if stack or depth:
        return None
    out.append(raw[start:])
    try:
        stub = orjson.loads(b"".join(out))
    except orjson.JSONDecodeError:
        return None
    if not isinstance(stub, dict):
        return None
    # metadata.managedFields mirrors every field set (fieldsV1): name the field itself
    own = [p for p in paths if "managedFields" not in p]
    return Undecodable(stub, (own or paths or [""])[0], max_depth, tuple(own))


def _path(stack: list[list[Any]]) -> str:
    parts: list[str] = []
    for is_object, key, _ in stack:
        parts.append(f".{key}" if is_object else f"[{key}]")
    text = "".join(parts[:PATH_SEGMENTS]).lstrip(".")
    return text + ("…" if len(parts) > PATH_SEGMENTS else "")


def event_stub(info: Undecodable) -> tuple[str, Undecodable]:
    """A watch event's type, and the undecodable object it carries."""
    obj = info.stub.get("object")
    path = info.path.removeprefix("object.").removeprefix("object")
    return str(info.stub.get("type") or ""), Undecodable(obj if isinstance(obj, dict) else {}, path, info.depth - 1)
