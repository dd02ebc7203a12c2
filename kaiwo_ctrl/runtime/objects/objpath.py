"""Reading plain Kubernetes object dicts: metadata accessors and dotted paths.

The one home for ``_meta``/``_rv``-style helpers and dotted-path getters, so
every controller reads objects the same way. Nothing here mutates its input
except :func:`pop_path`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kaiwo_ctrl.runtime.objects.packed import unpack

__all__ = ["meta", "rv", "uid", "name", "namespace", "key", "deleting", "get_path", "pop_path"]

_EMPTY: Mapping[str, Any] = {}


def meta(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """``metadata`` of ``obj`` (an empty mapping for ``None`` or a bare dict)."""
    if obj is None:
        return _EMPTY
    return obj.get("metadata") or _EMPTY


def rv(obj: Mapping[str, Any] | None) -> str | None:
    """The resourceVersion, ``None`` when there is no object."""
    return meta(obj).get("resourceVersion") if obj is not None else None


def uid(obj: Mapping[str, Any] | None) -> str:
    return meta(obj).get("uid") or ""


def name(obj: Mapping[str, Any] | None) -> str:
    return meta(obj).get("name") or ""


def namespace(obj: Mapping[str, Any] | None) -> str:
    return meta(obj).get("namespace") or ""


def key(kind: str, obj: Mapping[str, Any]) -> tuple[str, str, str]:
    """``(kind, namespace, name)``: how expectations and caches name an object."""
    m = meta(obj)
    return (kind, m.get("namespace") or "", m.get("name") or "")


def deleting(obj: Mapping[str, Any] | None) -> bool:
    """Whether the object has a deletionTimestamp (it is going away)."""
    return bool(meta(obj).get("deletionTimestamp"))


def get_path(doc: Mapping[str, Any] | None, path: str) -> Any:
    """The value at dotted ``path`` (``spec.template.spec``), ``None`` when absent
    (a value a cache keeps packed is unpacked: :mod:`.packed`)."""
    cur: Any = doc
    for part in path.split("."):
        if not isinstance(cur, Mapping):
            cur = unpack(cur)
            if not isinstance(cur, Mapping):
                return None
        cur = cur.get(part)
    return unpack(cur)


def pop_path(doc: dict, path: str) -> None:
    """Remove the value at dotted ``path`` from ``doc`` (in place) if present."""
    parts = path.split(".")
    cur: Any = doc
    for part in parts[:-1]:
        if not isinstance(cur, dict):
            return
        cur = cur.get(part)
    if isinstance(cur, dict):
        cur.pop(parts[-1], None)
