"""The manager: owns the client, the shared cache, controllers, probes and every
runnable of the process (:meth:`Manager.add_runnable`).

Start order: HTTP servers (probes, metrics) -> runnables that do not wait for
the caches (a webhook server) -> informers, wait for sync -> runnables of every
replica (a proxy) -> leader election -> leader-only runnables (controllers and
background tasks). Shutdown runs the other way round within a 30 s budget.
Losing the lease raises :class:`LeadershipLost` at once, with no graceful
phase: another replica may already be acting.

Readiness means "caches synced and no watch silent for too long"; it does
not depend on being leader, so standbys are Ready too. ``/healthz`` fails when
a leader has not renewed its lease for longer than the lease allows.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aiohttp import web

from kaiwo_ctrl.runtime.cache.cache import Cache
from kaiwo_ctrl.runtime.api.apitypes import resource_of
from kaiwo_ctrl.runtime.api.client import Client
from kaiwo_ctrl.runtime.control.controller import Controller
from kaiwo_ctrl.runtime.control.expectations import Expectations
from kaiwo_ctrl.runtime.observe.events import EventRecorder
from kaiwo_ctrl.runtime.manager.leaderelection import LeaderElector
from kaiwo_ctrl.runtime.observe.metrics import Metrics
from kaiwo_ctrl.runtime.process import heap
from kaiwo_ctrl.runtime.process.supervise import crash_looping, supervise

log = logging.getLogger("kaiwo_ctrl.runtime.manager.manager")

Check = Callable[[], "str | None"]  # None = ok, else the failure reason
Runnable = Callable[[], Coroutine[Any, Any, None]]
T = TypeVar("T")

#: When a runnable runs (:meth:`Manager.add_runnable`), in start order.
EARLY, REPLICA, LEADER = "before-caches", "every-replica", "leader"


class LeadershipLost(RuntimeError):
    pass


@dataclass
class LeaderElectionConfig:
    """The Lease ``namespace/name`` and its timings (seconds): a leader that has not
    renewed for ``renew_deadline`` (10) steps down; a standby takes an unrenewed
    lease after ``lease_duration`` (15); attempts every ``retry_period`` (2).
    ``release_on_cancel`` (True) gives the lease up on a graceful stop so a standby
    takes over at once; ``identity`` defaults to ``<hostname>_<uuid>``. The
    namespace must exist: a missing one ends :meth:`Manager.run` with
    ``LeaseNamespaceMissing`` instead of retrying forever."""

    name: str
    namespace: str
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    release_on_cancel: bool = True
    identity: str | None = None


def _check_crash_loops() -> str | None:
    looping = crash_looping()
    return f"crash-looping: {', '.join(looping)}" if looping else None


def _parse_addr(addr: str | None) -> tuple[str, int] | None:
    if not addr or addr == "0":
        return None
    host, _, port = addr.rpartition(":")
    return (host or "0.0.0.0", int(port))


@dataclass
class Manager:
    """Owns the client, the shared cache, the controllers and the probes. Options:

    * ``metrics`` (a fresh ``Metrics`` with process metrics): the registry behind
      ``/metrics``.
    * ``metrics_addr`` (":8080") and ``health_addr`` (":8081"): ``host:port`` to
      serve ``/metrics`` and ``/healthz``+``/readyz`` on; ``"0"`` or None turns one
      off; the same address serves both.
    * ``leader_election`` (None: every replica runs the controllers): see
      :class:`LeaderElectionConfig`.
    * ``shutdown_timeout`` (30 s): the budget for a graceful stop (drain the
      queues, release the lease).
    * ``cache_sync_timeout`` (120 s): how long start-up waits for the informers'
      first list before failing.
    * ``stall_threshold`` (600 s): a synced informer whose watch has been silent
      for longer makes ``/readyz`` fail (bookmarks arrive about once a minute).
    * ``component`` ("kaiwo-ctrl"): the Event source name.
    * ``trim_write_answers`` (True): the client's answers to writes come
      without ``managedFields`` (see :class:`Client`); the caches hold none.
    * ``settle_heap_every`` (600 s): after the caches sync, and then at this
      interval, the heap's survivors are frozen out of the cyclic garbage
      collector's passes (:mod:`.heap`); 0 leaves the collector as Python sets it.
    """

    client: Client
    metrics: Metrics = field(default_factory=lambda: Metrics(process_metrics=True))
    metrics_addr: str | None = ":8080"
    health_addr: str | None = ":8081"
    leader_election: LeaderElectionConfig | None = None
    shutdown_timeout: float = 30.0
    cache_sync_timeout: float = 120.0
    stall_threshold: float = 600.0
    component: str = "kaiwo-ctrl"
    settle_heap_every: float = 600.0
    trim_write_answers: bool = True
    #: Secure metrics (runtime/observe/metricsauth.py): a MetricsAuth whose ``guard``
    #: wraps the /metrics handler, and the TLS context of the metrics server.
    metrics_auth: Any = None
    metrics_ssl: Any = None

    def __post_init__(self) -> None:
        self.client.trim_write_answers = self.trim_write_answers
        self.cache = Cache(self.client, metrics=self.metrics)
        self.recorder = EventRecorder(self.client, self.component)
        self.controllers: list[Controller] = []
        self._runnables: dict[str, list[tuple[str, Runnable]]] = {EARLY: [], REPLICA: [], LEADER: []}
        #: read-your-writes: the one store of this manager's writers (runtime/control/expectations.py)
        self.expectations = Expectations()
        self._singletons: dict[type, Any] = {}
        self._health: dict[str, Check] = {"ping": lambda: None, "background-tasks": _check_crash_loops}
        self._ready: dict[str, Check] = {"ping": lambda: None, "informers-synced": self._check_synced, "watches": self._check_stalls}
        self.elector: LeaderElector | None = None
        self.is_leader = asyncio.Event()
        self.ready = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._runner_metrics: web.AppRunner | None = None
        self.bound: dict[str, int] = {}
        self._tasks: dict[str, list[asyncio.Task]] = {EARLY: [], REPLICA: [], LEADER: []}  # running, by kind
        self._hook_rest_metrics()
        if self.leader_election:  # 0 from the first scrape on every replica, 1 on the leader
            self.metrics.leader_election_master_status.labels(name=self.leader_election.name).set(0)

    # --------------------------------------------------------------- wiring
    def add_controller(self, c: Controller) -> Controller:
        if any(x.name == c.name for x in self.controllers):
            raise ValueError(f"duplicate controller name {c.name!r}")
        self.controllers.append(c)
        return c

    def new_controller(self, name: str, reconcile, **kw) -> Controller:
        return self.add_controller(Controller(name, reconcile, metrics=self.metrics, **kw))

    def add_runnable(self, name: str, fn: Runnable, *, leader: bool = False, before_caches: bool = False) -> None:
        """A task the manager starts, stops and watches, as controller-runtime's ``Runnable``:

        * ``leader=True``: only while this replica leads, after the caches sync (as
          ``LeaderElectionRunnable``); with leader election off, always;
        * default: on every replica once the caches have synced (the proxy);
        * ``before_caches=True``: on every replica before the caches start (the webhook
          server, which the API server calls whatever our caches hold); stopped last.

        ``fn`` runs until cancelled at shutdown; returning early is logged, raising stops the
        manager gracefully and :meth:`run` raises that error."""
        if leader and before_caches:
            raise ValueError(f"runnable {name!r}: a leader runnable waits for the caches")
        if any(n == name for group in self._runnables.values() for n, _ in group):
            raise ValueError(f"duplicate runnable name {name!r}")
        self._runnables[LEADER if leader else EARLY if before_caches else REPLICA].append((name, fn))

    def singleton(self, kind: type[T], make: Callable[[], T]) -> T:
        """The one ``kind`` of this manager, made by ``make`` on first use: a place for what the
        domain shares per manager (its settings accessor) without the runtime knowing it."""
        obj = self._singletons.get(kind)
        if obj is None:
            obj = self._singletons[kind] = make()
        return obj

    def add_healthz_check(self, name: str, check: Check) -> None:
        self._health[name] = check

    def add_readyz_check(self, name: str, check: Check) -> None:
        self._ready[name] = check

    def _hook_rest_metrics(self) -> None:
        host = self.client.config.host.split("://", 1)[-1]

        m = self.metrics
        child = m.child

        def hook(method: str, path: str, status: int, seconds: float) -> None:
            child(m.rest_client_requests, str(status or "<error>"), method, host).inc()
            child(m.rest_client_resource_requests, method, resource_of(path)).inc()
            if method != "WATCH":
                child(m.rest_client_request_duration, method, host).observe(seconds)

        self.client.hooks.append(hook)

    # --------------------------------------------------------------- checks
    def _check_synced(self) -> str | None:
        missing = [str(i.resource) for i in self.cache.informers if not i.has_synced]
        return f"not synced: {', '.join(missing)}" if missing else None

    def _check_stalls(self) -> str | None:
        stalled = [str(i.resource) for i in self.cache.informers if i.has_synced and i.stalled_for() > self.stall_threshold]
        return f"no watch traffic for {self.stall_threshold:.0f}s: {', '.join(stalled)}" if stalled else None

    def _check_lease(self) -> str | None:
        if self.elector is not None and not self.elector.healthy():
            return "leader lease not renewed in time"
        return None

    # ----------------------------------------------------------------- http
    async def _probe(self, checks: dict[str, Check], request: web.Request) -> web.Response:
        only = request.match_info.get("check")
        exclude = set(request.query.getall("exclude", []))
        lines, ok = [], True
        for name, fn in checks.items():
            if (only and name != only) or name in exclude:
                continue
            try:
                err = fn()
            except Exception as e:  # noqa: BLE001
                err = repr(e)
            if err:
                ok = False
                lines.append(f"[-]{name} failed: {err}")
            else:
                lines.append(f"[+]{name} ok")
        if only and not lines:
            return web.Response(status=404, text=f"no check {only}\n")
        if ok and "verbose" not in request.query:
            return web.Response(text="ok")
        body = "\n".join(lines) + ("\nhealthz check passed\n" if ok else "\nhealthz check failed\n")
        return web.Response(status=200 if ok else 500, text=body)

    async def _start_http(self) -> None:
        health = _parse_addr(self.health_addr)
        metrics = _parse_addr(self.metrics_addr)
        self.add_healthz_check("leader-lease", self._check_lease)

        async def hz(req: web.Request) -> web.Response:
            return await self._probe(self._health, req)

        async def rz(req: web.Request) -> web.Response:
            return await self._probe(self._ready, req)

        async def mx(req: web.Request) -> web.Response:
            return web.Response(body=self.metrics.render(), content_type="text/plain", charset="utf-8")

        if self.metrics_auth is not None:
            mx = self.metrics_auth.guard(mx)

        async def serve(addr: tuple[str, int], routes: list[web.RouteDef], label: str, tls: Any = None) -> web.AppRunner:
            app = web.Application()
            app.add_routes(routes)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, addr[0], addr[1], reuse_address=True, ssl_context=tls)
            await site.start()
            sock = site._server.sockets[0]  # type: ignore[union-attr]
            self.bound[label] = sock.getsockname()[1]
            return runner

        probe_routes = [web.get("/healthz", hz), web.get("/healthz/{check}", hz), web.get("/readyz", rz), web.get("/readyz/{check}", rz)]
        if health and metrics and health == metrics:
            self._runner = await serve(health, probe_routes + [web.get("/metrics", mx)], "health")
            self.bound["metrics"] = self.bound["health"]
            return
        if health:
            self._runner = await serve(health, probe_routes, "health")
        if metrics:
            self._runner_metrics = await serve(metrics, [web.get("/metrics", mx)], "metrics", self.metrics_ssl)

    async def _stop_http(self) -> None:
        for r in (self._runner, self._runner_metrics):
            if r is not None:
                await r.cleanup()

    # ------------------------------------------------------------------ run
    async def start_cache(self) -> None:
        self.cache.start()
        if not await self.cache.wait_for_sync(self.cache_sync_timeout):
            raise TimeoutError(f"caches did not sync within {self.cache_sync_timeout}s: {self._check_synced()}")
        self.ready.set()

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Run until ``stop`` is set; raises :class:`LeadershipLost` if the lease is lost, and the
        error of a runnable that fails."""
        stop = stop or asyncio.Event()
        await self._start_http()
        lost = False
        try:
            self._spawn(EARLY)
            if self.settle_heap_every:
                heap.tune()
            await self.start_cache()
            log.info("caches synced", extra={"informers": self.cache.stats()})
            if self.settle_heap_every:
                heap.settle(collect=False)
                self._tasks[REPLICA].append(supervise("settle-heap", lambda: heap.settle_every(self.settle_heap_every)))
            self._spawn(REPLICA)
            if self.leader_election:
                self.elector = self._elector(self.leader_election)
                acquire = asyncio.create_task(self.elector.acquire(), name="acquire-lease")
                try:
                    if not await self._watch(stop, acquire):
                        return
                finally:
                    if not acquire.done():
                        acquire.cancel()
                acquire.result()  # LeaseNamespaceMissing ends the run here
            await self._start_leader_work()
            holder = asyncio.create_task(self.elector.hold(), name="hold-lease") if self.elector is not None else None
            try:
                lost = await self._watch(stop, holder)
            finally:
                if holder is not None and not holder.done():
                    holder.cancel()
            if lost:
                raise LeadershipLost("leader lease lost")
        finally:
            await self._shutdown(graceful=not lost)

    def _elector(self, le: LeaderElectionConfig) -> LeaderElector:
        return LeaderElector(
            self.client,
            le.name,
            le.namespace,
            identity=le.identity,
            lease_duration=le.lease_duration,
            renew_deadline=le.renew_deadline,
            retry_period=le.retry_period,
            release_on_cancel=le.release_on_cancel,
            on_status=lambda v: self.metrics.leader_election_master_status.labels(name=le.name).set(1 if v else 0),
            on_slow_path=lambda: self.metrics.leader_election_slowpath.labels(name=le.name).inc(),
        )

    def _spawn(self, when: str) -> None:
        self._tasks[when] += [asyncio.create_task(fn(), name=name) for name, fn in self._runnables[when]]

    async def _watch(self, stop: asyncio.Event, until: asyncio.Task | None) -> bool:
        """Wait for ``stop`` (False) or ``until`` to end (True), raising the error of a runnable
        that fails meanwhile; one that returns is logged and left."""
        running = [t for tasks in self._tasks.values() for t in tasks]
        for t in running:
            if t.done() and not t.cancelled() and t.exception() is not None:
                raise t.exception()  # type: ignore[misc]
        stopper = asyncio.create_task(stop.wait(), name="stop")
        pending = {stopper, *(t for t in running if not t.done())} | ({until} if until is not None else set())
        try:
            while True:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                if until is not None and until in done:
                    return True
                if stopper in done:
                    return False
                for t in done:
                    if not t.cancelled() and t.exception() is not None:
                        raise t.exception()  # type: ignore[misc]
                    log.info("runnable finished", extra={"runnable": t.get_name()})
        finally:
            stopper.cancel()

    async def _start_leader_work(self) -> None:
        self.is_leader.set()
        for c in self.controllers:
            await c.start(self.cache_sync_timeout)
        self._spawn(LEADER)
        log.info("leader work started", extra={"controllers": [c.name for c in self.controllers]})

    async def _shutdown(self, graceful: bool) -> None:
        async def body() -> None:
            work = [*self._tasks[LEADER], *self._tasks[REPLICA]]  # a proxy stops taking requests and drains here
            for t in work:
                t.cancel()
            await asyncio.gather(*work, return_exceptions=True)
            if graceful:
                await asyncio.gather(*(c.stop(self.shutdown_timeout) for c in self.controllers))
            else:
                for c in self.controllers:
                    c.abort()
            await self.cache.stop()
            await self.recorder.close()
            if graceful and self.elector is not None and self.elector.release_on_cancel:
                await self.elector.release()
            for t in self._tasks[EARLY]:  # the webhook server answers until the rest has stopped
                t.cancel()
            await asyncio.gather(*self._tasks[EARLY], return_exceptions=True)
            await self._stop_http()

        try:
            await asyncio.wait_for(body(), self.shutdown_timeout)
        except asyncio.TimeoutError:
            log.error("graceful shutdown timed out")
        with contextlib.suppress(Exception):
            await self.client.close()
