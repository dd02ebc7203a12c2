"""Bulk deletion while reconciles are in flight: no Job is created for a
KaiwoJob that is being deleted or is gone (issue #17), on the real
kube-apiserver. Job creates are counted at the operator's client."""

from __future__ import annotations

import pytest

from kaiwo_ctrl.runtime.control.handler import Request
from kaiwo_ctrl.runtime.objects.objpath import meta
from kaiwo_ctrl.runtime.api.resources import JOBS
from test_workloads_support import (  # noqa: F401 - fixtures
    KAIWO,
    MERGE,
    eventually,
    operator,
)

pytestmark = pytest.mark.integration

HOLD = "test.kaiwo-ctrl.dev/hold"
N = 40


def record_job_creates(mgr) -> list[tuple[str, str, str]]:
    """Every Job the operator's client creates, with what its cache said of
    the owning KaiwoJob at that moment ("alive", "deleting" or "gone")."""
    out: list[tuple[str, str, str]] = []
    original = mgr.client.create
    own = mgr.reconcilers["KaiwoJob"].informer

    async def create(res, body, *args, **kw):
        if res == JOBS:
            m = body["metadata"]
            ref = next(r for r in m["ownerReferences"] if r.get("controller"))
            owner = own.get(ref["name"], m.get("namespace"))
            state = "gone" if owner is None or meta(owner)["uid"] != ref["uid"] else (
                "deleting" if meta(owner).get("deletionTimestamp") else "alive")
            out.append((m.get("namespace") or "", m["name"], state))
        return await original(res, body, *args, **kw)

    mgr.client.create = create
    return out


def idle(mgr) -> bool:
    return all(len(c.queue) == 0 and c.queue.waiting_count() == 0 and c.active == 0 for c in mgr.controllers)


@pytest.mark.parametrize("held", [True, False], ids=["deleting", "gone"])
async def test_bulk_deletion_during_reconciles_creates_no_job_for_a_deleted_kaiwojob(operator, admin, namespace, held):
    creates = record_job_creates(operator)
    url = f"{KAIWO}/namespaces/{namespace}/kaiwojobs"
    for i in range(N):
        body = {"apiVersion": "kaiwo.silogen.ai/v1alpha1", "kind": "KaiwoJob",
                "metadata": {"name": f"bulk-{i:02d}", "finalizers": [HOLD] if held else []},
                "spec": {"image": "busybox", "entrypoint": "sleep 1"}}
        r = admin.post(url, json=body)
        assert r.status_code == 201, r.text
    # delete them all at once while the first reconciles are still running
    r = admin.delete(url)
    assert r.status_code == 200, r.text
    own = operator.reconcilers["KaiwoJob"].informer

    def all_deleted_in_cache() -> bool:
        objs = own.list(namespace)
        return all(meta(o).get("deletionTimestamp") for o in objs) if held else not objs

    await eventually(all_deleted_in_cache, timeout=60, what="the deletion reached the operator's cache")
    await eventually(lambda: idle(operator), timeout=60, what="controllers idle")
    # every one reconciled again after its deletion: still no Job
    ctl = next(c for c in operator.controllers if c.name == "kaiwojob")
    before = ctl.reconciles
    for i in range(N):
        ctl.enqueue(Request(namespace, f"bulk-{i:02d}"))
    await eventually(lambda: ctl.reconciles >= before + N and idle(operator), timeout=60, what="reconciles after deletion")

    ours = [(name, state) for ns, name, state in creates if ns == namespace]
    assert [c for c in ours if c[1] != "alive"] == [], "a Job was created for a KaiwoJob being deleted or gone"
    created = {name for name, _ in ours}
    jobs = admin.get(f"/apis/batch/v1/namespaces/{namespace}/jobs").json()["items"]
    assert {j["metadata"]["name"] for j in jobs} == created, "every Job there is one the operator created while its owner lived"
    print(f"{len(created)} of {N} KaiwoJobs got their Job before the deletion reached the operator")
    if held:  # release the held objects
        for i in range(N):
            admin.patch(f"{url}/bulk-{i:02d}", json={"metadata": {"finalizers": None}}, headers=MERGE)
