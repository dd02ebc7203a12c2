"""Which AIMNamespaceConfig applies in a namespace.

A namespace has at most one effective config: the oldest by
``metadata.creationTimestamp``, ties broken by name. Every other config in the
namespace is in conflict with it. Configs being deleted never apply.

Objects are the informer's trimmed dicts; nothing here touches the API.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kaiwo_ctrl.runtime.objects.objpath import meta as _meta

Obj = Mapping[str, Any]


def _age_key(obj: Obj) -> tuple[str, str]:
    # RFC 3339 UTC timestamps with a Z suffix sort correctly as strings.
    meta = _meta(obj)
    return (meta.get("creationTimestamp") or "", meta.get("name") or "")


@dataclass(frozen=True)
class Resolution:
    """The effective config of one namespace (``None`` when there is none)
    and the configs that lose to it."""

    effective: Obj | None = None
    conflicting: tuple[Obj, ...] = field(default_factory=tuple)

    @property
    def effective_name(self) -> str:
        return _meta(self.effective).get("name", "") if self.effective else ""

    def conflicts_with(self, name: str) -> bool:
        return any(_meta(c).get("name") == name for c in self.conflicting)


def resolve(configs: Iterable[Obj]) -> Resolution:
    """The effective config among the configs of ONE namespace."""
    live = sorted((c for c in configs if not _meta(c).get("deletionTimestamp")), key=_age_key)
    if not live:
        return Resolution()
    return Resolution(live[0], tuple(live[1:]))


def effective_by_namespace(configs: Iterable[Obj]) -> dict[str, Obj]:
    """Namespace -> effective config, for configs of any namespaces."""
    groups: dict[str, list[Obj]] = {}
    for c in configs:
        groups.setdefault(_meta(c).get("namespace") or "", []).append(c)
    out: dict[str, Obj] = {}
    for ns, group in groups.items():
        winner = resolve(group).effective
        if winner is not None:
            out[ns] = winner
    return out


def effective_spec(configs: Iterable[Obj]) -> dict[str, Any] | None:
    """The ``spec`` of the effective config among one namespace's configs."""
    winner = resolve(configs).effective
    return dict(winner.get("spec") or {}) if winner is not None else None
