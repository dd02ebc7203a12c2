"""Fair queuing (issue #41): a namespace's weight from its annotation or its ClusterQueue's fair-sharing weight in the
KaiwoQueueConfig, the trimmed Namespace that carries it, and the saturation Events on the Model (one per transition,
at most one per interval)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from kaiwo_ctrl.serving.routing.fairevents import SaturationEvents
from kaiwo_ctrl.serving.routing.fairqueue import MAX_WEIGHT, FairQueue
from kaiwo_ctrl.serving.routing.weights import MAX_QUEUE_NAMESPACES, NamespaceWeights, parse_weight, queue_weight, queue_weights
from kaiwo_ctrl.settings.namespaces import SERVING_WEIGHT_ANNOTATION, trim_namespace
from kaiwo_ctrl.settings.priority import ANNOTATION as PRIORITY_ANNOTATION


@pytest.mark.parametrize("raw, expected", [
    ("1", 1), ("3", 3), (" 7 ", 7), (str(MAX_WEIGHT), MAX_WEIGHT),
    ("0", None), ("-2", None), (str(MAX_WEIGHT + 1), None), ("2.5", None), ("three", None), ("", None),
    ("9" * 40, None), (None, None), (3, None),
])
def test_parse_weight(raw: object, expected: int | None) -> None:
    assert parse_weight(raw) == expected


class Namespaces:
    def __init__(self, annotations: dict[str, dict[str, str]]) -> None:
        self.items = {name: trim_namespace({"metadata": {"name": name, "annotations": a, "labels": {"x": "y"}}})
                      for name, a in annotations.items()}

    def get(self, name: str) -> dict | None:
        return self.items.get(name)


def test_weights_from_the_namespace_annotation(caplog: pytest.LogCaptureFixture) -> None:
    w = NamespaceWeights(Namespaces({"heavy": {SERVING_WEIGHT_ANNOTATION: "3"}, "plain": {},
                                     "bad": {SERVING_WEIGHT_ANNOTATION: "lots"}}))
    assert [w("heavy"), w("plain"), w("no-such-namespace"), w("")] == [3, 1, 1, 1]
    with caplog.at_level(logging.WARNING, logger="kaiwo_ctrl.serving.routing.weights"):
        assert [w("bad"), w("bad"), w("bad")] == [1, 1, 1]
    assert len([r for r in caplog.records if "bad" in r.getMessage()]) == 1, "a bad value is logged once"


def test_weights_change_the_release_order() -> None:
    w = NamespaceWeights(Namespaces({"heavy": {SERVING_WEIGHT_ANNOTATION: "3"}, "light": {}}))
    q = FairQueue(max_len=100, max_wait=60, weight=w)
    for i in range(6):
        q.enqueue("heavy", float(i))
    for i in range(2):
        q.enqueue("light", 10.0 + i)
    assert "".join("H" if q.release().tenant == "heavy" else "L" for _ in range(8)) == "HHLHHHLH"  # type: ignore[union-attr]


def test_trim_namespace_keeps_what_readers_need() -> None:
    ns = {"apiVersion": "v1", "kind": "Namespace", "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"},
          "metadata": {"name": "t", "uid": "u1", "resourceVersion": "9", "labels": {"team": "a"}, "managedFields": [{}],
                       "annotations": {SERVING_WEIGHT_ANNOTATION: "4", PRIORITY_ANNOTATION: "low", "other": "x" * 1000}}}
    assert trim_namespace(ns) == {"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": "t", "uid": "u1", "resourceVersion": "9",
        "annotations": {PRIORITY_ANNOTATION: "low", SERVING_WEIGHT_ANNOTATION: "4"}}}
    assert "annotations" not in trim_namespace({"metadata": {"name": "t", "annotations": {"other": "x"}}})["metadata"]


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def normal(self, obj: dict, reason: str, message: str) -> None:
        self.events.append((obj["metadata"]["name"], "Normal", reason))

    def warning(self, obj: dict, reason: str, message: str) -> None:
        self.events.append((obj["metadata"]["name"], "Warning", reason))


class Models:
    def get(self, name: str, namespace: str) -> dict | None:
        return {"metadata": {"name": name, "namespace": namespace}} if name != "gone" else None


async def test_saturation_events_one_per_transition_and_rate_limited() -> None:
    now = [1000.0]
    rec = Recorder()
    ev = SaturationEvents(rec, Models(), min_interval=0.2, clock=lambda: now[0])
    m, other = ("ns", "m"), ("ns", "other")
    ev.changed(m, True)
    ev.changed(m, True)  # no transition: nothing
    assert rec.events == [("m", "Warning", "Saturated")]
    ev.changed(other, True)  # another Model has its own interval
    assert rec.events[-1] == ("other", "Warning", "Saturated")
    # inside the interval, m clears and saturates again, then clears: reported once, at the end of the interval,
    # as its state then (cleared)
    ev.changed(m, False)
    ev.changed(m, True)
    ev.changed(m, False)
    assert len(rec.events) == 2
    now[0] += 0.2
    await asyncio.sleep(0.25)
    assert rec.events[2:] == [("m", "Normal", "SaturationCleared")]
    # a flap inside the interval that ends where it started reports nothing
    ev.changed(m, True)
    assert rec.events[3:] == [], "at most one Event per interval"
    now[0] += 0.2
    await asyncio.sleep(0.25)
    assert rec.events[3:] == [("m", "Warning", "Saturated")]
    ev.changed(m, False)
    ev.changed(m, True)
    now[0] += 0.2
    await asyncio.sleep(0.25)
    assert rec.events[4:] == []
    ev.changed(("ns", "gone"), True)  # a Model that is gone gets nothing (and nothing fails)
    assert rec.events[4:] == []
    ev.close()


class Configs:
    def __init__(self, config: dict | None) -> None:
        self.config = config
        self.reads = 0

    def get(self, name: str) -> dict | None:
        self.reads += 1
        return self.config if name == "kaiwo" else None


def queue_config(rv: str, *queues: tuple[object, object]) -> dict:
    return {"metadata": {"name": "kaiwo", "resourceVersion": rv},
            "spec": {"clusterQueues": [{"name": f"q{i}", "namespaces": ns, "spec": {"fairSharing": {"weight": w}} if w is not None else {}}
                                       for i, (ns, w) in enumerate(queues)]}}


@pytest.mark.parametrize("raw, expected", [
    ("3", 3), (3, 3), ("1.5", 2), ("2.4", 2), ("500m", 1), ("0", 1), (-2, 1), ("250", MAX_WEIGHT), ("1e9", MAX_WEIGHT),
    ("lots", None), (None, None), (True, None), ([3], None),
])
def test_queue_weight_from_a_kueue_fair_sharing_weight(raw: object, expected: int | None) -> None:
    assert queue_weight(raw) == expected


def test_weights_from_the_kaiwoqueueconfig_unless_the_namespace_says_otherwise() -> None:
    configs = Configs(queue_config("1", (["team-a", "team-b"], "3"), (["team-b", "team-c"], "5"), (["team-d"], None),
                                   (["team-e"], "x")))
    w = NamespaceWeights(Namespaces({"team-a": {}, "team-b": {}, "team-c": {SERVING_WEIGHT_ANNOTATION: "2"}, "team-d": {},
                                     "team-e": {}, "team-f": {SERVING_WEIGHT_ANNOTATION: "bad"}}), configs)
    # team-b is under both queues: the larger weight; team-c's annotation wins; no weight or a bad one: 1
    assert {t: w(t) for t in ("team-a", "team-b", "team-c", "team-d", "team-e", "team-f", "elsewhere")} == {
        "team-a": 3, "team-b": 5, "team-c": 2, "team-d": 1, "team-e": 1, "team-f": 1, "elsewhere": 1}
    configs.config = queue_config("2", (["team-a"], "7"))  # a new version of the config is read again
    assert w("team-a") == 7 and w("team-b") == 1
    configs.config = None
    assert w("team-a") == 1


@pytest.mark.parametrize("config", [
    {}, {"spec": None}, {"spec": {"clusterQueues": "all"}}, {"spec": {"clusterQueues": [None, 3, {"namespaces": "a"}]}},
    {"spec": {"clusterQueues": [{"namespaces": ["a", 5, None], "spec": {"fairSharing": "heavy"}}]}},
    {"spec": {"clusterQueues": [{"namespaces": ["a"], "spec": []}]}},
])
def test_queue_weights_skip_malformed_parts(config: dict) -> None:
    assert queue_weights(config) == {}


def test_queue_weights_read_a_bounded_number_of_namespaces() -> None:
    names = [f"n{i}" for i in range(MAX_QUEUE_NAMESPACES + 5)]
    got = queue_weights(queue_config("1", (names, "2")))
    assert len(got) == MAX_QUEUE_NAMESPACES and "n0" in got
