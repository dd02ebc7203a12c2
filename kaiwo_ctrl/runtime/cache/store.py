"""The informer's cache: a map of key -> object plus secondary indexes.

Objects are the trimmed raw dicts the informer received. Callers must treat
them as read-only; build a model (or ``copy.deepcopy``) before changing
anything. An index function maps an object to the list of values it is
filed under; ``by_index(name, value)`` returns every object with that value.
"""

from __future__ import annotations

import builtins
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from kaiwo_ctrl.runtime.objects.objpath import rv

Obj = dict[str, Any]
IndexFunc = Callable[[Mapping[str, Any]], Iterable[str]]

NAMESPACE_INDEX = "namespace"
OWNER_UID_INDEX = "owner-uid"


def index_by_namespace(obj: Mapping[str, Any]) -> list[str]:
    ns = obj.get("metadata", {}).get("namespace")
    return [ns] if ns else []


def index_by_owner_uid(obj: Mapping[str, Any]) -> list[str]:
    return [r["uid"] for r in obj.get("metadata", {}).get("ownerReferences") or () if "uid" in r]


def index_by_label(label: str) -> IndexFunc:
    def fn(obj: Mapping[str, Any]) -> list[str]:
        v = (obj.get("metadata", {}).get("labels") or {}).get(label)
        return [v] if v is not None else []

    return fn


_INTERN_MAX = 64


def _intern_values(root: Any) -> None:
    """Share equal short string values between cached objects.

    Thousands of cached objects repeat the same label values, images,
    policies and API versions; orjson already shares dict keys, and
    interning the values too saves about a third of a cached Job's memory.
    Interned strings are freed normally once nothing refers to them.
    Iterative, with exact type checks: it runs on every object an informer
    receives, and this is about a third faster than the recursive walk.
    """
    intern = sys.intern
    stack = [root]
    pop, push = stack.pop, stack.append
    while stack:
        node = pop()
        items = node.items() if type(node) is dict else enumerate(node)
        for k, v in items:
            t = type(v)
            if t is str:
                if len(v) <= _INTERN_MAX:
                    node[k] = intern(v)
            elif t is dict or t is list:
                push(v)


def strip_managed_fields(obj: Obj) -> Obj:
    """Default transform: drop what no controller reads, share repeated strings."""
    meta = obj.get("metadata")
    if meta:
        meta.pop("managedFields", None)
        ann = meta.get("annotations")
        if ann and "kubectl.kubernetes.io/last-applied-configuration" in ann:
            del ann["kubectl.kubernetes.io/last-applied-configuration"]
            if not ann:
                del meta["annotations"]
    _intern_values(obj)
    return obj


def object_key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata", {})
    ns = meta.get("namespace")
    return f"{ns}/{meta['name']}" if ns else meta["name"]


class Store:
    def __init__(self, indexers: Mapping[str, IndexFunc] | None = None) -> None:
        self._items: dict[str, Obj] = {}
        self._indexers: dict[str, IndexFunc] = {NAMESPACE_INDEX: index_by_namespace, OWNER_UID_INDEX: index_by_owner_uid}
        self._indexers.update(indexers or {})
        self._indexes: dict[str, dict[str, set[str]]] = {n: {} for n in self._indexers}

    # -------------------------------------------------------------- indexes
    def add_indexer(self, name: str, fn: IndexFunc) -> None:
        """Register an index; existing objects are filed at once (backfill)."""
        if name in self._indexers:
            if self._indexers[name] is fn:
                return
            raise ValueError(f"index {name!r} already registered")
        self._indexers[name] = fn
        self._indexes[name] = {}
        for key, obj in self._items.items():
            self._file(name, key, obj)

    def _file(self, name: str, key: str, obj: Mapping[str, Any]) -> None:
        idx = self._indexes[name]
        for v in self._indexers[name](obj):
            idx.setdefault(v, set()).add(key)

    def _unfile(self, key: str, obj: Mapping[str, Any]) -> None:
        for name, fn in self._indexers.items():
            idx = self._indexes[name]
            for v in fn(obj):
                keys = idx.get(v)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del idx[v]

    # ------------------------------------------------------------- mutation
    def put(self, obj: Obj) -> Obj | None:
        key = object_key(obj)
        old = self._items.get(key)
        if old is not None:
            self._unfile(key, old)
        self._items[key] = obj
        for name in self._indexers:
            self._file(name, key, obj)
        return old

    def file(self, obj: Obj, added: Callable[[Obj], None], updated: Callable[[Obj, Obj], None]) -> None:
        """Put one listed object: ``added(obj)`` for a new key,
        ``updated(old, obj)`` where the resourceVersion moved."""
        old = self.put(obj)
        if old is None:
            added(obj)
        elif rv(old) != rv(obj):
            updated(old, obj)

    def replace(
        self, items: Iterable[Obj], added: Callable[[Obj], None], updated: Callable[[Obj, Obj], None],
        deleted: Callable[[Obj], None],
    ) -> None:
        """Make ``items`` (a full list) the contents: :meth:`file` each, then
        ``deleted(old)`` for every key the list no longer has."""
        first_fill = not self._items  # nothing to compare with or delete: skip the key set
        seen: set[str] = set()
        for obj in items:
            if not first_fill:
                seen.add(object_key(obj))
            self.file(obj, added, updated)
        for key in [] if first_fill else [k for k in self._items if k not in seen]:
            old = self.delete(key)
            if old is not None:
                deleted(old)

    def delete(self, key: str) -> Obj | None:
        old = self._items.pop(key, None)
        if old is not None:
            self._unfile(key, old)
        return old

    # ---------------------------------------------------------------- reads
    def get(self, key: str) -> Obj | None:
        return self._items.get(key)

    def get_by(self, name: str, namespace: str | None = None) -> Obj | None:
        return self._items.get(f"{namespace}/{name}" if namespace else name)

    def keys(self) -> list[str]:
        return list(self._items)

    def list(self, namespace: str | None = None) -> list[Obj]:
        if namespace is None:
            return list(self._items.values())
        return self.by_index(NAMESPACE_INDEX, namespace)

    def by_index(self, name: str, value: str) -> builtins.list[Obj]:
        keys = self._indexes[name].get(value, ())
        return [self._items[k] for k in sorted(keys)]

    def index_values(self, name: str) -> builtins.list[str]:
        return list(self._indexes[name])

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Obj]:
        return iter(list(self._items.values()))

    def __contains__(self, key: str) -> bool:
        return key in self._items
