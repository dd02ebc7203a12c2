"""Prometheus metrics of the controller runtime.

``Metrics`` owns one ``CollectorRegistry`` (its own, never the process-wide
default, so several instances -- e.g. one per test -- never collide) and
defines every series the runtime exports. Names, types, label names and
histogram buckets follow controller-runtime / client-go so that existing
dashboards and alerts keep working:

* reconcile loop: ``controller_runtime_*`` labelled by ``controller``;
  ``register_controller`` creates every label set at 0 so ``rate()`` works
  from the first scrape;
* work queues: ``workqueue_*`` labelled by ``name`` and ``controller`` (both
  carry the queue's name); ``Metrics.workqueue(name)`` returns the small
  adaptor a ``WorkQueue`` reports through;
* leader election, REST client, and informer series (the informer ones are
  our own design, prefixed ``informer_``, labelled by ``kind``). ``Metrics``
  also has the four ``informer_*`` hook methods an informer reports through
  (``informer_event``, ``informer_objects``, ``informer_relist``,
  ``informer_watch_restart``), so it can be handed to an informer directly.

Counters are declared without the ``_total`` suffix because prometheus_client
appends it on exposition. The library also produces ``*_created`` samples for
counters and histograms, which the Go exporters do not have; turning them off
in the library is process-global state, so ``render()`` filters them out of
its output instead (the registry itself still holds them).

``render()`` produces the text exposition for a ``/metrics`` handler.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client import PlatformCollector, ProcessCollector
from prometheus_client.metrics_core import Metric

__all__ = [
    "CONTENT_TYPE",
    "RECONCILE_RESULTS",
    "RECONCILE_TIME_BUCKETS",
    "WORKQUEUE_DURATION_BUCKETS",
    "REST_CLIENT_LATENCY_BUCKETS",
    "Metrics",
    "WorkQueueMetrics",
]

CONTENT_TYPE = CONTENT_TYPE_LATEST

RECONCILE_RESULTS: tuple[str, ...] = ("success", "error", "requeue", "requeue_after")


def _steps(start: str, stop: str, step: str) -> list[float]:
    """Evenly spaced bucket bounds computed in integer thousandths (no float drift)."""
    a, b, s = (round(float(x) * 1000) for x in (start, stop, step))
    return [v / 1000 for v in range(a, b + 1, s)]


RECONCILE_TIME_BUCKETS: tuple[float, ...] = tuple(
    [0.005, 0.01, 0.025, 0.05]
    + _steps("0.1", "0.5", "0.05")
    + _steps("0.6", "1.0", "0.1")
    + [1.25, 1.5, 1.75, 2.0]
    + _steps("2.5", "5", "0.5")
    + _steps("6", "10", "1")
    + [15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 60.0]
)

# 10 ns ... 1000 s, factor 10, 12 bounds (written as decimal literals so that
# the bounds print exactly).
WORKQUEUE_DURATION_BUCKETS: tuple[float, ...] = tuple(float(f"1e{e}") for e in range(-8, 4))

REST_CLIENT_LATENCY_BUCKETS: tuple[float, ...] = (
    0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0,
)  # fmt: skip


class WorkQueueMetrics:
    """Per-queue reporting surface used by ``WorkQueue``.

    The queue measures times with its own clock and only hands seconds over,
    so the metrics never depend on wall-clock time. The two in-flight gauges
    are computed when the registry is collected, by calling back into the
    queue (held weakly so a dropped queue is not kept alive by its metrics).
    """

    def __init__(self, metrics: Metrics, name: str) -> None:
        labels = {"name": name, "controller": name}
        self.name = name
        self._depth = metrics.workqueue_depth.labels(**labels)
        self._adds = metrics.workqueue_adds.labels(**labels)
        self._queue_duration = metrics.workqueue_queue_duration.labels(**labels)
        self._work_duration = metrics.workqueue_work_duration.labels(**labels)
        self._retries = metrics.workqueue_retries.labels(**labels)
        self._unfinished = metrics.workqueue_unfinished_work.labels(**labels)
        self._longest = metrics.workqueue_longest_running_processor.labels(**labels)
        self._unfinished.set(0)
        self._longest.set(0)

    def add(self) -> None:
        self._adds.inc()

    def set_depth(self, depth: int) -> None:
        self._depth.set(depth)

    def observe_queue_duration(self, seconds: float) -> None:
        self._queue_duration.observe(max(0.0, seconds))

    def observe_work_duration(self, seconds: float) -> None:
        self._work_duration.observe(max(0.0, seconds))

    def retry(self) -> None:
        self._retries.inc()

    def bind_in_flight(
        self,
        unfinished: Callable[[], float],
        longest: Callable[[], float],
    ) -> None:
        """Make the two in-flight gauges read ``unfinished()`` / ``longest()`` on
        every collection. Bound methods are held weakly."""
        self._unfinished.set_function(_weak_reader(unfinished))
        self._longest.set_function(_weak_reader(longest))


def _weak_reader(fn: Callable[[], float]) -> Callable[[], float]:
    if hasattr(fn, "__self__") and hasattr(fn, "__func__"):
        ref = weakref.WeakMethod(fn)

        def read() -> float:
            target = ref()
            return float(target()) if target is not None else 0.0

        return read
    return lambda: float(fn())


class Metrics:
    """All runtime metrics, registered in one (isolated) registry."""

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        process_metrics: bool = False,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._wall_clock = wall_clock
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry
        if process_metrics:
            ProcessCollector(registry=r)
            PlatformCollector(registry=r)

        self._reconcile_metrics(r)
        self._workqueue_metrics(r)
        self._leader_election_metrics(r)
        self._rest_client_metrics(r)
        self._informer_metrics(r)

        self._workqueues: dict[str, WorkQueueMetrics] = {}
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}

    def _reconcile_metrics(self, r: CollectorRegistry) -> None:
        """Reconcile loop: results, errors, durations, workers (controller-runtime's names)."""
        self.reconcile_total = Counter(
            "controller_runtime_reconcile",
            "Total number of reconciliations per controller",
            ["controller", "result"],
            registry=r,
        )
        self.reconcile_errors = Counter(
            "controller_runtime_reconcile_errors",
            "Total number of reconciliation errors per controller",
            ["controller"],
            registry=r,
        )
        self.terminal_reconcile_errors = Counter(
            "controller_runtime_terminal_reconcile_errors",
            "Total number of terminal reconciliation errors per controller",
            ["controller"],
            registry=r,
        )
        self.reconcile_panics = Counter(
            "controller_runtime_reconcile_panics",
            "Total number of reconciliation panics (unexpected exceptions) per controller",
            ["controller"],
            registry=r,
        )
        self.reconcile_timeouts = Counter(
            "controller_runtime_reconcile_timeouts",
            "Total number of reconciliations cut off by the runtime's own timeout per controller",
            ["controller"],
            registry=r,
        )
        self.reconcile_time = Histogram(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            ["controller"],
            buckets=RECONCILE_TIME_BUCKETS,
            registry=r,
        )
        self.max_concurrent_reconciles = Gauge(
            "controller_runtime_max_concurrent_reconciles",
            "Maximum number of concurrent reconciles per controller",
            ["controller"],
            registry=r,
        )
        self.active_workers = Gauge(
            "controller_runtime_active_workers",
            "Number of currently used workers per controller",
            ["controller"],
            registry=r,
        )

    def _workqueue_metrics(self, r: CollectorRegistry) -> None:
        """Work queues (client-go's names)."""
        wq = ["name", "controller"]
        self.workqueue_depth = Gauge(
            "workqueue_depth", "Current depth of workqueue", wq, registry=r
        )
        self.workqueue_adds = Counter(
            "workqueue_adds", "Total number of adds handled by workqueue", wq, registry=r
        )
        self.workqueue_queue_duration = Histogram(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            wq,
            buckets=WORKQUEUE_DURATION_BUCKETS,
            registry=r,
        )
        self.workqueue_work_duration = Histogram(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes",
            wq,
            buckets=WORKQUEUE_DURATION_BUCKETS,
            registry=r,
        )
        self.workqueue_unfinished_work = Gauge(
            "workqueue_unfinished_work_seconds",
            "Sum of the ages in seconds of all items currently being processed; "
            "a steady rise with no work_duration observations means a stuck worker",
            wq,
            registry=r,
        )
        self.workqueue_longest_running_processor = Gauge(
            "workqueue_longest_running_processor_seconds",
            "Age in seconds of the oldest item currently being processed",
            wq,
            registry=r,
        )
        self.workqueue_retries = Counter(
            "workqueue_retries", "Total number of retries handled by workqueue", wq, registry=r
        )

    def _leader_election_metrics(self, r: CollectorRegistry) -> None:
        """Leader election."""
        self.leader_election_master_status = Gauge(
            "leader_election_master_status",
            "1 while this process holds the named lease, 0 otherwise",
            ["name"],
            registry=r,
        )
        self.leader_election_slowpath = Counter(
            "leader_election_slowpath",
            "Lease renewals that needed a full read-modify-write instead of the fast path",
            ["name"],
            registry=r,
        )

    def _rest_client_metrics(self, r: CollectorRegistry) -> None:
        """REST client requests (client-go's names, plus requests by resource)."""
        self.rest_client_requests = Counter(
            "rest_client_requests",
            "Number of HTTP requests, partitioned by status code, method, and host",
            ["code", "method", "host"],
            registry=r,
        )
        self.rest_client_request_duration = Histogram(
            "rest_client_request_duration_seconds",
            "Request latency in seconds, partitioned by verb and host",
            ["verb", "host"],
            buckets=REST_CLIENT_LATENCY_BUCKETS,
            registry=r,
        )
        self.rest_client_resource_requests = Counter(
            "rest_client_resource_requests",
            "HTTP requests by method and API resource (plural, with /subresource), e.g. to tell "
            "lease renewals from workload writes",
            ["method", "resource"],
            registry=r,
        )

    def _informer_metrics(self, r: CollectorRegistry) -> None:
        """Informers (our own design)."""
        self.informer_object_count = Gauge(
            "informer_objects",
            "Number of objects currently held in the informer cache",
            ["kind"],
            registry=r,
        )
        self.informer_watch_restarts = Counter(
            "informer_watch_restarts",
            "Watch streams re-opened, by reason (timeout, closed, error, gone)",
            ["kind", "reason"],
            registry=r,
        )
        self.informer_relists = Counter(
            "informer_relists",
            "Full lists performed, by reason (initial, gone, error, resync)",
            ["kind", "reason"],
            registry=r,
        )
        self.informer_skipped_objects = Counter(
            "informer_skipped_objects",
            "Objects left out of the cache, nested too deeply to decode or encode (once per object version)",
            ["kind"],
            registry=r,
        )
        self.informer_events = Counter(
            "informer_events",
            "Watch events received, by event type",
            ["kind", "type"],
            registry=r,
        )
        self.informer_last_event_timestamp = Gauge(
            "informer_last_event_timestamp_seconds",
            "Unix time of the last watch event (including bookmarks) received",
            ["kind"],
            registry=r,
        )

    # ------------------------------------------------------------------------

    def child(self, metric: Any, *values: str) -> Any:
        """``metric.labels(*values)`` (values in the metric's label order),
        memoised: ``labels()`` checks and joins its arguments on every call,
        which showed up per request and per watch event. Label sets are bounded
        by each metric's design, so the memo is too."""
        key = (id(metric), values)
        c = self._children.get(key)
        if c is None:
            c = self._children[key] = metric.labels(*values)
        return c

    def register_controller(self, name: str, workers: int) -> None:
        """Create every per-controller series at its initial value."""
        for result in RECONCILE_RESULTS:
            self.reconcile_total.labels(controller=name, result=result)
        self.reconcile_errors.labels(controller=name)
        self.terminal_reconcile_errors.labels(controller=name)
        self.reconcile_panics.labels(controller=name)
        self.reconcile_timeouts.labels(controller=name)
        self.reconcile_time.labels(controller=name)
        self.max_concurrent_reconciles.labels(controller=name).set(workers)
        self.active_workers.labels(controller=name).set(0)

    def workqueue(self, name: str) -> WorkQueueMetrics:
        """The adaptor for the queue called ``name`` (one per name)."""
        adaptor = self._workqueues.get(name)
        if adaptor is None:
            adaptor = self._workqueues[name] = WorkQueueMetrics(self, name)
        return adaptor

    # -- informer hook (what an informer calls; kind = the informer's name) --

    def informer_event(self, kind: str, event_type: str) -> None:
        """A watch event arrived: count it and stamp the time (Unix seconds)."""
        self.child(self.informer_events, kind, event_type).inc()
        self.child(self.informer_last_event_timestamp, kind).set(self._wall_clock())

    def informer_objects(self, kind: str, count: int) -> None:
        self.informer_object_count.labels(kind=kind).set(count)

    def informer_relist(self, kind: str, reason: str) -> None:
        self.informer_relists.labels(kind=kind, reason=reason).inc()

    def informer_skipped(self, kind: str) -> None:
        self.informer_skipped_objects.labels(kind=kind).inc()

    def informer_watch_restart(self, kind: str, reason: str) -> None:
        self.informer_watch_restarts.labels(kind=kind, reason=reason).inc()

    def render(self) -> bytes:
        """Text exposition of everything in the registry."""
        return generate_latest(_WithoutCreated(self.registry))


class _WithoutCreated:
    """A read-only view of a registry that drops ``*_created`` samples."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterator[Metric]:
        for family in self._registry.collect():
            if family.type in ("counter", "histogram", "summary", "gaugehistogram"):
                trimmed = Metric(family.name, family.documentation, family.type, family.unit)
                trimmed.samples = [s for s in family.samples if not s.name.endswith("_created")]
                yield trimmed
            else:
                yield family
