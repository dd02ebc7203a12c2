"""Lean Prometheus series for a per-request hot path: plain numbers, read when scraped.

prometheus_client's counters, gauges and histograms take a lock and run several
checks on every update: about 1 µs each, five of them per proxied request. The
series here are updated with plain arithmetic on the labelled child (memoised
per label set) and turned into metric families only when the registry is
collected. Names, types, label names, buckets and the text exposition are those
prometheus_client gives (counters without ``_total`` in their name; it is added
on exposition; no ``*_created`` samples).

They are for one thread: updated from the event loop and read by a ``/metrics``
handler on that loop. A reader on another thread sees each number whole, but a
histogram's sum may be one observation ahead of its buckets.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString


class Value:
    """One counter or gauge series; ``value`` may also be changed in place."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1) -> None:
        self.value += amount

    def dec(self, amount: float = 1) -> None:
        self.value -= amount

    def set(self, value: float) -> None:
        self.value = float(value)


class Observations:
    """One histogram series: per-bucket counts (not cumulative; the last is +Inf) and their sum."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, amount: float) -> None:
        self.counts[bisect_left(self.bounds, amount)] += 1  # the first bucket whose bound is >= amount
        self.sum += amount


class _Family(Collector):
    kind = ""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = (), *, registry: CollectorRegistry) -> None:
        self.name, self.documentation, self.labelnames = name, documentation, tuple(labelnames)
        self._children: dict[tuple[str, ...], Value | Observations] = {}
        registry.register(self)

    def _new(self) -> Value | Observations:
        return Value()

    def _child(self, values: tuple[str, ...]) -> Value | Observations:
        c = self._children.get(values)
        if c is None:
            if len(values) != len(self.labelnames):
                raise ValueError(f"{self.name}: {len(self.labelnames)} label values expected, got {len(values)}")
            c = self._children[values] = self._new()
        return c

    def describe(self) -> list[Metric]:
        return [self._family()]

    def _family(self) -> Metric:
        raise NotImplementedError

    def collect(self) -> Iterator[Metric]:
        f = self._family()
        children = self._children or ({(): self._new()} if not self.labelnames else {})
        for values, c in list(children.items()):
            self._add(f, list(values), c)
        yield f

    def _add(self, family: Metric, values: list[str], child: Value | Observations) -> None:
        family.add_metric(values, child.value)  # type: ignore[attr-defined,union-attr]


class LeanCounter(_Family):
    def labels(self, *values: str) -> Value:
        return self._child(values)  # type: ignore[return-value]

    def inc(self, amount: float = 1) -> None:
        self.labels().value += amount

    def _family(self) -> Metric:
        return CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)


class LeanGauge(LeanCounter):
    def _family(self) -> Metric:
        return GaugeMetricFamily(self.name, self.documentation, labels=self.labelnames)


class LeanHistogram(_Family):
    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = (), *, buckets: Sequence[float],
                 registry: CollectorRegistry) -> None:
        self.bounds = tuple(sorted(float(b) for b in buckets if b != float("inf")))
        super().__init__(name, documentation, labelnames, registry=registry)

    def _new(self) -> Observations:
        return Observations(self.bounds)

    def labels(self, *values: str) -> Observations:
        return self._child(values)  # type: ignore[return-value]

    def observe(self, amount: float) -> None:
        self.labels().observe(amount)

    def _family(self) -> Metric:
        return HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def _add(self, family: Metric, values: list[str], child: Value | Observations) -> None:
        assert isinstance(child, Observations)
        counts, total, buckets = list(child.counts), child.sum, []
        running = 0
        for bound, n in zip((*self.bounds, float("inf")), counts):
            running += n
            buckets.append((floatToGoString(bound), running))
        family.add_metric(values, buckets, total)  # type: ignore[attr-defined]
