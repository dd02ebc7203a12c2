"""Event handlers: translate informer events into reconcile requests.

* :class:`EnqueueObject` - the object's own key.
* :class:`EnqueueOwner` - the controller owner of a child, matched by group and kind.
* :class:`EnqueueMapped` - any keys a map function returns (e.g. every
  workload that depends on a Node).

Handlers run on the informer task: they must not do I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kaiwo_ctrl.runtime.control.predicate import Predicate

Obj = Mapping[str, Any]


@dataclass(frozen=True, order=True)
class Request:
    """What a reconcile is about: a namespace (empty for cluster-scoped) and a name."""

    namespace: str
    name: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    def __str__(self) -> str:
        return self.key

    @classmethod
    def of(cls, obj: Obj) -> "Request":
        m = obj.get("metadata", {})
        return cls(m.get("namespace") or "", m["name"])


Enqueue = Callable[[Request], None]


class _Base:
    def __init__(self, enqueue: Enqueue, predicates: Sequence[Predicate] = ()) -> None:
        self.enqueue = enqueue
        self.predicates = list(predicates)

    def requests(self, obj: Obj) -> Iterable[Request]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _emit(self, *objs: Obj) -> None:
        seen: set[Request] = set()
        for o in objs:
            for r in self.requests(o):
                if r not in seen:
                    seen.add(r)
                    self.enqueue(r)

    def on_add(self, obj: Obj, initial: bool) -> None:
        if all(p.create(obj) for p in self.predicates):
            self._emit(obj)

    def on_update(self, old: Obj, new: Obj) -> None:
        if all(p.update(old, new) for p in self.predicates):
            self._emit(old, new)

    def on_delete(self, obj: Obj, tombstone: bool) -> None:
        if all(p.delete(obj) for p in self.predicates):
            self._emit(obj)


class EnqueueObject(_Base):
    def requests(self, obj: Obj) -> Iterable[Request]:
        return (Request.of(obj),)

    def on_update(self, old: Obj, new: Obj) -> None:
        if all(p.update(old, new) for p in self.predicates):
            self._emit(new)


class EnqueueOwner(_Base):
    """Enqueue the controller owner (group + kind match; version ignored)."""

    def __init__(
        self,
        enqueue: Enqueue,
        owner_group: str,
        owner_kind: str,
        owner_namespaced: bool = True,
        predicates: Sequence[Predicate] = (),
        only_controller: bool = True,
    ) -> None:
        super().__init__(enqueue, predicates)
        self.group, self.kind, self.owner_namespaced, self.only_controller = owner_group, owner_kind, owner_namespaced, only_controller

    def requests(self, obj: Obj) -> Iterable[Request]:
        meta = obj.get("metadata", {})
        for ref in meta.get("ownerReferences") or ():
            if self.only_controller and not ref.get("controller"):
                continue
            api_version = ref.get("apiVersion", "")
            group = api_version.rsplit("/", 1)[0] if "/" in api_version else ""
            if ref.get("kind") == self.kind and group == self.group:
                yield Request(meta.get("namespace", "") if self.owner_namespaced else "", ref["name"])


class EnqueueMapped(_Base):
    def __init__(self, enqueue: Enqueue, fn: Callable[[Obj], Iterable[Request]], predicates: Sequence[Predicate] = ()) -> None:
        super().__init__(enqueue, predicates)
        self.fn = fn

    def requests(self, obj: Obj) -> Iterable[Request]:
        return self.fn(obj)
