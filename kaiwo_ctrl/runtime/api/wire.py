"""The client's wire format: query parameters, JSON bodies, line-delimited watch streams."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from kaiwo_ctrl.runtime.api.apitypes import Resource

#: Content types of the patch kinds :meth:`~kaiwo_ctrl.runtime.api.client.Client.patch` sends.
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


def list_params(
    label_selector: str | None, field_selector: str | None, resource_version: str | None,
    resource_version_match: str | None, limit: int | None = None, continue_: str | None = None,
) -> dict[str, Any]:
    """The query of a list request (unset ones are left out when the target is built)."""
    return {
        "labelSelector": label_selector,
        "fieldSelector": field_selector,
        "resourceVersion": resource_version,
        "resourceVersionMatch": resource_version_match,
        "limit": limit,
        "continue": continue_,
    }


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


class LineSplitter:
    """Non-blank lines of a byte stream fed in chunks, in time linear in its
    length: each chunk is scanned once for its last newline, and a line that
    spans many chunks is copied out once. All the lines a chunk completes
    come back together (one hop per chunk for the watch, not one per line)."""

    def __init__(self) -> None:
        self._tail = bytearray()

    def feed(self, chunk: bytes) -> list[bytes]:
        end = chunk.rfind(b"\n")
        if end < 0:
            self._tail += chunk
            return []
        if self._tail:
            self._tail += chunk[:end]
            block = bytes(self._tail)
        else:
            block = chunk[:end]
        self._tail = bytearray(chunk[end + 1 :])
        # an unterminated tail is a cut-off event: the caller resumes the watch
        return [line for line in block.split(b"\n") if line and not line.isspace()]


def encode_headers(h: Mapping[str, str], authority: str) -> list[tuple[bytes, bytes]]:
    """Request headers as the HTTP/1.1 pool sends them, ``Host`` first."""
    out = [(b"Host", authority.encode("latin-1"))]
    out += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in h.items()]
    return out
