"""Where the upstream is chosen: :meth:`Router.acquire`, the one entry for the pick.

A proxied request asks the router once per upstream attempt (as KubeAI's
``LoadBalancer.AwaitBestAddress`` -> ``group.getBestAddr``). Behind it sit the
Model's strategy, read from the Model at request time (LeastLoad, or PrefixHash
with its parameters: :class:`.exchange.ModelState`), the engine-aware PrefixHash
choice of the Model's endpoint group (:mod:`.endpoints`), and the ring and load
formula (:mod:`.balance`, :mod:`.score`).

``acquire(target, key, size, skip, tenant)``:

* With fair queuing on (:mod:`.fairgate`, ``--proxy-fair-queuing``), a first attempt for a saturated
  Model first waits its ``tenant``'s turn (429 past its queue's bounds); a retry never queues again.

* ``key`` is the PrefixHash key (the adapter plus the prompt's prefix; "" under
  LeastLoad), ``size`` the request body's bytes (an estimate of the prompt), and
  ``skip`` the endpoints this request already tried (used again only when
  nothing else serves the adapter).
* It returns at once when an endpoint is usable; otherwise it waits for the
  Model's endpoint group to change and chooses again on every change (reading
  the Model again, so a strategy change applies), at most ``wait_limit``
  seconds (``--proxy-endpoint-wait``), then raises a 504 :class:`.resolve.ProxyError`.
  No timer is armed when one is free at once.
* The endpoint is counted as in flight (and as pending: no answer byte yet,
  with the prompt tokens it has to prefill) from the moment it is returned.

What the :class:`Lease` must be told, by whoever sends the attempt:

* :meth:`Lease.answered` when the answer's first body byte arrives (a stream's
  first token): the endpoint's prefill is done. Idempotent.
* :meth:`Lease.retry` when this attempt is given up for another one (counts
  ``kaiwo_proxy_upstream_retries_total{reason}``).
* :meth:`Lease.release` exactly once, when the attempt ends, however it ends
  (it also tells ``answered`` if no answer began).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

from kaiwo_ctrl.runtime.cache.informer import Informer
from kaiwo_ctrl.serving.routing.balance import Endpoint
from kaiwo_ctrl.serving.routing.endpoints import EndpointTracker, Group
from kaiwo_ctrl.serving.routing.exchange import ModelState
from kaiwo_ctrl.serving.routing.fairgate import FairGate
from kaiwo_ctrl.serving.routing.metrics import ProxyMetrics
from kaiwo_ctrl.serving.routing.resolve import ProxyError, Target
from kaiwo_ctrl.serving.routing.score import BYTES_PER_TOKEN


class Lease:
    """One attempt's hold on an endpoint (in flight until :meth:`release`)."""

    __slots__ = ("endpoint", "tokens", "waited", "tenant", "_group", "_metrics", "_pending", "_held")

    def __init__(self, group: Group, endpoint: Endpoint, tokens: float, waited: float, metrics: ProxyMetrics,
                 tenant: str | None = None) -> None:
        self.endpoint, self.tokens, self.waited = endpoint, tokens, waited  # waited: seconds acquire waited for it
        self.tenant = tenant  # with fair queuing: whose request, counted in endpoint.pending_by until answered
        self._group, self._metrics = group, metrics
        self._pending = self._held = True
        if tenant is not None:
            endpoint.pending_by[tenant] = endpoint.pending_by.get(tenant, 0) + 1
            group.tenants.started(tenant)

    @property
    def address(self) -> str:
        return self.endpoint.address

    def answered(self) -> None:
        """The answer began (or the attempt ended without one): its prefill is no longer pending."""
        if self._pending:
            self._pending = False
            self._group.answered(self.endpoint, self.tokens)
            if self.tenant is not None:
                by = self.endpoint.pending_by
                if by.get(self.tenant, 0) > 1:
                    by[self.tenant] -= 1
                else:
                    by.pop(self.tenant, None)

    def retry(self, reason: str) -> None:
        """This attempt is given up for another (``reason``: "transport" or the status code)."""
        self._metrics.retries.labels(reason).inc()

    def release(self) -> None:
        """The attempt ended: the endpoint no longer counts it."""
        self.answered()
        if self._held:
            self._held = False
            self._group.release(self.endpoint)
            if self.tenant is not None:
                self._group.tenants.ended(self.tenant, time.monotonic())


