"""Memory of the informer caches with 10k objects (a benchmark, not a test).

Starts a local control plane, creates N KaiwoJobs and N batch Jobs shaped like
the ones the operator writes (labels, owner references, a full pod template),
then, in a fresh child process per mode, starts informers for both kinds,
waits for sync and reports the resident memory the caches added:

    python bench/bench_memory.py [--count 10000]

Modes: ``trimmed`` (the transforms the operator declares for these kinds:
:data:`kaiwo_ctrl.workloads.reconcile.caches.TRANSFORMS`, e.g. a Job's pod template
packed), ``default`` (the runtime's default transform: managedFields and the
last-applied annotation dropped, repeated strings shared) and ``raw`` (no
transform).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kaiwo_ctrl.runtime.process import loop

import procstat  # beside this script


def rss_kib() -> int:
    return procstat.status_kib("VmRSS")


def kaiwojob(i: int, ns: str) -> dict:
    return {
        "apiVersion": "kaiwo.silogen.ai/v1alpha1",
        "kind": "KaiwoJob",
        "metadata": {"name": f"job-{i:05d}", "namespace": ns, "labels": {"team": f"t{i % 7}"}},
        "spec": {"user": "bench@example.com", "image": "ghcr.io/silogen/rocm-ray:6.4", "entrypoint": "python train.py --epochs 3", "gpus": 0},
    }


def batchjob(i: int, ns: str) -> dict:
    labels = {"kaiwo.silogen.ai/user": "bench-example.com", "kaiwo.silogen.ai/name": f"job-{i:05d}", "kaiwo.silogen.ai/type": "job",
              "kaiwo.silogen.ai/run-id": f"uid-{i}", "kueue.x-k8s.io/queue-name": "kaiwo"}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"job-{i:05d}", "namespace": ns, "labels": labels},
        "spec": {
            "suspend": True,
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    "schedulerName": "kaiwo-scheduler",
                    "securityContext": {"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000},
                    "containers": [{
                        "name": "workload", "image": "ghcr.io/silogen/rocm-ray:6.4",
                        "command": ["/bin/sh", "-c", "python train.py --epochs 3"],
                        "env": [{"name": "NUM_GPUS", "value": "0"}, {"name": "NUM_REPLICAS", "value": "1"}, {"name": "NUM_GPUS_PER_REPLICA", "value": "0"}],
                        "resources": {"requests": {"cpu": "2", "memory": "16Gi"}, "limits": {"cpu": "2", "memory": "16Gi"}},
                        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
                    }],
                    "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "200Gi"}}],
                },
            },
        },
    }


async def populate(kubeconfig: str, count: int, ns: str) -> float:
    from kaiwo_ctrl.kinds import KAIWOJOBS
    from kaiwo_ctrl.runtime.api.client import Client
    from kaiwo_ctrl.runtime.api.resources import JOBS, NAMESPACES

    c = await Client.from_kubeconfig(kubeconfig)
    await c.create(NAMESPACES, {"metadata": {"name": ns}})
    sem = asyncio.Semaphore(64)

    async def one(i: int) -> None:
        async with sem:
            await c.create(KAIWOJOBS, kaiwojob(i, ns))
            await c.create(JOBS, batchjob(i, ns))

    t0 = time.monotonic()
    await asyncio.gather(*(one(i) for i in range(count)))
    await c.close()
    return time.monotonic() - t0


async def measure(kubeconfig: str, mode: str) -> dict:
    from kaiwo_ctrl.kinds import KAIWOJOBS
    from kaiwo_ctrl.runtime.cache.cache import Cache
    from kaiwo_ctrl.runtime.api.client import Client
    from kaiwo_ctrl.runtime.api.resources import JOBS
    from kaiwo_ctrl.workloads.reconcile.caches import TRANSFORMS

    c = await Client.from_kubeconfig(kubeconfig)
    await c.server_version()  # warm up the connection pool and imports
    gc.collect()
    before = rss_kib()
    cache = Cache(c)
    infs = []
    for res in (KAIWOJOBS, JOBS):
        inf = cache.informer(res, transform=TRANSFORMS.get(res.kind) if mode == "trimmed" else None)
        if mode == "raw":
            inf.transform = None
        infs.append(inf)
    t0 = time.monotonic()
    cache.start()
    assert await cache.wait_for_sync(600)
    sync = time.monotonic() - t0
    gc.collect()
    await asyncio.sleep(1)
    after = rss_kib()
    objects = sum(len(i.store) for i in infs)
    await cache.stop()
    await c.close()
    return {"mode": mode, "objects": objects, "rss_before_mib": before / 1024, "rss_after_mib": after / 1024,
            "cache_mib": (after - before) / 1024, "kib_per_object": (after - before) / max(objects, 1), "sync_seconds": sync}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=10000, help="KaiwoJobs (and as many Jobs) to create")
    ap.add_argument("--measure", help=argparse.SUPPRESS)
    ap.add_argument("--kubeconfig", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(loop.run(measure(args.kubeconfig, args.measure))))
        return

    from kaiwo_ctrl.local.controlplane import ControlPlane, locate_assets

    with tempfile.TemporaryDirectory() as d:
        cp = ControlPlane(Path(d), locate_assets()).start()
        try:
            took = loop.run(populate(str(cp.kubeconfig), args.count, "bench"))
            print(f"created {args.count} KaiwoJobs + {args.count} Jobs in {took:.1f}s ({2 * args.count / took:.0f} creates/s)")
            for mode in ("trimmed", "default", "raw"):
                out = subprocess.run([sys.executable, __file__, "--measure", mode, "--kubeconfig", str(cp.kubeconfig)],
                                     check=True, capture_output=True, text=True)
                r = json.loads(out.stdout.strip().splitlines()[-1])
                print(f"{r['mode']:8s} objects={r['objects']} cache={r['cache_mib']:.1f} MiB "
                      f"({r['kib_per_object']:.2f} KiB/object) process RSS={r['rss_after_mib']:.1f} MiB sync={r['sync_seconds']:.1f}s")
        finally:
            cp.stop()


if __name__ == "__main__":
    main()
