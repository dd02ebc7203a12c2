"""A controller: event sources -> predicates -> handlers -> workqueue -> workers.

The reconcile function receives only a :class:`Request` (namespace/name),
reads current state from the cache, and returns a :class:`Result` or
``None``. Results are handled in this order:

* exception (not terminal) -> ``add_rate_limited`` (exponential backoff);
* :class:`TerminalError` -> not retried;
* ``requeue_after`` -> ``forget`` then ``add_after``;
* ``requeue`` -> ``add_rate_limited``;
* nothing -> ``forget``.

A 409 Conflict is an ordinary retry, but it is requeued quickly and logged at
debug level: it only means our cache was a moment behind.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from kaiwo_ctrl.runtime.api.client import ApiError
from kaiwo_ctrl.runtime.control.handler import EnqueueMapped, EnqueueObject, EnqueueOwner, Request
from kaiwo_ctrl.runtime.cache.informer import Informer
from kaiwo_ctrl.runtime.observe.logging import log_context
from kaiwo_ctrl.runtime.observe.metrics import Metrics
from kaiwo_ctrl.runtime.control.predicate import Predicate
from kaiwo_ctrl.runtime.control.ratelimit import RateLimiter, default_controller_rate_limiter
from kaiwo_ctrl.runtime.process.supervise import supervise
from kaiwo_ctrl.runtime.control.workqueue import WorkQueue

log = logging.getLogger("kaiwo_ctrl.runtime.control.controller")


@dataclass(frozen=True)
class Result:
    requeue_after: float = 0.0
    requeue: bool = False


class TerminalError(Exception):
    """A reconcile error that retrying cannot fix (reported, not requeued)."""


Reconciler = Callable[[Request], Awaitable[Result | None]]


class Controller:
    """One reconcile function fed by a workqueue. Options and their defaults:

    * ``workers`` (1): reconciles that may run at once; one key never runs twice
      at the same time whatever the number.
    * ``rate_limiter`` (``default_controller_rate_limiter()``): the delay of a
      failed key, per-key exponential 5 ms doubling to 1000 s, combined with an
      overall 10 qps / burst 100 bucket.
    * ``metrics`` (None: no metrics): where the ``controller_runtime_*`` and
      ``workqueue_*`` series go; every series is created at zero here, at
      construction, so standbys and the first scrape show them.
    * ``tracer`` (None: no spans): an OpenTelemetry tracer, one span per reconcile.
    A reconcile that hits 409 Conflict is retried through the rate limiter like
    any other error: a cache a moment behind clears within the first short
    delays, and a cache that stays stale (or a second writer) backs off
    exponentially to the cap instead of looping at a fixed rate.
    """

    def __init__(
        self,
        name: str,
        reconcile: Reconciler,
        *,
        workers: int = 1,
        rate_limiter: RateLimiter | None = None,
        metrics: Metrics | None = None,
        tracer: Any = None,
    ) -> None:
        self.name = name
        self.reconcile = reconcile
        self.workers = workers
        self.metrics = metrics
        self.tracer = tracer
        self.queue: WorkQueue[Request] = WorkQueue(
            name,
            rate_limiter=rate_limiter or default_controller_rate_limiter(),
            metrics=metrics.workqueue(name) if metrics else None,
        )
        if metrics:
            # every series exists at zero from creation, as in controller-runtime:
            # a first scrape, or a standby replica, already shows them
            metrics.register_controller(name, workers)
        self._sources: list[tuple[Informer, Any]] = []
        self._tasks: list[asyncio.Task] = []
        self.started = False
        self.reconciles = 0
        self.active = 0

    # ------------------------------------------------------------- wiring
    def enqueue(self, req: Request) -> None:
        self.queue.add(req)

    def _enqueuer(self, debounce: float) -> Callable[[Request], None]:
        if debounce <= 0:
            return self.enqueue
        # add_after keeps the earliest ready time, so a burst of events within
        # ``debounce`` seconds collapses into one reconcile at the end of it
        return lambda req: self.queue.add_after(req, debounce)

    def for_(self, informer: Informer, predicates: Sequence[Predicate] = (), *, debounce: float = 0.0) -> "Controller":
        """Reconcile the objects of this informer themselves."""
        return self._watch(informer, EnqueueObject(self._enqueuer(debounce), predicates))

    def owns(
        self,
        informer: Informer,
        owner_group: str,
        owner_kind: str,
        *,
        owner_namespaced: bool = True,
        predicates: Sequence[Predicate] = (),
        debounce: float = 0.0,
    ) -> "Controller":
        """Reconcile the controller owner of each object of this informer."""
        return self._watch(informer, EnqueueOwner(self._enqueuer(debounce), owner_group, owner_kind, owner_namespaced, predicates))

    def watches(
        self,
        informer: Informer,
        map_fn: Callable[[Any], Iterable[Request]],
        predicates: Sequence[Predicate] = (),
        *,
        debounce: float = 0.0,
    ) -> "Controller":
        """Reconcile whatever ``map_fn`` maps each object of this informer to."""
        return self._watch(informer, EnqueueMapped(self._enqueuer(debounce), map_fn, predicates))

    def _watch(self, informer: Informer, handler: Any) -> "Controller":
        self._sources.append((informer, handler))
        if self.started:
            informer.add_handler(handler)
        return self

    @property
    def informers(self) -> list[Informer]:
        return [i for i, _ in self._sources]

    # ---------------------------------------------------------------- run
    async def start(self, sync_timeout: float = 120.0) -> None:
        """Register handlers, wait until every source is synced, start the workers."""
        if self.started:
            return
        self.started = True
        for informer, handler in self._sources:
            informer.add_handler(handler)
        results = await asyncio.gather(*(i.wait_synced(sync_timeout) for i, _ in self._sources))
        if not all(results):
            raise TimeoutError(f"controller {self.name}: caches did not sync within {sync_timeout}s")
        # a worker that dies outside a reconcile is logged and restarted
        self._tasks = [supervise(f"{self.name}-worker-{i}", self._worker) for i in range(self.workers)]
        log.info("controller started", extra={"controller": self.name, "workers": self.workers})

    async def stop(self, drain_timeout: float = 30.0) -> None:
        self.queue.shutdown()
        if self._tasks:
            done, pending = await asyncio.wait(self._tasks, timeout=drain_timeout)
            for t in pending:
                t.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        self._tasks = []

    def abort(self) -> None:
        """Stop at once, without draining (after leadership is lost)."""
        self.queue.shutdown()
        for t in self._tasks:
            t.cancel()

    async def _worker(self) -> None:
        while True:
            req = await self.queue.get()
            if req is None:
                return
            try:
                await self._process(req)
            finally:
                self.queue.done(req)

    async def _process(self, req: Request) -> None:
        rid = uuid.uuid4().hex[:16]
        t0 = time.monotonic()
        result_label = "success"
        self.active += 1
        if self.metrics:
            self.metrics.child(self.metrics.active_workers, self.name).inc()
        span = self.tracer.start_as_current_span(f"reconcile {self.name}") if self.tracer else None
        try:
            with log_context(controller=self.name, namespace=req.namespace, name=req.name, reconcileID=rid):
                if span is not None:
                    with span as s:
                        s.set_attribute("k8s.namespace", req.namespace)
                        s.set_attribute("k8s.name", req.name)
                        result_label = await self._reconcile_one(req)
                else:
                    result_label = await self._reconcile_one(req)
        finally:
            self.active -= 1
            self.reconciles += 1
            if self.metrics:
                self.metrics.child(self.metrics.active_workers, self.name).dec()
                self.metrics.child(self.metrics.reconcile_total, self.name, result_label).inc()
                self.metrics.child(self.metrics.reconcile_time, self.name).observe(time.monotonic() - t0)

    async def _reconcile_one(self, req: Request) -> str:
        try:
            res = await self.reconcile(req)
        except TerminalError as e:
            log.error("reconcile failed permanently", extra={"error": str(e)})
            if self.metrics:
                self.metrics.reconcile_errors.labels(controller=self.name).inc()
                self.metrics.terminal_reconcile_errors.labels(controller=self.name).inc()
            return "error"
        except ApiError as e:
            if self.metrics:
                self.metrics.reconcile_errors.labels(controller=self.name).inc()
            if e.conflict:
                log.debug("conflict, requeueing with backoff", extra={"error": str(e), "requeues": self.queue.num_requeues(req)})
            else:
                log.warning("reconcile error", extra={"error": str(e), "requeues": self.queue.num_requeues(req)})
            self.queue.add_rate_limited(req)
            return "error"
        except asyncio.CancelledError:
            raise
        except Exception as e:  # a bug in one reconcile must not kill the worker
            log.exception("reconcile raised", extra={"error": repr(e)})
            if self.metrics:
                self.metrics.reconcile_errors.labels(controller=self.name).inc()
                self.metrics.reconcile_panics.labels(controller=self.name).inc()
            self.queue.add_rate_limited(req)
            return "error"
        if res is not None and res.requeue_after > 0:
            self.queue.forget(req)
            self.queue.add_after(req, res.requeue_after)
            return "requeue_after"
        if res is not None and res.requeue:
            self.queue.add_rate_limited(req)
            return "requeue"
        self.queue.forget(req)
        return "success"
