"""Event filters applied before a handler enqueues anything.

A predicate gets the event kind and the objects; all predicates of a watch
must pass. They never change what the cache stores.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kaiwo_ctrl.runtime.objects.objpath import meta as _meta

Obj = Mapping[str, Any]


class Predicate:
    """Override the hooks you care about; the defaults let everything through."""

    def create(self, obj: Obj) -> bool:
        return True

    def update(self, old: Obj, new: Obj) -> bool:
        return True

    def delete(self, obj: Obj) -> bool:
        return True


class GenerationChanged(Predicate):
    """Updates pass only when metadata.generation moved (spec changes, deletion start)."""

    def update(self, old: Obj, new: Obj) -> bool:
        return _meta(old).get("generation") != _meta(new).get("generation")


class ResourceVersionChanged(Predicate):
    """Drops resync/no-op updates."""

    def update(self, old: Obj, new: Obj) -> bool:
        return _meta(old).get("resourceVersion") != _meta(new).get("resourceVersion")


class LabelsChanged(Predicate):
    def update(self, old: Obj, new: Obj) -> bool:
        return _meta(old).get("labels") != _meta(new).get("labels")


class AnnotationsChanged(Predicate):
    def update(self, old: Obj, new: Obj) -> bool:
        return _meta(old).get("annotations") != _meta(new).get("annotations")


class FieldsChanged(Predicate):
    """Updates pass when any of the selected projections differ."""

    def __init__(self, *getters: Callable[[Obj], Any]) -> None:
        self.getters = getters

    def update(self, old: Obj, new: Obj) -> bool:
        return any(g(old) != g(new) for g in self.getters)


class Or(Predicate):
    def __init__(self, *ps: Predicate) -> None:
        self.ps = ps

    def create(self, obj: Obj) -> bool:
        return any(p.create(obj) for p in self.ps)

    def update(self, old: Obj, new: Obj) -> bool:
        return any(p.update(old, new) for p in self.ps)

    def delete(self, obj: Obj) -> bool:
        return any(p.delete(obj) for p in self.ps)


class Not(Predicate):
    def __init__(self, p: Predicate) -> None:
        self.p = p

    def create(self, obj: Obj) -> bool:
        return not self.p.create(obj)

    def update(self, old: Obj, new: Obj) -> bool:
        return not self.p.update(old, new)

    def delete(self, obj: Obj) -> bool:
        return not self.p.delete(obj)


class Filter(Predicate):
    """Passes objects for which ``fn(obj)`` is true (both sides for updates)."""

    def __init__(self, fn: Callable[[Obj], bool]) -> None:
        self.fn = fn

    def create(self, obj: Obj) -> bool:
        return self.fn(obj)

    def update(self, old: Obj, new: Obj) -> bool:
        return self.fn(old) or self.fn(new)

    def delete(self, obj: Obj) -> bool:
        return self.fn(obj)
