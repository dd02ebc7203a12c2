"""A KaiwoQueueConfig deleted and re-created converges by itself, with the real
Kueue and the real garbage collector.

Deleting the queue config has the garbage collector delete its ClusterQueue,
ResourceFlavors and the Topology ``default-topology``; Kueue's
``resource-in-use`` finalizer keeps the Topology until no ResourceFlavor names
it. The operator re-creates the default queue config at once, and with it
flavors naming ``default-topology``: written while the old Topology was still
terminating, they kept it terminating for ever and the queue config FAILED
("waiting for the old object to finish deleting") until someone removed the
finalizer by hand. Upstream Kaiwo's chainsaw suite does exactly this.
"""

from __future__ import annotations

import time

import pytest

from e2e.conftest import get, wait_for

pytestmark = pytest.mark.e2e

KAIWO = "/apis/kaiwo.silogen.ai/v1alpha1"
KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
QUEUE_CONFIG = f"{KAIWO}/kaiwoqueueconfigs/kaiwo"
ROUNDS = 3


def converged(admin, old_uid: str | None):
    """The re-created queue config READY, every flavor it lists present and not
    terminating, and every Topology they name present and not terminating."""
    qc = get(admin, QUEUE_CONFIG)
    if not qc or qc["metadata"]["uid"] == old_uid or (qc.get("status") or {}).get("status") != "READY":
        return None
    for entry in qc["spec"].get("resourceFlavors") or []:
        flavor = get(admin, f"{KUEUE}/resourceflavors/{entry['name']}")
        if not flavor or flavor["metadata"].get("deletionTimestamp"):
            return None
        topology = flavor["spec"].get("topologyName")
        if topology:
            topo = get(admin, f"{KUEUE}/topologies/{topology}")
            if not topo or topo["metadata"].get("deletionTimestamp"):
                return None
    return qc


def describe(admin) -> str:
    qc = get(admin, QUEUE_CONFIG) or {}
    topos = [(t["metadata"]["name"], t["metadata"].get("deletionTimestamp"), t["metadata"].get("finalizers"))
             for t in get(admin, f"{KUEUE}/topologies")["items"]]
    flavors = [(f["metadata"]["name"], f["spec"].get("topologyName"), f["metadata"].get("deletionTimestamp"))
               for f in get(admin, f"{KUEUE}/resourceflavors")["items"]]
    return f"queue config status: {qc.get('status')}\ntopologies: {topos}\nflavors: {flavors}"


def test_deleted_queue_config_is_recreated_and_converges(operator, admin, kubectl):
    qc = wait_for(lambda: converged(admin, None), 120, "a READY queue config to start from")
    for round_ in range(ROUNDS):
        old_uid = qc["metadata"]["uid"]
        t0 = time.monotonic()
        kubectl("delete", "kaiwoqueueconfig", "kaiwo", "--wait=false")
        try:
            qc = wait_for(lambda old_uid=old_uid: converged(admin, old_uid), 120,
                          f"round {round_}: the re-created queue config READY on live flavors and Topology")
        except AssertionError as e:
            raise AssertionError(f"{e}\n{describe(admin)}") from None
        print(f"round {round_}: re-created and READY {time.monotonic() - t0:.1f}s after the delete")
        names = [f["name"] for f in qc["spec"].get("resourceFlavors") or []]
        assert names, qc["spec"]
        assert any(f.get("topologyName") == "default-topology" for f in qc["spec"]["resourceFlavors"]), qc["spec"]
        cq = get(admin, f"{KUEUE}/clusterqueues/kaiwo")
        assert cq and not cq["metadata"].get("deletionTimestamp")
        wait_for(
            lambda: next((c for c in (get(admin, f"{KUEUE}/clusterqueues/kaiwo") or {}).get("status", {}).get("conditions", [])
                          if c["type"] == "Active"), {}).get("status") == "True",
            90, f"round {round_}: Kueue reports ClusterQueue kaiwo Active",
        )
