"""RFC 6902 JSON Patch on plain dicts (``modelServerPods.jsonPatches``).

Small enough to keep in-house rather than add a runtime dependency for the
operator image. Operations: add, remove, replace, move, copy, test. Failures
raise :class:`PatchError` naming the patch index.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any


class PatchError(ValueError):
    pass


def _tokens(pointer: str) -> list[str]:
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise PatchError(f"path {pointer!r} must start with '/'")
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/")]


def _index(container: list, token: str, adding: bool) -> int:
    if adding and token == "-":
        return len(container)
    if not token.isdigit():
        raise PatchError(f"{token!r} is not an array index")
    i = int(token)
    if i > len(container) or (not adding and i == len(container)):
        raise PatchError(f"index {i} out of range")
    return i


def _parent(doc: Any, tokens: list[str]) -> Any:
    cur = doc
    for t in tokens[:-1]:
        if isinstance(cur, dict):
            if t not in cur:
                raise PatchError(f"path element {t!r} does not exist")
            cur = cur[t]
        elif isinstance(cur, list):
            cur = cur[_index(cur, t, False)]
        else:
            raise PatchError(f"cannot descend into {type(cur).__name__} at {t!r}")
    return cur


def _get(doc: Any, pointer: str) -> Any:
    tokens = _tokens(pointer)
    if not tokens:
        return doc
    parent = _parent(doc, tokens)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"{pointer} does not exist")
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, False)]
    raise PatchError(f"{pointer} does not exist")


def _add(doc: Any, pointer: str, value: Any) -> Any:
    tokens = _tokens(pointer)
    if not tokens:
        return value
    parent = _parent(doc, tokens)
    if isinstance(parent, dict):
        parent[tokens[-1]] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, tokens[-1], True), value)
    else:
        raise PatchError(f"cannot add at {pointer}")
    return doc


def _remove(doc: Any, pointer: str) -> Any:
    tokens = _tokens(pointer)
    if not tokens:
        raise PatchError("cannot remove the whole document")
    parent = _parent(doc, tokens)
    if isinstance(parent, dict):
        if tokens[-1] not in parent:
            raise PatchError(f"{pointer} does not exist")
        del parent[tokens[-1]]
    elif isinstance(parent, list):
        del parent[_index(parent, tokens[-1], False)]
    else:
        raise PatchError(f"cannot remove {pointer}")
    return doc


def apply_patch(doc: Any, patches: Sequence[dict[str, Any]]) -> Any:
    """Return a patched deep copy of ``doc``; the input is not modified."""
    out = copy.deepcopy(doc)
    for i, p in enumerate(patches):
        op, path = p.get("op"), p.get("path", "")
        try:
            if op == "add":
                out = _add(out, path, copy.deepcopy(p.get("value")))
            elif op == "remove":
                out = _remove(out, path)
            elif op == "replace":
                _get(out, path)
                out = _add(_remove(out, path), path, copy.deepcopy(p.get("value"))) if path else p.get("value")
            elif op == "move":
                value = _get(out, p.get("from", ""))
                out = _add(_remove(out, p.get("from", "")), path, value)
            elif op == "copy":
                out = _add(out, path, copy.deepcopy(_get(out, p.get("from", ""))))
            elif op == "test":
                if _get(out, path) != p.get("value"):
                    raise PatchError(f"test failed at {path}")
            else:
                raise PatchError(f"unknown op {op!r}")
        except PatchError as e:
            raise PatchError(f"jsonPatches[{i}] ({op} {path}): {e}") from None
    return out