class Router:
    """Picks the endpoint of each upstream attempt; holds the per-Model state derived once per Model version."""

    def __init__(
        self, tracker: EndpointTracker, models: Informer, metrics: ProxyMetrics,
        default_timeout: float | None, wait_limit: float | None, fair: FairGate | None = None,
    ) -> None:
        self.tracker, self.models, self.metrics = tracker, models, metrics
        self.default_timeout, self.wait_limit = default_timeout, wait_limit
        self.fair = fair  # --proxy-fair-queuing: a saturated Model's requests wait their tenant's turn
        self._states: dict[tuple[str, str], ModelState] = {}

    def state(self, t: Target) -> ModelState:
        """What a request needs of its Model (deadline, strategy, series, endpoints), derived once per Model version."""
        key = (t.namespace, t.name)
        st = self._states.get(key)
        if st is None or st.model is not t.model:
            # the tracker never drops a group: the same one serves the Model's life
            st = self._states[key] = ModelState(t.model, key, self.metrics, self.default_timeout, self.tracker.group(key))
        return st

    async def acquire(self, target: Target, key: str, size: int, skip: frozenset[str], tenant: str = "") -> Lease:
        """An endpoint of ``target``'s Model for one attempt (see the module docstring)."""
        if self.fair is None or skip:  # a retry does not queue again
            return await self._lease(target, key, size, skip)
        w0 = time.perf_counter()
        lease = await self.fair.acquire((target.namespace, target.name), self.state(target).group, tenant,
                                        lambda full: self._lease(target, key, size, full, tenant))
        lease.waited = time.perf_counter() - w0  # the turn waited for counts as waiting, not as the proxy's overhead
        return lease

    async def _lease(self, target: Target, key: str, size: int, skip: frozenset[str], tenant: str | None = None) -> Lease:
        group = self.state(target).group
        quiet = self.fair.quiet_for(group, tenant) if self.fair is not None and tenant is not None else frozenset()
        chosen = self._choose(group, target, key, skip, size, quiet)
        if chosen is not None:  # one is free: no wait to time
            return Lease(group, chosen[0], chosen[1], 0.0, self.metrics, tenant)
        w0 = time.perf_counter()
        try:
            ep, tokens = await self._await(group, target, key, skip, size)
        except TimeoutError:
            raise ProxyError(504, f"Gateway Timeout: no endpoint of the Model was ready within {self.wait_limit:g}s") from None
        return Lease(group, ep, tokens, time.perf_counter() - w0, self.metrics, tenant)

    async def _await(self, group: Group, t: Target, key: str, skip: frozenset[str], size: int) -> tuple[Endpoint, float]:
        """Chooses again on every change of the group, at most ``wait_limit`` (TimeoutError)."""
        deadline = None
        while True:
            changed = group.changed()
            chosen = self._choose(group, t, key, skip, size)
            if chosen is not None:
                return chosen
            if deadline is None and self.wait_limit is not None:
                deadline = asyncio.get_running_loop().time() + self.wait_limit
            async with asyncio.timeout_at(deadline):
                await changed.wait()
            m: Mapping[str, Any] | None = self.models.get(t.name, t.namespace)
            if m is not None:
                t.model = m

    def _choose(self, group: Group, t: Target, key: str, skip: frozenset[str], size: int,
                quiet: frozenset[str] = frozenset()) -> tuple[Endpoint, float] | None:
        """An endpoint for ``t`` now (counted as in flight) and the prompt tokens it has to prefill (estimated from
        the body's ``size`` less what its cache holds), or None when none is usable. ``quiet``: where a new
        conversation goes under PrefixHash (a tenant under its fair share: the quiet engines)."""
        prefix = self.state(t).prefix  # the strategy is read at request time
        if prefix is not None:
            c = group.choose_prefix(key, prefix[1], prefix[2], t.adapter, skip, size, quiet)
            ep = c.endpoint
            size -= c.cached  # what the engine has to prefill: the part of the prompt its cache does not hold
            if ep is not None:
                outcome = "fallback" if c.fallback else ("home" if ep is c.initial else "spill")
                self.metrics.prefix_choices.labels(outcome).inc()
                self.metrics.prefix_examined.inc(c.examined)
        else:
            ep = group.choose_least(t.adapter, skip)
        if ep is None:
            return None
        tokens = max(0, size) / BYTES_PER_TOKEN
        return group.acquire(ep, tokens), tokens
