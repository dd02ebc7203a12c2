"""Per-Model and per-request bookkeeping of the proxy's hot path.

:class:`ModelState` holds what every request for a Model needs and would
otherwise recompute: its deadline, its load-balancing parameters and its
labelled metric series. It is derived once per version of the cached Model
(the informer replaces the object on every change, so identity tells).

:class:`Exchange` is one request's state across its attempts: the time spent
waiting for an endpoint (left out of the proxy's own overhead) and when the
first upstream request went out; the wait for an endpoint is bounded.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from kaiwo_ctrl.serving.proxy.balance import Endpoint
from kaiwo_ctrl.serving.proxy.endpoints import Group
from kaiwo_ctrl.serving.proxy.metrics import ProxyMetrics
from kaiwo_ctrl.serving.proxy.resolve import ProxyError, Target, request_timeout


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
    __slots__ = ("handler", "group", "target", "key", "size", "tokens", "waited", "sent_at", "wait_limit", "tenant")

    def __init__(self, handler: Any, group: Group, target: Target, wait_limit: float | None = None) -> None:
        self.handler, self.group, self.target, self.wait_limit = handler, group, target, wait_limit
        self.key = ""  # the PrefixHash key
        self.size = 0  # the request body's bytes (an estimate of its prompt's length)
        self.tokens = 0.0  # the prompt tokens the current attempt's endpoint has to prefill (an estimate)
        self.waited = 0.0
        self.sent_at = 0.0
        self.tenant = ""  # whose fair share the request takes (see .fairgate)

    async def acquire(self, skip: frozenset[str]) -> Endpoint:
        """An endpoint of the Model; a first attempt waits its tenant's turn while the Model is saturated (429 past
        the fair queue's bounds), then for an endpoint at most ``wait_limit`` (504)."""
        fair = self.handler.fair
        if fair is not None and not skip:  # a retry does not queue again
            t = self.target
            return await fair.acquire((t.namespace, t.name), self.group, self.tenant, lambda: self._pick(skip))
        return await self._pick(skip)

    async def _pick(self, skip: frozenset[str]) -> Endpoint:
        chosen = self.handler._choose(self.group, self.target, self.key, skip, self.size)
        if chosen is not None:  # one is free: no wait to time
            ep, self.tokens = chosen
            return ep
        w0 = time.perf_counter()
        try:
            ep, self.tokens = await self.handler._acquire(self.group, self.target, self.key, skip, self.wait_limit, self.size)
            return ep
        except TimeoutError:
            raise ProxyError(504, f"Gateway Timeout: no endpoint of the Model was ready within {self.wait_limit:g}s") from None
        finally:
            self.waited += time.perf_counter() - w0

    def answered(self, ep: Endpoint) -> None:
        """The current attempt's answer began (or the attempt ended): its prefill is no longer pending."""
        self.group.answered(ep, self.tokens)

    def sent(self) -> None:
        if not self.sent_at:
            self.sent_at = time.perf_counter()

    def retry(self, reason: str) -> None:
        self.handler.metrics.retries.labels(reason).inc()
