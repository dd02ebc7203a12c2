"""AdapterSync reads a Pod's adapter labels through the manager's expectations:
a reconcile that runs before the cache shows its label write loads nothing again."""

from __future__ import annotations

from kaiwo_ctrl.runtime.control.expectations import Expectations
from kaiwo_ctrl.serving.model.adapters import ADAPTER_LABEL_PREFIX, AdapterSync, url_hash

MODEL = {"metadata": {"name": "m", "namespace": "ns"}, "spec": {"adapters": [{"name": "sql", "url": "hf://org/sql"}]}}


def pod(rv: str, labels: dict[str, str]) -> dict:
    return {
        "metadata": {"name": "p", "namespace": "ns", "resourceVersion": rv,
                     "labels": {"app.kubernetes.io/name": "vllm", **labels}},
        "status": {"podIP": "127.0.0.9", "containerStatuses": [{"name": "loader", "ready": True}]},
    }


class NoWrites:
    async def patch(self, *a, **kw):  # pragma: no cover - the assertion is that this is not reached
        raise AssertionError("nothing to write")


async def test_a_pending_label_write_is_read_back_and_nothing_is_loaded_again():
    exp = Expectations()
    sync = AdapterSync(NoWrites(), exp)
    labelled = {ADAPTER_LABEL_PREFIX + "sql": url_hash("hf://org/sql")}
    exp.wrote(("Pod", "ns", "p"), "1", pod("2", labelled))
    try:
        # the cache still shows resourceVersion 1, without the label: the written Pod stands in
        state = sync.sync(MODEL, [pod("1", {})])
        assert (state.loading, state.failed, state.waiting) == ([], [], 0)
    finally:
        await sync.close()


async def test_without_the_write_the_missing_label_is_work_to_do():
    sync = AdapterSync(NoWrites(), Expectations())
    unready = pod("1", {})
    unready["status"]["containerStatuses"][0]["ready"] = False
    try:
        # the adapter is missing and the loader is not Ready: it waits, it does not skip
        state = sync.sync(MODEL, [unready])
        assert (state.wanted, state.waiting, state.loading) == (True, 1, [])
    finally:
        await sync.close()
