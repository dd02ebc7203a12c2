"""The GPU resource monitor runnable (flags workloads whose GPUs sit idle) and
its start-up configuration (the RESOURCE_MONITORING_* environment).

A leader-only background task. Every polling interval it scrapes the GPU
metrics exporter (Prometheus text format, 5 s timeout, answers up to 32 MiB,
through the runtime's HTTP client), reads Pods,
KaiwoJobs, KaiwoServices and the KaiwoConfig from the manager's shared
informer caches, and lets :func:`kaiwo_ctrl.monitoring.gpu.decide` say what to
do. Status writes go through the one status write every writer uses
(:meth:`~kaiwo_ctrl.runtime.control.expectations.Expectations.write_status`: the full
conditions list, guarded by the resourceVersion read from the cache), not
marked as the workload's own so its reconcile acts on them, and are only made
when the status changes: an unchanged world writes nothing.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone

from prometheus_client import Gauge
from pydantic import ValidationError

from kaiwo_ctrl.kinds import KAIWOJOBS, KAIWOSERVICES
from kaiwo_ctrl.runtime.api.client import ApiError, Resource
from kaiwo_ctrl.runtime.cache.informer import Informer
from kaiwo_ctrl.runtime.manager.manager import Manager
from kaiwo_ctrl.runtime.net.fetch import FETCH_ERRORS, Fetcher
from kaiwo_ctrl.settings import ConfigMissing, settings_for
from kaiwo_ctrl.workloads.reconcile.caches import pod_informer

from .envsettings import endpoint_and_interval
from .gpu import METRIC, MonitoringSettings, WorkloadRef, decide, filter_namespaces, group_by_workload, matches, parse_samples

log = logging.getLogger("kaiwo_ctrl.monitoring")

ENV_ENABLED = "RESOURCE_MONITORING_ENABLED"
ENV_ENDPOINT = "RESOURCE_MONITORING_METRICS_ENDPOINT"
ENV_INTERVAL = "RESOURCE_MONITORING_POLLING_INTERVAL"
COMPONENT = "KaiwoResourceMonitor"
RUNNABLE = "resource-monitor"
SCRAPE_TIMEOUT = 5.0
#: Largest exposition read from the exporter (a cluster's worth of GPUs is far smaller).
MAX_SCRAPE_BYTES = 32 << 20

RESOURCES: dict[str, Resource] = {"KaiwoJob": KAIWOJOBS, "KaiwoService": KAIWOSERVICES}


class MonitoringConfigError(ValueError):
    """The RESOURCE_MONITORING_* environment is unusable (start-up fails)."""


@dataclass(frozen=True)
class MonitorEnv:
    endpoint: str
    interval: float  # seconds


def read_env(environ: Mapping[str, str] | None = None) -> MonitorEnv | None:
    """The monitor's settings, or None unless RESOURCE_MONITORING_ENABLED=true.

    Enabled means ``RESOURCE_MONITORING_ENABLED`` is exactly ``true``; then a
    missing or non-HTTP endpoint, or a missing, unparseable or non-positive
    polling interval, raises :class:`MonitoringConfigError`.
    """
    env = os.environ if environ is None else environ
    if env.get(ENV_ENABLED) != "true":
        return None
    endpoint, interval = endpoint_and_interval(env, ENV_ENABLED, ENV_ENDPOINT, ENV_INTERVAL, None, MonitoringConfigError)
    return MonitorEnv(endpoint, interval)


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


class ResourceMonitor:
    """One scrape-and-decide pass per interval, on the leader only."""

    def __init__(
        self,
        mgr: Manager,
        endpoint: str,
        interval: float,
        *,
        clock: Callable[[], datetime] = _utcnow,
        scrape_timeout: float = SCRAPE_TIMEOUT,
    ) -> None:
        self.mgr = mgr
        self.endpoint = endpoint
        self.interval = interval
        self.clock = clock
        self.scrape_timeout = scrape_timeout
        self.settings = settings_for(mgr)
        # the workload package declares the one Pod informer (selector, transform, indexes)
        self.pods: Informer = pod_informer(mgr)
        self.own: dict[str, Informer] = {kind: mgr.cache.informer(res) for kind, res in RESOURCES.items()}
        self.recorder = mgr.recorder.for_component(COMPONENT)
        #: read-your-writes, shared with the workload reconcilers
        self.expectations = mgr.expectations
        self.ticks = 0
        self.status_writes = 0
        #: kaiwo_workload_gpu_utilization (set by setup(); None for a monitor built without a registry)
        self.utilization: Gauge | None = None
        self.last_error: str | None = None

    # ------------------------------------------------------------------ loop
    async def run(self) -> None:
        async with Fetcher() as http:
            while True:
                try:
                    await self.tick(http)
                except asyncio.CancelledError:
                    raise
                except Exception as e:  # one bad tick must not stop the monitor
                    self.last_error = repr(e)[:500]
                    log.exception("resource monitor tick failed")
                self.ticks += 1
                await asyncio.sleep(self.interval)

    async def scrape(self, http: Fetcher) -> str | None:
        try:
            r = await http.get(self.endpoint, timeout=self.scrape_timeout, max_bytes=MAX_SCRAPE_BYTES)
        except FETCH_ERRORS as e:
            self.last_error = f"scrape failed: {e!r}"[:500]
            log.warning("metrics scrape failed", extra={"endpoint": self.endpoint, "error": repr(e)[:300]})
            return None
        if r.status != 200:
            self.last_error = f"scrape answered {r.status}"
            log.warning("metrics scrape answered an error", extra={"endpoint": self.endpoint, "code": r.status})
            return None
        return r.text()

    async def tick(self, http: Fetcher) -> None:
        """One pass: read the config, scrape, group samples by workload and
        decide each (``last_error`` says why a tick was skipped)."""
        self.last_error = None
        try:
            config = self.settings.current()
        except (ConfigMissing, ValidationError) as e:
            self.last_error = f"config: {e}"[:500]
            log.warning("resource monitor: KaiwoConfig unreadable, tick skipped", extra={"error": str(e)[:300]})
            return
        settings = MonitoringSettings.of(config.spec.resource_monitoring)
        text = await self.scrape(http)
        if text is None:
            return
        try:
            samples = parse_samples(text)
        except ValueError as e:
            self.last_error = f"unparseable exposition: {e}"[:500]
            log.warning("metrics exposition unparseable, tick skipped", extra={"endpoint": self.endpoint, "error": str(e)[:300]})
            return
        samples = filter_namespaces(samples, settings.target_namespaces)
        groups = group_by_workload(samples, lambda ns, name: self.pods.get(name, ns))
        self._export_utilization(groups)
        now = self.clock()
        for ref, group in groups.items():
            await self._handle(ref, group, settings, now)

    def _export_utilization(self, groups: Mapping[WorkloadRef, list]) -> None:
        """Mean GPU activity of each workload's samples in this scrape (workloads gone drop out)."""
        if self.utilization is None:
            return
        self.utilization.clear()
        for ref, group in groups.items():
            if group:
                self.utilization.labels(ref.kind, ref.namespace, ref.name).set(sum(s.value for s in group) / len(group))

    # -------------------------------------------------------------- workload
    def _workload(self, ref: WorkloadRef) -> dict | None:
        """From the cache, or what we last wrote while the cache lags behind it."""
        cached = self.own[ref.kind].get(ref.name, ref.namespace)
        return self.expectations.view((ref.kind, ref.namespace, ref.name), cached)

    async def _handle(self, ref: WorkloadRef, samples: list, settings: MonitoringSettings, now: datetime) -> None:
        workload = self._workload(ref)
        if not matches(ref, workload):
            return
        assert workload is not None
        decision = decide(workload, samples, settings, now)
        if decision.status is not None:
            try:
                # not the workload's own controller: its reconcile must see this change
                result = await self.expectations.write_status(
                    (ref.kind, ref.namespace, ref.name),
                    workload,
                    decision.status,
                    lambda patch: self.mgr.client.patch_status(RESOURCES[ref.kind], ref.name, patch, ref.namespace),
                    own=False,
                )
            except ApiError as e:
                if e.conflict or e.not_found:
                    # changed or gone since the cache saw it: the next tick decides again
                    log.info("resource monitor: status write skipped", extra={"workload": f"{ref.namespace}/{ref.name}", "code": e.status})
                    return
                raise
            self.status_writes += 1
            workload = result
            if decision.terminating:
                log.info("workload flagged for termination: GPUs underutilized", extra={"workload": f"{ref.namespace}/{ref.name}"})
        for type_, reason, message in decision.events:
            self.recorder.event(workload, type_, reason, message)


def setup(mgr: Manager, *, environ: Mapping[str, str] | None = None, clock: Callable[[], datetime] = _utcnow) -> ResourceMonitor | None:
    """Register the monitor as a leader-only runnable when
    ``RESOURCE_MONITORING_ENABLED=true``; raise :class:`MonitoringConfigError`
    (start-up fails) when its endpoint or interval is missing or bad."""
    env = read_env(environ)
    if env is None:
        return None
    monitor = ResourceMonitor(mgr, env.endpoint, env.interval, clock=clock)
    monitor.utilization = Gauge(
        "kaiwo_workload_gpu_utilization", f"Mean {METRIC} of a workload's GPUs at the resource monitor's last scrape (percent)",
        ["kind", "namespace", "name"], registry=mgr.metrics.registry,
    )
    mgr.add_runnable(RUNNABLE, monitor.run, leader=True)
    mgr.resource_monitor = monitor  # type: ignore[attr-defined]
    log.info("resource monitoring enabled", extra={"endpoint": env.endpoint, "interval_seconds": env.interval})
    return monitor
