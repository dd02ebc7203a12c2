"""The Go Kaiwo operator's KaiwoQueueConfig CRD defaults more fields; a restart must still write nothing.

The Go operator's CRD embeds Kueue's ClusterQueue schema, whose defaults
(``flavorFungibility``, ``preemption``, ``queueingStrategy``, ``stopPolicy``)
the API server adds to every stored queue config. A start that compared the
spec discovery wants with the stored one without those defaults would PATCH
the queue config on every start without changing it. This runs on a control
plane of its own, because it replaces an installed CRD.
"""

from __future__ import annotations

import time

import pytest

from support import eventually
from support.planes import own_plane
from test_queues_controller import CONFIG_URL, QC_URL, RunningOperator, node_body
from support.admin import admin_http

pytestmark = pytest.mark.integration

CRD_URL = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/kaiwoqueueconfigs.kaiwo.silogen.ai"

GO_STYLE_DEFAULTS = {
    "queueingStrategy": {"type": "string", "default": "BestEffortFIFO", "enum": ["StrictFIFO", "BestEffortFIFO"]},
    "stopPolicy": {"type": "string", "default": "None", "enum": ["None", "Hold", "HoldAndDrain"]},
    "flavorFungibility": {
        "type": "object",
        "default": {},
        "properties": {
            "whenCanBorrow": {"type": "string", "default": "Borrow", "enum": ["Borrow", "TryNextFlavor"]},
            "whenCanPreempt": {"type": "string", "default": "TryNextFlavor", "enum": ["Preempt", "TryNextFlavor"]},
        },
    },
    "preemption": {
        "type": "object",
        "default": {},
        "properties": {
            "borrowWithinCohort": {
                "type": "object",
                "properties": {"policy": {"type": "string", "default": "Never"}, "maxPriorityThreshold": {"type": "integer"}},
            },
            "reclaimWithinCohort": {"type": "string", "default": "Never"},
            "withinClusterQueue": {"type": "string", "default": "Never"},
        },
    },
}


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    with own_plane(tmp_path_factory, "gocrd-plane") as p:
        yield p


def install_go_style_crd(h) -> None:
    crd = h.get(CRD_URL).json()
    for version in crd["spec"]["versions"]:
        entry = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["clusterQueues"]["items"]
        cq = entry["properties"]["spec"]["properties"]
        for name, schema in GO_STYLE_DEFAULTS.items():
            cq[name] = {"description": cq.get(name, {}).get("description", name), **schema}
    r = h.put(CRD_URL, json=crd)
    assert r.status_code == 200, r.text


def stored_defaults_applied(h) -> bool:
    """The new schema is in force: a dry-run create comes back with the Go-style defaults."""
    body = {"apiVersion": "kaiwo.silogen.ai/v1alpha1", "kind": "KaiwoQueueConfig", "metadata": {"name": "kaiwo"},
            "spec": {"clusterQueues": [{"name": "probe", "spec": {}}]}}
    r = h.post(QC_URL + "?dryRun=All", json=body)
    if r.status_code not in (200, 201):
        return False
    return (r.json()["spec"]["clusterQueues"][0]["spec"].get("flavorFungibility") or {}).get("whenCanBorrow") == "Borrow"


async def test_restart_with_go_style_crd_makes_no_write(plane):
    with admin_http(plane) as h:
        deadline = time.monotonic() + 120
        while any(h.get(p).status_code != 200 for p in (QC_URL, CONFIG_URL)):
            assert time.monotonic() < deadline, "CRD storage not ready"
            time.sleep(0.2)
        install_go_style_crd(h)
        await eventually(lambda: stored_defaults_applied(h), timeout=60, what="Go-style defaults in force")
        for i, kind in enumerate(("amd", "cpu")):
            assert h.post("/api/v1/nodes", json=node_body(f"node-{i}", kind)).status_code == 201

        first = await RunningOperator(plane).start()  # creates the default queue config
        await first.idle()
        await first.stop()
        stored = h.get(f"{QC_URL}/kaiwo").json()
        entry = stored["spec"]["clusterQueues"][0]["spec"]
        assert entry["flavorFungibility"] == {"whenCanBorrow": "Borrow", "whenCanPreempt": "TryNextFlavor"}
        assert entry["preemption"]["withinClusterQueue"] == "Never"

        second = await RunningOperator(plane).start()  # a restart on the unchanged cluster
        try:
            await second.idle()
            assert second.rec.stats.queue_config_updates == 0, second.rec.stats
            assert second.writes == 0, f"restart wrote: {dict(second.mgr.client.counts)} {second.rec.stats}"
            assert h.get(f"{QC_URL}/kaiwo").json()["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]
        finally:
            await second.stop()
