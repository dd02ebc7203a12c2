"""The client's wire format: query parameters, JSON bodies, line-delimited watch streams."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import orjson

from .apitypes import Resource

#: Content types of the patch kinds :meth:`~kaiwo_ctrl.runtime.client.Client.patch` sends.
PATCH_TYPES = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "apply": "application/apply-patch+yaml",
}


def param(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def loads(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {"message": raw[:2000].decode(errors="replace")}


def with_type(res: Resource, obj: Mapping[str, Any]) -> Mapping[str, Any]:
    if obj.get("apiVersion") and obj.get("kind"):
        return obj
    return {"apiVersion": res.api_version, "kind": res.kind, **obj}


async def split_lines(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """Non-blank lines of a byte stream, in time linear in its length.

    Each byte is scanned for the newline once (a long line arriving in many
    chunks is not rescanned from its start) and copied out once; consumed
    lines are cut off the buffer once per chunk, not once per line.
    """
    buf = bytearray()
    for_scan = 0
    async for chunk in chunks:
        buf += chunk
        start = 0
        while True:
            i = buf.find(b"\n", for_scan)
            if i < 0:
                break
            line = bytes(buf[start:i])
            start = for_scan = i + 1
            if line.strip():
                yield line
        if start:
            del buf[:start]
        for_scan = len(buf)
    # an unterminated tail is a cut-off event: the caller resumes the watch


def encode_headers(h: Mapping[str, str], authority: str) -> list[tuple[bytes, bytes]]:
    """Request headers as the HTTP/1.1 pool sends them, ``Host`` first."""
    out = [(b"Host", authority.encode("latin-1"))]
    out += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in h.items()]
    return out
