"""A KaiwoQueueConfig deleted and re-created converges by itself, with the real
Kueue and the real garbage collector.

Deleting the queue config has the garbage collector delete its ClusterQueue,
ResourceFlavors and the Topology ``default-topology``; Kueue's
``resource-in-use`` finalizer keeps the Topology until no ResourceFlavor names
it. When the operator re-created the queue config while that Topology was still
terminating, it wrote new flavors naming it: they kept it terminating for ever,
and the queue config stayed FAILED ("waiting for the old object to finish
deleting") until someone removed the finalizer by hand. Upstream Kaiwo's
chainsaw suite hit this 2 times out of 2 on a loaded machine.

The timing is made certain rather than left to load: the operator is stopped
(SIGTERM, as a rollout does) while the queue config is deleted, and a finalizer
of the test's own keeps the old Topology terminating until the operator, started
again with the same command, has re-created the queue config. Only then is the
test's finalizer removed; the operator must converge from there by itself.
"""

from __future__ import annotations

import time

import httpx
import pytest

from e2e.conftest import OperatorProcess, get, wait_for

pytestmark = pytest.mark.e2e

KAIWO = "/apis/kaiwo.silogen.ai/v1alpha1"
KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
QUEUE_CONFIG = f"{KAIWO}/kaiwoqueueconfigs/kaiwo"
TOPOLOGY = f"{KUEUE}/topologies/default-topology"
MERGE = {"Content-Type": "application/merge-patch+json"}
HOLD = "e2e.kaiwo.silogen.ai/hold"
ROUNDS = 2


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


def set_hold(admin, on: bool) -> None:
    topo = get(admin, TOPOLOGY)
    fins = [f for f in topo["metadata"].get("finalizers") or [] if f != HOLD] + ([HOLD] if on else [])
    r = admin.patch(TOPOLOGY, json={"metadata": {"finalizers": fins, "resourceVersion": topo["metadata"]["resourceVersion"]}},
                    headers=MERGE)
    assert r.status_code == 200, r.text


def old_flavors_gone_topology_terminating(admin):
    topo = get(admin, TOPOLOGY)
    naming = [f for f in get(admin, f"{KUEUE}/resourceflavors")["items"] if f["spec"].get("topologyName") == "default-topology"]
    return topo and topo["metadata"].get("deletionTimestamp") and not naming


def restart(operator: OperatorProcess) -> None:
    """Start the operator process again with the same command (the fixture's object
    keeps pointing at the running process)."""
    fresh = OperatorProcess(operator.argv, operator.env, operator.log, operator.health_port, operator.metrics_port)
    operator.popen = fresh.popen

    def ready() -> bool:
        if operator.popen.poll() is not None:
            raise AssertionError(f"operator exited with {operator.popen.returncode}:\n{operator.text()[-4000:]}")
        return httpx.get(f"http://127.0.0.1:{operator.health_port}/readyz", timeout=2).status_code == 200

    wait_for(ready, 120, "operator /readyz after the restart")


def _owner_path(obj: dict, ns: str | None) -> str | None:
    """The API path of an object's controlling owner (Job, Pod, AppWrapper, RayJob, KaiwoJob, ...)."""
    ref = next((r for r in obj["metadata"].get("ownerReferences") or [] if r.get("controller")), None)
    if not ref:
        return None
    base = "/api/v1" if ref["apiVersion"] == "v1" else f"/apis/{ref['apiVersion']}"
    where = f"/namespaces/{ns}" if ns else ""
    return f"{base}{where}/{ref['kind'].lower()}s/{ref['name']}"


def drain(admin, cluster_queues: set[str]) -> None:
    """Delete what holds quota in ``cluster_queues``: Kueue keeps a ClusterQueue (and so its
    flavors and their Topology) while workloads are admitted to it, so workloads other
    tests left running on this shared plane (KaiwoJobs, Models' Pods) would keep the old
    objects terminating for as long as they run, which is Kueue's rule, not the race this
    test is about. Each workload's top owner (a KaiwoJob, KaiwoService or Model where there
    is one) is deleted."""
    for wl in get(admin, f"{KUEUE}/workloads")["items"]:
        if ((wl.get("status") or {}).get("admission") or {}).get("clusterQueue") not in cluster_queues:
            continue
        ns = wl["metadata"]["namespace"]
        path, top = _owner_path(wl, ns), None
        while path:
            obj = get(admin, path)
            if obj is None:
                break
            top, path = path, _owner_path(obj, ns)
        if top:
            r = admin.delete(top, params={"propagationPolicy": "Background"})
            assert r.status_code in (200, 202, 404), r.text

    def free():
        for name in cluster_queues:
            st = (get(admin, f"{KUEUE}/clusterqueues/{name}") or {}).get("status") or {}
            if st.get("reservingWorkloads") or st.get("admittedWorkloads"):
                return False
        return True

    wait_for(free, 120, f"ClusterQueues {sorted(cluster_queues)} drained of other tests' workloads")


def test_queue_config_recreated_while_its_topology_terminates_converges(operator, admin, kubectl):
    # start from the operator's own default queue config, whose flavors name default-topology
    first = wait_for(lambda: get(admin, QUEUE_CONFIG), 120, "a queue config (the operator's start-up makes one)")
    drain(admin, {cq["name"] for cq in first["spec"].get("clusterQueues") or []} | {"kaiwo"})
    kubectl("delete", "kaiwoqueueconfig", "kaiwo", "--wait=false")
    try:
        qc = wait_for(lambda: converged(admin, first["metadata"]["uid"]), 120, "the default queue config READY")
    except AssertionError as e:  # (before the fix this plain delete already got stuck on a loaded machine)
        raise AssertionError(f"{e}\n{describe(admin)}") from None
    assert any(f.get("topologyName") == "default-topology" for f in qc["spec"]["resourceFlavors"]), qc["spec"]

    for round_ in range(ROUNDS):
        old_uid = qc["metadata"]["uid"]
        set_hold(admin, True)
        assert operator.stop() == 0, operator.text()[-3000:]
        try:
            kubectl("delete", "kaiwoqueueconfig", "kaiwo", "--wait=false")
            wait_for(lambda: old_flavors_gone_topology_terminating(admin), 90,
                     "garbage collection: the old flavors gone, the Topology terminating")
        finally:
            restart(operator)

        def recreated_and_waiting(old_uid=old_uid):
            qc = get(admin, QUEUE_CONFIG)
            msg = " ".join(c.get("message", "") for c in ((qc or {}).get("status") or {}).get("conditions") or [])
            return qc and qc["metadata"]["uid"] != old_uid and "Topology default-topology: waiting" in msg

        wait_for(recreated_and_waiting, 60, "the re-created queue config waiting for the old Topology")
        t0 = time.monotonic()
        set_hold(admin, False)  # from here on, only Kueue's finalizer and the operator
        try:
            qc = wait_for(lambda old_uid=old_uid: converged(admin, old_uid), 120,
                          f"round {round_}: the re-created queue config READY on a live Topology")
        except AssertionError as e:
            raise AssertionError(f"{e}\n{describe(admin)}") from None
        print(f"round {round_}: READY {time.monotonic() - t0:.1f}s after the old Topology was let go")
        wait_for(
            lambda: next((c for c in ((get(admin, f"{KUEUE}/clusterqueues/kaiwo") or {}).get("status") or {}).get("conditions", [])
                          if c["type"] == "Active"), {}).get("status") == "True",
            90, f"round {round_}: Kueue reports ClusterQueue kaiwo Active",
        )
    assert operator.popen.poll() is None, operator.text()[-3000:]
