"""The Model controller reads its own writes through the manager's one
expectations store: a reconcile that runs before the watch events of its last
pass arrive creates no second Pod and writes no status again, and a pass over
caches that caught up writes nothing."""

from __future__ import annotations

import asyncio
import copy
from types import SimpleNamespace
from typing import Any

from kaiwo_ctrl.runtime.control.expectations import Expectations
from kaiwo_ctrl.runtime.control.handler import Request
from kaiwo_ctrl.serving.model.config import parse_config
from kaiwo_ctrl.serving.model.controller import ModelReconciler

NS, NAME = "team", "m"


class Informer:
    """A cache the test moves by hand (``items``: name -> object)."""

    def __init__(self) -> None:
        self.items: dict[str, dict] = {}
        self.handlers: list = []

    def add_handler(self, h: Any) -> None:
        self.handlers.append(h)

    def get(self, name: str, namespace: str | None = None) -> dict | None:
        return self.items.get(name)

    def list(self, namespace: str | None = None) -> list[dict]:
        return list(self.items.values())

    def by_index(self, _index: str, _key: str) -> list[dict]:
        return list(self.items.values())


class Client:
    """Answers as the API server would: new resourceVersions, generated names."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, str, dict]] = []
        self.rv = 10

    def _next(self) -> str:
        self.rv += 1
        return str(self.rv)

    async def create(self, res: Any, body: dict, ns: str | None = None) -> dict:
        out = copy.deepcopy(body)
        meta = out["metadata"]
        meta.setdefault("name", f"{meta.pop('generateName', 'x-')}{len(self.writes)}")
        meta.update(resourceVersion=self._next(), uid=f"uid-{meta['name']}")
        self.writes.append(("create", res.kind, out))
        return out

    async def patch_status(self, res: Any, name: str, patch: dict, ns: str | None = None) -> dict:
        self.writes.append(("patch_status", res.kind, patch))
        out = copy.deepcopy(MODEL)
        out["metadata"]["resourceVersion"] = self._next()
        out["status"] = copy.deepcopy(patch["status"])
        return out


class Events:
    def normal(self, *a: Any) -> None: ...
    def warning(self, *a: Any) -> None: ...


class Manager:  # the parts of a manager the reconciler uses: its read-your-writes store, its singletons
    def __init__(self) -> None:
        self.expectations = Expectations()
        self._one: dict = {}

    def singleton(self, kind, make):
        if kind not in self._one:
            self._one[kind] = make()
        return self._one[kind]


MODEL = {"apiVersion": "kubeai.org/v1", "kind": "Model",
         "metadata": {"name": NAME, "namespace": NS, "uid": "uid-model", "resourceVersion": "10", "generation": 1},
         "spec": {"url": "hf://org/repo", "engine": "VLLM", "resourceProfile": "cpu:1", "replicas": 1,
                  "minReplicas": 1, "autoscalingDisabled": True}}


def _reconciler() -> tuple[ModelReconciler, Client, dict[str, Informer]]:
    client, informers = Client(), {}
    mgr = Manager()
    mgr.client = client
    mgr.cache = SimpleNamespace(informer=lambda res, **_kw: informers.setdefault(res.kind, Informer()))
    mgr.recorder = SimpleNamespace(for_component=lambda _c: Events())
    mgr.add_runnable = lambda *_a, **_k: None
    source = SimpleNamespace(current=parse_config(None), listeners=[])
    rec = ModelReconciler(mgr, source)
    assert rec.expectations is mgr.expectations
    return rec, client, informers


def test_a_second_pass_before_the_watch_events_creates_and_writes_nothing():
    rec, client, informers = _reconciler()
    informers["Model"].items[NAME] = copy.deepcopy(MODEL)
    req = Request(NS, NAME)

    async def run() -> None:
        await rec.reconcile(req)
        created = [w for w in client.writes if w[0] == "create"]
        statuses = [w for w in client.writes if w[0] == "patch_status"]
        assert [w[1] for w in created] == ["Pod"] and len(statuses) == 1
        assert statuses[0][2]["metadata"] == {"resourceVersion": "10"}  # guarded by the version read
        # the caches still show no Pod and the Model without status: nothing is written again
        for _ in range(3):
            await rec.reconcile(req)
        assert len(client.writes) == 2
        # the caches catch up (the Pod, the Model at the version we wrote): still nothing
        pod = created[0][2]
        informers["Pod"].items[pod["metadata"]["name"]] = pod
        await rec.reconcile(req)
        assert len(client.writes) == 2
        model = copy.deepcopy(MODEL)
        model["metadata"]["resourceVersion"] = str(client.rv)
        model["status"] = copy.deepcopy(statuses[0][2]["status"])
        informers["Model"].items[NAME] = model
        await rec.reconcile(req)
        assert len(client.writes) == 2

    asyncio.run(run())


def test_the_pod_deleted_in_the_cache_is_replaced_once_the_create_was_seen():
    rec, client, informers = _reconciler()
    informers["Model"].items[NAME] = copy.deepcopy(MODEL)
    req = Request(NS, NAME)

    async def run() -> None:
        await rec.reconcile(req)
        pod = next(w[2] for w in client.writes if w[0] == "create")
        informers["Pod"].items[pod["metadata"]["name"]] = pod
        await rec.reconcile(req)  # the create is seen: nothing is waited for any more
        del informers["Pod"].items[pod["metadata"]["name"]]  # e.g. evicted
        await rec.reconcile(req)
        assert [w[1] for w in client.writes if w[0] == "create"] == ["Pod", "Pod"]

    asyncio.run(run())


def test_deleting_the_model_forgets_its_expectations():
    rec, client, informers = _reconciler()
    informers["Model"].items[NAME] = copy.deepcopy(MODEL)

    async def run() -> None:
        await rec.reconcile(Request(NS, NAME))
        assert len(rec.expectations) == 3  # the Pod created, the status written and its echo
        for h in informers["Model"].handlers:
            if hasattr(h, "on_delete"):
                h.on_delete(MODEL, False)
        assert len(rec.expectations) == 0

    asyncio.run(run())
