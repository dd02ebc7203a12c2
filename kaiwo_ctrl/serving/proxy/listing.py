"""``GET /v1/models``: the listing, built once per change of the Model informer.

Each Model's entries (the Model, then one per adapter in ``spec.adapters``) are
encoded once, in both id forms (``<name>`` and ``<namespace>/<name>``), when a
Model that the listing shows is added, deleted or changed in a listed field
(labels, features, adapters, owner); status updates do not rebuild it. A call
then only filters (features, label selectors, the Models the caller may use)
and joins the encoded pieces: thousands of adapters on one Model cost their
bytes, not a rebuild, per call. A name is bare when only one Model the caller
may use has it (so the ids tell nothing of Models the caller may not use); on the
open proxy, when only one Model of the cluster (matching the selectors) has it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from kaiwo_ctrl.runtime.cache.informer import Informer
from kaiwo_ctrl.runtime.objects.labelselector import Requirement, matches
from kaiwo_ctrl.serving.routing.resolve import adapter_names, unix_time


@dataclass(frozen=True, slots=True)
class Item:
    key: tuple[str, str]  # (namespace, name)
    labels: Mapping[str, str]
    features: frozenset[str]
    bare: bytes  # the entries, encoded, ids <name>[_<adapter>]
    qualified: bytes  # ids <namespace>/<name>[_<adapter>]


def _listed(m: Mapping[str, Any]) -> tuple[Any, ...]:
    meta, spec = m.get("metadata") or {}, m.get("spec") or {}
    return (meta.get("labels"), meta.get("creationTimestamp"), spec.get("features"), spec.get("adapters"), spec.get("owner"))


def _encode(m: Mapping[str, Any], base: str) -> bytes:
    meta, spec = m["metadata"], m.get("spec") or {}
    entry = {"object": "model", "created": unix_time(meta.get("creationTimestamp")), "owned_by": spec.get("owner") or "",
             "features": list(spec.get("features") or ())}
    out = [{"id": base, **entry}] + [{"id": f"{base}_{a}", **entry} for a in adapter_names(m)]
    return orjson.dumps(out)[1:-1]  # the entries without the list's brackets, to be joined


class ModelListing:
    """The encoded listing, kept current by the Model informer's events (an :class:`EventHandler`)."""

    def __init__(self, models: Informer) -> None:
        self.models = models
        self._items: list[Item] | None = None
        self.builds = 0  # how often the listing was built (tests count them)
        models.add_handler(self)

    def on_add(self, obj: Mapping[str, Any], initial: bool) -> None:
        self._items = None

    def on_update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        if _listed(old) != _listed(new):
            self._items = None

    def on_delete(self, obj: Mapping[str, Any], tombstone: bool) -> None:
        self._items = None

    def items(self) -> list[Item]:
        items = self._items
        if items is None:
            self.builds += 1
            items = self._items = [
                Item((m["metadata"]["namespace"], m["metadata"]["name"]), m["metadata"].get("labels") or {},
                     frozenset((m.get("spec") or {}).get("features") or ()),
                     _encode(m, m["metadata"]["name"]), _encode(m, f"{m['metadata']['namespace']}/{m['metadata']['name']}"))
                for m in sorted(self.models.list(), key=lambda m: (m["metadata"]["name"], m["metadata"]["namespace"]))
            ]
        return items

    def candidates(self, features: list[str] | None, selectors: list[Requirement], only: tuple[str, str] | None = None) -> list[Item]:
        """The Models having any of ``features`` (None: any) and matching ``selectors`` (``only``: that one Model)."""
        want = frozenset(features or ())
        return [i for i in self.items() if (only is None or i.key == only) and (features is None or i.features & want)
                and (not selectors or matches(selectors, i.labels))]

    @staticmethod
    def render(items: list[Item], allowed: Callable[[tuple[str, str]], bool] | None = None,
               named: list[Item] | None = None) -> bytes:
        """The ``/v1/models`` answer of ``items`` (those ``allowed`` passes); a name is qualified when two
        of ``named`` (default: those shown) have it."""
        shown = [i for i in items if allowed is None or allowed(i.key)]
        counts: dict[str, int] = {}
        for i in (shown if named is None else named):
            counts[i.key[1]] = counts.get(i.key[1], 0) + 1
        parts = [(i.bare if counts[i.key[1]] == 1 else i.qualified) for i in shown]
        return b'{"object":"list","data":[' + b",".join(p for p in parts if p) + b"]}"
