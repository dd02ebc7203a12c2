#!/usr/bin/env python
"""Benchmark: the node-pool watcher under a burst of Node creations.

Starts a private control plane (etcd + kube-apiserver with the CRDs), runs the
queue-config part of the operator in-process with
``dynamicallyUpdateDefaultClusterQueue: true``, then creates NODES Nodes (half
AMD MI300X, half NVIDIA K80, capacity in their status as a kubelet registers
them) as fast as CONCURRENCY parallel requests allow. It prints how many writes
the operator made, by target, and how long it took until the default
ClusterQueue's quota reflected every node. Not a test; run it by hand:

    .venv/bin/python bench/bench_nodepools.py [--nodes 500] [--concurrency 64] [--prelabelled]

``--prelabelled`` creates the Nodes already carrying the labels discovery would
write, to separate the per-node label writes (one per new node, unavoidable)
from the queue-config/Kueue writes the debouncing keeps small.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kaiwo_ctrl.kinds import CLUSTERQUEUES, KAIWOCONFIGS, KAIWOQUEUECONFIGS  # noqa: E402
from kaiwo_ctrl.runtime.process import loop  # noqa: E402
from kaiwo_ctrl.local.controlplane import ControlPlane, locate_assets  # noqa: E402
from kaiwo_ctrl.runtime.objects.quantity import parse_quantity  # noqa: E402
from kaiwo_ctrl.runtime.api.client import ApiError, Client  # noqa: E402
from kaiwo_ctrl.runtime.api.resources import NODES  # noqa: E402

AMD = ("amd-mi300x-8gpu-57core-460gi", "amd.com/gpu", {"amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM", "beta.amd.com/gpu.family.AI": "8"}, {"cpu": "64", "memory": "512Gi", "amd.com/gpu": "8"})
NVIDIA = ("nvidia-teslak80-8gpu-28core-230gi", "nvidia.com/gpu", {"nvidia.com/gpu.product": "Tesla-K80", "nvidia.com/gpu.count": "8"}, {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "8"})


def node(name: str, pool: tuple, prelabelled: bool) -> dict:
    flavor, _, labels, capacity = pool
    labels = {"kubernetes.io/hostname": name, **labels}
    if prelabelled:
        labels.update({"kaiwo/worker": "true", "kaiwo/nodepool": flavor, "kaiwo/gpu-model": flavor.split("-")[1],
                       "kaiwo/topology-block": "block-a", "kaiwo/topology-rack": "rack-a"})
    capacity = {**capacity, "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
            "status": {"capacity": capacity, "allocatable": capacity}}


def gpu_quota(cq: dict | None, flavor: str, resource: str) -> int:
    for group in ((cq or {}).get("spec") or {}).get("resourceGroups") or []:
        for f in group.get("flavors") or []:
            if f["name"] == flavor:
                for r in f["resources"]:
                    if r["name"] == resource:
                        return int(parse_quantity(r["nominalQuota"]))
    return 0


async def run(args: argparse.Namespace, plane: ControlPlane) -> None:
    from kaiwo_ctrl.queues import controller as queues
    from kaiwo_ctrl.runtime.manager.manager import Manager
    from kaiwo_ctrl.runtime.observe.metrics import Metrics
    from kaiwo_ctrl.settings import ensure_config

    admin = await Client.from_kubeconfig(str(plane.kubeconfig))
    for res in (KAIWOCONFIGS, KAIWOQUEUECONFIGS, CLUSTERQUEUES):  # CRD storage may still be initialising
        for _ in range(600):
            try:
                await admin.list(res, limit=1)
                break
            except ApiError:
                await asyncio.sleep(0.1)
    await ensure_config(admin)
    await admin.patch(KAIWOCONFIGS, "kaiwo", {"spec": {"dynamicallyUpdateDefaultClusterQueue": True}})

    client = await Client.from_kubeconfig(str(plane.kubeconfig))
    mgr = Manager(client, metrics=Metrics(), metrics_addr="127.0.0.1:0", health_addr="127.0.0.1:0")
    rec = queues.setup(mgr)
    stop = asyncio.Event()
    task = asyncio.create_task(mgr.run(stop))
    await asyncio.wait_for(rec.startup_done.wait(), 120)
    ctl = next(c for c in mgr.controllers if c.name == queues.CONTROLLER_NAME)

    async def idle() -> None:
        for _ in range(2):
            while len(ctl.queue) or ctl.queue.waiting_count() or ctl.active:
                await asyncio.sleep(0.05)
            await asyncio.sleep(2.0)

    await idle()
    base_writes, base_reconciles = client.writes, ctl.reconciles
    base = (rec.stats.node_patches, rec.stats.queue_config_writes, rec.stats.kueue_writes, rec.stats.status_writes)
    base_kueue = dict(rec.stats.kueue)

    half = args.nodes // 2
    bodies = [node(f"amd-{i:04d}", AMD, args.prelabelled) for i in range(half)]
    bodies += [node(f"nv-{i:04d}", NVIDIA, args.prelabelled) for i in range(args.nodes - half)]
    sem = asyncio.Semaphore(args.concurrency)

    async def create(body: dict) -> None:
        async with sem:
            await admin.create(NODES, body)

    t0 = time.monotonic()
    await asyncio.gather(*(create(b) for b in bodies))
    t_created = time.monotonic() - t0
    want_amd, want_nv = half * 8, (args.nodes - half) * 8
    t_converged = None
    while time.monotonic() - t0 < args.timeout:
        cq = await admin.get_or_none(CLUSTERQUEUES, "kaiwo")
        if gpu_quota(cq, AMD[0], AMD[1]) == want_amd and gpu_quota(cq, NVIDIA[0], NVIDIA[1]) == want_nv:
            t_converged = time.monotonic() - t0
            break
        await asyncio.sleep(0.05)
    await idle()
    stats = rec.stats
    kueue = {k: v - base_kueue.get(k, 0) for k, v in stats.kueue.items() if v - base_kueue.get(k, 0)}
    print(f"nodes created: {args.nodes} in {t_created:.2f}s (concurrency {args.concurrency}, prelabelled={args.prelabelled})")
    if t_converged is None:
        print(f"default ClusterQueue did NOT converge within {args.timeout}s")
    else:
        print(f"default ClusterQueue reflected all nodes {t_converged:.2f}s after the first create "
              f"({t_converged - t_created:.2f}s after the last)")
    print(f"reconciles during the burst: {ctl.reconciles - base_reconciles}")
    print(f"operator writes total: {client.writes - base_writes} (includes events)")
    print(f"  node label/taint patches: {stats.node_patches - base[0]}")
    print(f"  queue-config spec writes: {stats.queue_config_writes - base[1]}")
    print(f"  Kueue object writes: {stats.kueue_writes - base[2]} {kueue}")
    print(f"  queue-config status writes: {stats.status_writes - base[3]}")
    stop.set()
    await asyncio.wait_for(task, 60)
    await admin.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=500)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--prelabelled", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-nodepools-") as tmp:
        plane = ControlPlane(directory=Path(tmp), assets=locate_assets())
        plane.start(install_crds=True)
        try:
            loop.run(run(args, plane))
        finally:
            plane.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
