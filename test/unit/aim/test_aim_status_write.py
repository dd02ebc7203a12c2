"""The AIM status write goes through the shared writer and its read-your-writes."""

from __future__ import annotations

from kaiwo_ctrl.runtime.control.expectations import Expectations

import asyncio
import copy
from types import SimpleNamespace

from kaiwo_ctrl.aim.controller import AIMReconciler
from kaiwo_ctrl.aim.status import Observed


class _Informer:
    def __init__(self) -> None:
        self.handlers: list = []

    def add_handler(self, h) -> None:
        self.handlers.append(h)


class _Client:
    """Answers status patches as the API server would (a new resourceVersion)."""

    def __init__(self) -> None:
        self.patches: list[dict] = []

    async def patch_status(self, res, name, patch, ns=None):
        self.patches.append(patch)
        out = copy.deepcopy(CONFIG)
        out["metadata"]["resourceVersion"] = str(int(patch["metadata"]["resourceVersion"]) + 1)
        out["status"] = patch["status"]
        return out


class _Manager:  # the parts of a manager the reconciler uses here
    client: _Client
    cache: SimpleNamespace
    recorder: SimpleNamespace

    def __init__(self) -> None:
        self.expectations = Expectations()


CONFIG = {"apiVersion": "aim.silogen.ai/v1alpha1", "kind": "AIMNamespaceConfig",
          "metadata": {"name": "tenant", "namespace": "team", "resourceVersion": "10", "generation": 1}, "spec": {}}


def _reconciler() -> tuple[AIMReconciler, _Client, dict[str, _Informer]]:
    client, informers = _Client(), {}

    def informer(res, **_kw):
        return informers.setdefault(res.kind, _Informer())

    mgr = _Manager()
    mgr.client, mgr.cache = client, SimpleNamespace(informer=informer)
    mgr.recorder = SimpleNamespace(for_component=lambda _c: None)
    return AIMReconciler(mgr, "kaiwo-system"), client, informers


def test_a_lagging_cache_does_not_repeat_the_write_and_the_write_is_guarded():
    rec, client, _ = _reconciler()
    seen = Observed(generation=1, in_force_name="tenant", models=2)

    async def run() -> None:
        await rec._write_status(copy.deepcopy(CONFIG), seen)
        # the cache still shows resourceVersion 10: our write is read back, nothing is sent again
        await rec._write_status(copy.deepcopy(CONFIG), seen)
        assert len(client.patches) == 1
        assert client.patches[0]["metadata"] == {"resourceVersion": "10"}
        # something else changes while the cache lags: the next write is guarded by the written version
        await rec._write_status(copy.deepcopy(CONFIG), Observed(generation=1, in_force_name="tenant", models=3))
        assert len(client.patches) == 2
        assert client.patches[1]["metadata"] == {"resourceVersion": "11"}
        assert client.patches[1]["status"]["models"] == 3

    asyncio.run(run())


def test_deleting_a_config_forgets_its_write():
    rec, client, informers = _reconciler()
    (pruner,) = informers["AIMNamespaceConfig"].handlers
    seen = Observed(generation=1, in_force_name="tenant", models=2)

    async def run() -> None:
        await rec._write_status(copy.deepcopy(CONFIG), seen)
        assert len(rec.expectations) == 1
        pruner.on_delete(CONFIG, False)
        assert len(rec.expectations) == 0
        # re-created under the same name with the same resourceVersion text: written afresh
        await rec._write_status(copy.deepcopy(CONFIG), seen)
        assert len(client.patches) == 2

    asyncio.run(run())
