"""From a requested model name to a Model (and adapter).

* ``<name>`` resolves across all namespaces when exactly one namespace has a
  Model of that name; several -> 409 naming the namespaces;
* ``<namespace>/<name>`` addresses one Model;
* ``<name>_<adapter>`` (split at the first ``_``; Model names cannot contain
  one) addresses an adapter of the Model, which must be in ``spec.adapters``;
  the forwarded ``model`` becomes the adapter name (vLLM's LoRA name);
* every ``X-Label-Selector`` header must match the Model's labels, else the
  Model is treated as unknown (a gateway injects them to fence tenants off).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from api.meta import parse_duration
from kaiwo_ctrl.runtime.cache.informer import Informer
from kaiwo_ctrl.runtime.objects.labelselector import Requirement, SelectorError, matches, parse_selector

NAME_INDEX = "proxy-model-name"
#: Per-Model request deadline (a Go duration such as ``90s`` or ``10m``); see README "Calling models".
TIMEOUT_ANNOTATION = "kaiwo.silogen.ai/request-timeout"


class ProxyError(Exception):
    """An error answered to the client as JSON."""

    def __init__(self, status: int, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status, self.message, self.extra = status, message, extra


def index_by_name(obj: Mapping[str, Any]) -> list[str]:
    return [obj["metadata"]["name"]]


@dataclass(slots=True)
class Target:
    namespace: str
    name: str
    adapter: str
    model: Mapping[str, Any]  # the cached Model (read-only)
    forward_name: str  # the ``model`` the server is asked for

    @property
    def spec(self) -> Mapping[str, Any]:
        return self.model.get("spec") or {}


def selectors_of(headers: Iterable[str]) -> list[Requirement]:
    reqs: list[Requirement] = []
    for h in headers:
        try:
            reqs += parse_selector(h)
        except SelectorError as e:
            raise ProxyError(400, f"bad request: X-Label-Selector: {e}") from None
    return reqs


class Resolver:
    def __init__(self, models: Informer) -> None:
        self.models = models
        models.add_indexer(NAME_INDEX, index_by_name)

    def _visible(self, objs: Sequence[Mapping[str, Any]], selectors: list[Requirement]) -> Sequence[Mapping[str, Any]]:
        if not selectors:
            return objs
        return [m for m in objs if matches(selectors, m["metadata"].get("labels"))]

    def candidates(self, requested: str, namespace: str | None = None) -> list[tuple[str, str]]:
        """(namespace, name) of the Models ``requested`` may name (before selectors and adapters), for
        the caller's authorization, which :meth:`resolve` then takes as ``allowed``."""
        ns, _, rest = requested.rpartition("/") if "/" in requested else ("", "", requested)
        ns = namespace or ns
        name = rest.partition("_")[0]
        if ns:
            return [(ns, name)] if self.models.get(name, ns) is not None else []
        return [(m["metadata"]["namespace"], name) for m in self.models.by_index(NAME_INDEX, name)]

    def resolve(self, requested: str, selectors: list[Requirement], namespace: str | None = None,
                allowed: set[tuple[str, str]] | None = None) -> Target:
        """Resolve a requested name; ``namespace`` comes from a namespaced route. With ``allowed``
        (the caller's authorized Models), any other Model is treated as unknown: one answer
        (404) whether it exists or not, and a name is ambiguous (409) only among those."""
        ns, _, rest = requested.rpartition("/") if "/" in requested else ("", "", requested)
        if namespace is not None:
            if ns and ns != namespace:
                raise ProxyError(404, f"model not found: {requested!r}")
            ns = namespace
        name, _, adapter = rest.partition("_")
        found: Sequence[Mapping[str, Any]]
        if ns:
            m = self.models.get(name, ns)
            found = [m] if m is not None else []
        else:
            found = self.models.by_index(NAME_INDEX, name)
        found = self._visible(found, selectors)
        if allowed is not None:
            found = [m for m in found if (m["metadata"]["namespace"], m["metadata"]["name"]) in allowed]
        if not found:
            raise ProxyError(404, f"model not found: {requested!r}")
        if len(found) > 1:
            spaces = sorted(m["metadata"]["namespace"] for m in found)
            raise ProxyError(
                409,
                f"model {name!r} exists in several namespaces ({', '.join(spaces)}); ask for '<namespace>/{rest}'",
                namespaces=spaces,
            )
        model = found[0]
        if adapter and adapter not in adapter_names(model):
            raise ProxyError(404, f"model not found: {requested!r} (no adapter {adapter!r})")
        return Target(model["metadata"]["namespace"], name, adapter, model, adapter or name)


def adapter_names(model: Mapping[str, Any]) -> list[str]:
    return [a["name"] for a in (model.get("spec") or {}).get("adapters") or () if a.get("name")]


def request_timeout(model: Mapping[str, Any], default: float | None) -> float | None:
    """The Model's request deadline in seconds (annotation), else ``default``; 0 means none."""
    raw = ((model.get("metadata") or {}).get("annotations") or {}).get(TIMEOUT_ANNOTATION)
    if raw:
        try:
            secs = parse_duration(raw.strip()).total_seconds()
            return secs or None
        except ValueError:
            pass  # a bad annotation falls back to the default (the README says so)
    return default or None


def unix_time(ts: str | None) -> int:
    if not ts:
        return 0
    return int(datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp())
