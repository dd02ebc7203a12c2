"""Values a cache keeps compressed: the bulk of an object only a rare reader needs.

A cached batch Job is mostly its pod template, which only the drift check
and the Job webhook's tracking KaiwoJob read. :func:`packing` makes an
informer transform that keeps such paths as :class:`Packed` bytes (the value's
canonical JSON, zlib-compressed against a preset dictionary of typical
content), lossless, so no reader ever needs to GET the object again:

* :func:`~kaiwo_ctrl.runtime.objects.objpath.get_path` and the object diff
  (:mod:`kaiwo_ctrl.runtime.objects.diff`) unpack a packed value where they meet it,
  so readers that use them see the full object;
* :func:`unpacked` gives a plain copy of a whole cached object (for code that
  copies or serialises it).

A packed value decodes to an equal value with its mapping keys sorted; key
order carries no meaning in Kubernetes objects.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

import orjson

__all__ = ["Packed", "Packer", "packing", "unpack", "unpacked"]

_SORTED = orjson.OPT_SORT_KEYS
#: preset dictionaries by id (the first byte of every packed value)
_DICTS: list[bytes] = []


class Packed(bytes):
    """A packed value: one byte naming the dictionary, then the zlib stream."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"Packed({len(self)} bytes)"


class Packer:
    """Packs values against one preset dictionary, built from ``sample`` (a
    value shaped like the ones packed: the more it shares, the smaller the
    result). ``level``: zlib's; 1 is several times faster than the default
    and, with a good dictionary, nearly as small."""

    def __init__(self, sample: Any = None, level: int = 1) -> None:
        if len(_DICTS) >= 256:
            raise RuntimeError("at most 256 packers per process")
        self.zdict = orjson.dumps(sample, option=_SORTED) if sample is not None else b""
        self.level = level
        self.id = len(_DICTS)
        _DICTS.append(self.zdict)

    def pack(self, value: Any) -> Packed:
        c = zlib.compressobj(self.level, zdict=self.zdict) if self.zdict else zlib.compressobj(self.level)
        return Packed(bytes((self.id,)) + c.compress(orjson.dumps(value, option=_SORTED)) + c.flush())


def unpack(value: Any) -> Any:
    """The value a :class:`Packed` holds (anything else is returned as is)."""
    if type(value) is not Packed:
        return value
    zdict = _DICTS[value[0]]
    d = zlib.decompressobj(zdict=zdict) if zdict else zlib.decompressobj()
    return orjson.loads(d.decompress(memoryview(value)[1:]) + d.flush())


def unpacked(obj: Any) -> Any:
    """A plain copy of ``obj`` (its dicts and lists copied) with every packed
    value unpacked: for code that copies, changes or serialises a cached object."""
    t = type(obj)
    if t is Packed:
        return unpack(obj)
    if t is dict:
        return {k: unpacked(v) for k, v in obj.items()}
    if t is list:
        return [unpacked(v) for v in obj]
    return obj


def packing(packer: Packer, paths: tuple[str, ...], then: Callable[[dict], dict]) -> Callable[[dict], dict]:
    """An informer transform: each dotted path of ``paths`` present in the
    object is kept packed; ``then`` (e.g. the default trim) runs on the rest
    first (a path whose parent ``then`` dropped is dropped too)."""
    split = [p.split(".") for p in paths]

    def parent_of(obj: Any, parts: list[str]) -> Any:
        for part in parts[:-1]:
            obj = obj.get(part) if type(obj) is dict else None
        return obj if type(obj) is dict else None

    def transform(obj: dict) -> dict:
        taken: list[tuple[list[str], Any]] = []
        for parts in split:
            parent = parent_of(obj, parts)
            if parent is not None and parts[-1] in parent:
                taken.append((parts, parent.pop(parts[-1])))
        out = then(obj)
        for parts, value in taken:
            parent = parent_of(out, parts)
            if parent is not None:
                parent[parts[-1]] = packer.pack(value)
        return out

    return transform
