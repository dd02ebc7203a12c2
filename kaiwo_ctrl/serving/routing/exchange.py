"""Per-Model and per-request bookkeeping of the proxy's hot path.

:class:`ModelState` holds what every request for a Model needs and would
otherwise recompute: its deadline, its load-balancing parameters and its
labelled metric series. It is derived once per version of the cached Model
(the informer replaces the object on every change, so identity tells).

:class:`Exchange` is one request's state across its attempts: what it asks the
router for (:meth:`.router.Router.acquire`), the time spent waiting for an
endpoint (left out of the proxy's own overhead) and when the first upstream
request went out.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from kaiwo_ctrl.serving.routing.endpoints import Group
from kaiwo_ctrl.serving.routing.metrics import ProxyMetrics
from kaiwo_ctrl.serving.routing.resolve import Target, request_timeout


class ModelState:
    __slots__ = ("model", "key", "timeout", "prefix", "active", "group", "_metrics", "_codes")

    def __init__(
        self, model: Mapping[str, Any], key: tuple[str, str], metrics: ProxyMetrics, default_timeout: float | None, group: Group,
    ) -> None:
        self.model, self.key, self.group = model, key, group  # group: the Model's endpoints
        self.timeout = request_timeout(model, default_timeout)
        lb = (model.get("spec") or {}).get("loadBalancing") or {}
        #: (prefixCharLength, replication, meanLoadFactor) under PrefixHash, else None (LeastLoad)
        self.prefix: tuple[int, int, int] | None = None
        if lb.get("strategy") == "PrefixHash":
            ph = lb.get("prefixHash") or {}
            self.prefix = (int(ph.get("prefixCharLength", 100)), int(ph.get("replication", 256)), int(ph.get("meanLoadFactor", 125)))
        self.active = metrics.active.labels(*key)
        self._metrics = metrics
        self._codes: dict[int, tuple[Any, Any]] = {}

    def by_code(self, code: int) -> tuple[Any, Any]:
        """The (requests counter, duration histogram) series of a status code (0: none; labelled "000")."""
        series = self._codes.get(code)
        if series is None:
            m, label = self._metrics, f"{code:03d}"
            series = self._codes[code] = (m.requests.labels(*self.key, label), m.duration.labels(*self.key, label))
        return series


class Exchange:
    """One request's ask of the router (Model, PrefixHash key, body size) and its timing across attempts."""

    __slots__ = ("target", "key", "size", "tenant", "waited", "sent_at")

    def __init__(self, target: Target, key: str = "", size: int = 0, tenant: str = "") -> None:
        self.target = target
        self.tenant = tenant  # whose fair share the request takes (see .fairgate)
        self.key = key  # the PrefixHash key
        self.size = size  # the request body's bytes (an estimate of its prompt's length)
        self.waited = 0.0  # seconds spent waiting for an endpoint (left out of the proxy's overhead)
        self.sent_at = 0.0

    def sent(self) -> None:
        if not self.sent_at:
            self.sent_at = time.perf_counter()
