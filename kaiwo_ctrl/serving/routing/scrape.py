"""Read each Ready server Pod's engine metrics, so routing sees the engines' own load.

Every proxy replica runs one :class:`EngineScraper` over the endpoints it
routes to (every Ready server Pod its tracker knows). Every ``interval`` each
endpoint that is due is read: ``GET /metrics`` on the Pod's serving port (where
vLLM serves it), parsed by :mod:`.enginemetrics`, and the sample is put on the
endpoint, fresh for ``stale_after`` (3 intervals by default). Routing scores
fresh samples (:mod:`.score`) and falls back to this replica's in-flight
counts, per Pod, for the rest.

Bounded cost, hostile answers:

* one keep-alive connection per Pod, one scrape at a time per Pod (a scrape
  still running when the next tick comes is not doubled);
* ``timeout`` bounds the connect and the whole exchange;
* at most ``max_bytes`` of body are read; a longer answer is cut off and counts
  as an error (reason ``too_large``);
* a failed scrape (refused, timeout, non-200, too large, no known series, an
  impossible value) drops the endpoint's sample at once -- it falls back -- and
  the Pod is read again after a back-off doubling from ``interval`` up to
  ``max_backoff`` (an engine without metrics costs one request per 30 s).

Series (labels ``model_namespace``, ``model_name``; per Pod also ``pod``):
``kaiwo_proxy_engine_requests_running``, ``kaiwo_proxy_engine_requests_waiting``,
``kaiwo_proxy_engine_kv_cache_usage_ratio``, ``kaiwo_proxy_engine_data_age_seconds``
(since the last good read; absent before the first) and
``kaiwo_proxy_engine_scrape_errors_total{reason}``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge

from kaiwo_ctrl.runtime.net.fetch import AnswerTooLarge, read_capped
from kaiwo_ctrl.runtime.net.http1 import Pool
from kaiwo_ctrl.runtime.manager.manager import Manager
from kaiwo_ctrl.serving.routing.balance import Endpoint
from kaiwo_ctrl.serving.routing.endpoints import EndpointTracker, GroupKey
from kaiwo_ctrl.serving.routing.enginemetrics import BadMetrics, parse_engine_metrics
from kaiwo_ctrl.serving.routing.score import fresh

log = logging.getLogger("kaiwo_ctrl.serving.routing.scrape")

_LABELS = ("model_namespace", "model_name", "pod")
_ACCEPT = [(b"Accept", b"text/plain")]


@dataclass
class ScrapeConfig:
    interval: float = 1.0
    timeout: float = 0.5
    max_bytes: int = 4 * 1024 * 1024
    stale_after: float = 0.0  # 0: three intervals
    max_backoff: float = 30.0

    def __post_init__(self) -> None:
        if self.stale_after <= 0:
            self.stale_after = 3 * self.interval


class ScrapeFailed(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class _Pod:
    address: str
    failures: int = 0
    due: float = 0.0
    last_ok: float | None = None
    task: asyncio.Task[None] | None = None
    labels: tuple[str, str, str] = ("", "", "")
    series: bool = False  # per-Pod gauges exist


@dataclass
class _Series:
    running: Gauge
    waiting: Gauge
    kv: Gauge
    age: Gauge
    errors: Counter
    all: list[Gauge] = field(default_factory=list)


def _series(registry: CollectorRegistry) -> _Series:
    r = registry
    s = _Series(
        Gauge("kaiwo_proxy_engine_requests_running", "Running requests the engine reported", _LABELS, registry=r),
        Gauge("kaiwo_proxy_engine_requests_waiting", "Waiting requests the engine reported", _LABELS, registry=r),
        Gauge("kaiwo_proxy_engine_kv_cache_usage_ratio", "KV-cache use the engine reported (0..1)", _LABELS, registry=r),
        Gauge("kaiwo_proxy_engine_data_age_seconds", "Seconds since the engine's metrics were last read", _LABELS, registry=r),
        Counter("kaiwo_proxy_engine_scrape_errors", "Failed engine metric reads", ("model_namespace", "model_name", "reason"),
                registry=r),
    )
    s.all = [s.running, s.waiting, s.kv, s.age]
    return s


class EngineScraper:
    def __init__(self, tracker: EndpointTracker, registry: CollectorRegistry, config: ScrapeConfig | None = None) -> None:
        self.tracker, self.config = tracker, config or ScrapeConfig()
        self.metrics = _series(registry)
        self.pods: dict[str, _Pod] = {}
        t = self.config.timeout
        self.pool = Pool(connect_timeout=t, read_timeout=t, idle_timeout=max(10.0, 3 * self.config.interval), max_idle_per_host=1)

    async def run(self) -> None:
        """Scrape until cancelled; nothing an engine answers stops it."""
        try:
            while True:
                try:
                    self.tick()
                except Exception:  # a bug in one tick must not end engine-aware routing
                    log.exception("engine scrape tick failed")
                await asyncio.sleep(self.config.interval)
        finally:
            for p in self.pods.values():
                if p.task is not None:
                    p.task.cancel()
            await self.pool.close()

    def tick(self) -> None:
        """Start the scrapes that are due; refresh ages; forget Pods that left."""
        now = time.monotonic()
        seen: set[str] = set()
        for gk, group in list(self.tracker.groups.items()):
            for ep in list(group.endpoints.values()):
                seen.add(ep.key)
                pod = self.pods.get(ep.key)
                if pod is None or pod.address != ep.address:
                    if pod is not None and pod.task is not None:
                        pod.task.cancel()
                    pod = self.pods[ep.key] = _Pod(ep.address, labels=(gk[0], gk[1], ep.key.partition("/")[2]))
                if pod.last_ok is not None:
                    self.metrics.age.labels(*pod.labels).set(round(now - pod.last_ok, 3))
                if (pod.task is None or pod.task.done()) and now >= pod.due:
                    pod.task = asyncio.create_task(self._scrape(gk, ep, pod))
        for key in set(self.pods) - seen:
            self._forget(self.pods.pop(key))

    def _forget(self, pod: _Pod) -> None:
        if pod.task is not None:
            pod.task.cancel()
        if pod.series:
            for g in self.metrics.all:
                try:
                    g.remove(*pod.labels)
                except KeyError:
                    pass

    async def _scrape(self, gk: GroupKey, ep: Endpoint, pod: _Pod) -> None:
        base = ep.in_flight
        try:
            async with asyncio.timeout(self.config.timeout):
                body = await self._read(ep.address)
            sample = parse_engine_metrics(body)
            if sample is None:
                raise ScrapeFailed("no_series")
        except (ScrapeFailed, BadMetrics, OSError, TimeoutError) as e:
            reason = e.reason if isinstance(e, ScrapeFailed) else "invalid" if isinstance(e, BadMetrics) else (
                "timeout" if isinstance(e, TimeoutError) else "connect")
            self._failed(gk, ep, pod, reason)
            return
        now = time.monotonic()
        ep.engine, ep.engine_until, ep.in_flight_base = sample, now + self.config.stale_after, base
        pod.failures, pod.due, pod.last_ok, pod.series = 0, 0.0, now, True
        m = self.metrics
        m.running.labels(*pod.labels).set(sample.running)
        m.waiting.labels(*pod.labels).set(sample.waiting)
        m.kv.labels(*pod.labels).set(sample.kv)
        m.age.labels(*pod.labels).set(0.0)

    def _failed(self, gk: GroupKey, ep: Endpoint, pod: _Pod, reason: str) -> None:
        ep.engine = None  # back to this replica's in-flight count for this Pod
        pod.failures += 1
        pod.due = time.monotonic() + min(self.config.interval * 2 ** min(pod.failures, 16), self.config.max_backoff)
        self.metrics.errors.labels(gk[0], gk[1], reason).inc()
        if pod.failures == 1:
            log.debug("engine metrics not read", extra={"pod": ep.key, "reason": reason})

    async def _read(self, address: str) -> bytes:
        resp = await self.pool.request("GET", address, "/metrics", _ACCEPT)
        try:
            if resp.status != 200:
                raise ScrapeFailed(f"status_{resp.status // 100}xx")
            try:
                return await read_capped(resp, self.config.max_bytes)
            except AnswerTooLarge:
                raise ScrapeFailed("too_large") from None
        finally:
            resp.release()

    def model_loads(self) -> dict[str, float]:
        """Running + waiting requests per ``<namespace>/<name>``, for Models whose every endpoint reported freshly."""
        now = time.monotonic()
        out: dict[str, float] = {}
        for (ns, name), group in self.tracker.groups.items():
            eps = list(group.endpoints.values())
            if eps and all(fresh(ep, now) for ep in eps):
                out[f"{ns}/{name}"] = sum(ep.engine.running + ep.engine.waiting for ep in eps if ep.engine is not None)
        return out


def attach_scraper(mgr: Manager, tracker: EndpointTracker, config: ScrapeConfig) -> EngineScraper | None:
    """An engine scraper of the endpoints in ``tracker``, a runnable of ``mgr`` on every replica
    beside the proxy; None when ``interval`` is 0 (off)."""
    if config.interval <= 0:
        return None
    scraper = EngineScraper(tracker, mgr.metrics.registry, config)
    mgr.add_runnable("proxy-engine-scraper", scraper.run)  # every replica routes, leader or not
    return scraper
