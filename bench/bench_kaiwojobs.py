#!/usr/bin/env python
"""Benchmark: the KaiwoJob reconciler against a tight async baseline making the same writes.

Starts its own real control plane (etcd + kube-apiserver, ``kaiwo_ctrl.local``),
creates N KaiwoJobs (default 1000) in one namespace, then runs the operator
in-process (``kaiwo_ctrl.workloads.reconcile.controller.setup`` on a Manager, the way
``kaiwo-ctrl run`` wires it) and measures the time from manager start until
every KaiwoJob has its child Job and a written status (seen through the
operator's own caches). Then, on the same API server, a baseline with the raw
async client makes the same writes for another N KaiwoJobs as fast as it can
(N Job creates + N KaiwoJob status patches, up to --concurrency in flight),
with the request bodies prepared beforehand.

Not a test; run it by hand:

    .venv/bin/python bench/bench_kaiwojobs.py [--jobs 1000] [--workers 64] [--concurrency 256] [--profile out.prof]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import logging
import pstats
import statistics
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kaiwo_ctrl.kinds import CLUSTERQUEUES, KAIWOCONFIGS, KAIWOJOBS, KAIWOQUEUECONFIGS, LOCALQUEUES  # noqa: E402
from kaiwo_ctrl.runtime.process import loop  # noqa: E402
from kaiwo_ctrl.local.controlplane import ControlPlane, locate_assets  # noqa: E402
from kaiwo_ctrl.runtime.api.client import ApiError, Client  # noqa: E402
from kaiwo_ctrl.runtime.manager.manager import Manager  # noqa: E402
from kaiwo_ctrl.runtime.observe.metrics import Metrics  # noqa: E402
from kaiwo_ctrl.runtime.api.resources import EVENTS, JOBS, NAMESPACES  # noqa: E402
from kaiwo_ctrl.settings import ensure_config  # noqa: E402
from kaiwo_ctrl.workloads.reconcile import controller as workloads  # noqa: E402
from kaiwo_ctrl.workloads.reconcile.desired import desired_children  # noqa: E402
from kaiwo_ctrl.workloads.observe.status import ObservedChildren, observe  # noqa: E402
from kaiwo_ctrl.workloads.base.world import World  # noqa: E402

import procstat  # noqa: E402  (beside this script)


PLANE_PIDS: dict[str, int] = {}


def cpu_seconds() -> dict[str, float]:
    """CPU time used so far by this process (the operator or the baseline
    client) and by the API server and etcd."""
    out = {"python": time.process_time()}
    for name, pid in PLANE_PIDS.items():
        try:
            out[name] = procstat.cpu_seconds(pid)
        except (OSError, IndexError, ValueError):
            pass
    return out


def cpu_delta(before: dict[str, float]) -> dict[str, float]:
    now = cpu_seconds()
    return {k: now[k] - before.get(k, 0.0) for k in now}


def fmt_cpu(cpu: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.2f}" for k, v in cpu.items())


def kaiwojob(name: str) -> dict:
    return {
        "apiVersion": "kaiwo.silogen.ai/v1alpha1",
        "kind": "KaiwoJob",
        "metadata": {"name": name},
        "spec": {"user": "bench@example.com", "image": "busybox", "entrypoint": "sleep 1"},
    }


async def gather_limited(n: int, coros) -> list:
    sem = asyncio.Semaphore(n)

    async def one(c):
        async with sem:
            return await c

    return await asyncio.gather(*(one(c) for c in coros))


async def arrange(client: Client, namespaces: list[str], n: int) -> dict[str, list[dict]]:
    await ensure_config(client)
    for body in (
        {"apiVersion": "kaiwo.silogen.ai/v1alpha1", "kind": "KaiwoQueueConfig", "metadata": {"name": "kaiwo"},
         "spec": {"clusterQueues": [{"name": "kaiwo", "spec": {}}]}},
    ):
        try:
            await client.create(KAIWOQUEUECONFIGS, body)
        except ApiError as e:
            if not e.already_exists:
                raise
    try:
        await client.create(CLUSTERQUEUES, {"metadata": {"name": "kaiwo"}, "spec": {}})
    except ApiError as e:
        if not e.already_exists:
            raise
    out = {}
    for ns in namespaces:
        await client.create(NAMESPACES, {"metadata": {"name": ns}})
        out[ns] = await gather_limited(128, [client.create(KAIWOJOBS, kaiwojob(f"job-{i:05d}"), ns) for i in range(n)])
    return out


async def warm_up(admin: Client, kubeconfig: str) -> None:
    """Start and stop the operator once on an empty cluster, untimed. A fresh
    API server builds the storage and watch cache of each custom resource on
    first use (the first streaming list of an empty CRD waited about a second
    here); a long-running API server has done that long ago."""
    await arrange(admin, [], 0)
    client = await Client.from_kubeconfig(kubeconfig)
    mgr = Manager(client, metrics=Metrics(), metrics_addr="127.0.0.1:0", health_addr="127.0.0.1:0")
    workloads.setup(mgr)
    stop = asyncio.Event()
    task = asyncio.create_task(mgr.run(stop))
    await asyncio.wait_for(mgr.ready.wait(), 120)
    stop.set()
    await task
    await client.close()


async def run_operator(kubeconfig: str, ns: str, n: int, workers: int, events: bool = True) -> tuple[float, Counter]:
    client = await Client.from_kubeconfig(kubeconfig)
    mgr = Manager(client, metrics=Metrics(), metrics_addr="127.0.0.1:0", health_addr="127.0.0.1:0")
    if not events:  # analysis only: what the Kubernetes Events cost the API server
        mgr.recorder.event = lambda *a, **k: None  # type: ignore[method-assign]
    recs = workloads.setup(mgr, workers=workers)
    shared = recs["KaiwoJob"].shared
    stop = asyncio.Event()
    # Each round's operator starts from a clean heap, as a new process would:
    # the manager freezes its heap after the caches sync (runtime/process/heap.py),
    # which in this one process would otherwise keep every earlier round's
    # operator alive and make each settle collect the previous round's garbage.
    gc.unfreeze()
    gc.collect()
    cpu0 = cpu_seconds()
    t0 = time.perf_counter()
    task = asyncio.create_task(mgr.run(stop))

    # convergence is tracked by informer handlers, so that checking it costs
    # O(1) per event instead of a scan of every cached object every 10 ms
    # (which would be charged to the operator's CPU)
    jobs_seen: set[str] = set()
    with_status: set[str] = set()

    class Track:
        def __init__(self, seen: set[str], need_status: bool) -> None:
            self.seen, self.need_status = seen, need_status

        def on_add(self, obj: dict, initial: bool) -> None:
            self.on_update(None, obj)

        def on_update(self, old: dict | None, obj: dict) -> None:
            meta = obj["metadata"]
            if meta.get("namespace") == ns and (not self.need_status or (obj.get("status") or {}).get("status")):
                self.seen.add(meta["name"])

        def on_delete(self, obj: dict, tombstone: bool) -> None:
            pass

    shared.children["Job"].add_handler(Track(jobs_seen, False))
    shared.own["KaiwoJob"].add_handler(Track(with_status, True))
    synced_at = None
    while len(jobs_seen) < n or len(with_status) < n:
        if task.done():
            task.result()
        if synced_at is None and mgr.ready.is_set():
            synced_at = time.perf_counter() - t0
        await asyncio.sleep(0.01)
    elapsed = time.perf_counter() - t0
    cpu = cpu_delta(cpu0)
    events_at_converge = mgr.recorder.written
    # Events written during the burst, and how long the rest took to drain
    while mgr.recorder.backlog and time.perf_counter() - t0 < elapsed + 120:
        await asyncio.sleep(0.05)
    drained = time.perf_counter() - t0 - elapsed
    print(f"  events   : {events_at_converge} written during the burst ({events_at_converge / elapsed:.0f} Events/s), "
          f"{mgr.recorder.written - events_at_converge} more in the {drained:.1f} s after convergence")
    # let the reconciles triggered by our own writes finish, then count
    await asyncio.sleep(2.0)
    counts = Counter({k: v for k, v in client.counts.items()})
    reconciles = {c.name: c.reconciles for c in mgr.controllers}
    stop.set()
    await task
    await client.close()
    print(f"  operator reconciles: {reconciles}; events written: {mgr.recorder.written}, dropped: {mgr.recorder.dropped}")
    print(f"  operator phase CPU seconds: {fmt_cpu(cpu)}; caches synced after {synced_at or 0:.2f} s")
    print(f"  operator CPU per KaiwoJob: {cpu['python'] * 1000 / n:.2f} ms (process CPU time, target <= 1.2 ms)")
    return elapsed, counts


async def run_baseline(kubeconfig: str, objs: list[dict], concurrency: int) -> tuple[float, Counter]:
    """The same writes, prepared up front: a Job create and a status patch per KaiwoJob."""
    client = await Client.from_kubeconfig(kubeconfig, max_connections=concurrency)
    probe = Client(client.config)
    cfg = await probe.get(KAIWOCONFIGS, "kaiwo")
    await probe.close()
    world = World.from_dicts(config=cfg, nodes=[], queue_config={"clusterQueues": [{"name": "kaiwo"}]})
    now = datetime.now(timezone.utc)
    bodies = []
    for o in objs:
        (job,) = desired_children(o, world)
        status = observe("KaiwoJob", o, world, ObservedChildren(), None, now)
        bodies.append((o["metadata"], job, status))
    cpu0 = cpu_seconds()
    t0 = time.perf_counter()

    async def one(meta, job, status):
        ns, name = meta["namespace"], meta["name"]
        await client.patch_status(KAIWOJOBS, name, {"metadata": {"resourceVersion": meta["resourceVersion"]}, "status": status}, ns)
        await client.create(JOBS, job)

    await gather_limited(concurrency, [one(*b) for b in bodies])
    elapsed = time.perf_counter() - t0
    print(f"  baseline phase CPU seconds: {fmt_cpu(cpu_delta(cpu0))}")
    counts = Counter(client.counts)
    await client.close()
    return elapsed, counts


def fmt(counts: Counter) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(counts.items()))


async def clear(client: Client, ns: str) -> None:
    """Delete what a round left behind (no garbage collector runs here)."""
    for res in (KAIWOJOBS, JOBS, EVENTS, LOCALQUEUES):
        # Background: batch/v1 Jobs default to orphaning, which leaves them behind
        # with an orphan finalizer only a garbage collector would remove; the
        # next rounds' operators would then cache and look at every earlier Job
        await client.request(
            "DELETE", res.path(ns), body={"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
        )


async def main_async(args: argparse.Namespace, plane: ControlPlane) -> None:
    kubeconfig = str(plane.kubeconfig)
    admin = await Client.from_kubeconfig(kubeconfig)
    await warm_up(admin, kubeconfig)
    results = []
    for rnd in range(args.rounds):
        op_ns, base_ns = f"bench-operator-{rnd}", f"bench-baseline-{rnd}"
        operator_first = rnd % 2 == 0
        print(f"round {rnd + 1}/{args.rounds} ({'operator' if operator_first else 'baseline'} first)")
        measured = {}
        for phase in (("operator", "baseline") if operator_first else ("baseline", "operator")):
            if phase == "operator":
                # created before the manager starts; the clock starts with the manager
                await arrange(admin, [op_ns], args.jobs)
                prof = cProfile.Profile() if args.profile and rnd == 0 else None
                if prof:
                    prof.enable()
                measured["operator"] = await run_operator(kubeconfig, op_ns, args.jobs, args.workers, not args.no_events)
                if prof:
                    prof.disable()
                    prof.dump_stats(args.profile)
                    pstats.Stats(prof).sort_stats("tottime").print_stats(20)
                await clear(admin, op_ns)
            else:
                # (created only while no operator runs: it watches every namespace)
                objs = await arrange(admin, [base_ns], args.jobs)
                measured["baseline"] = await run_baseline(kubeconfig, objs[base_ns], args.concurrency)
                await clear(admin, base_ns)
        (op_time, op_counts), (base_time, base_counts) = measured["operator"], measured["baseline"]
        op_requests = sum(v for k, v in op_counts.items() if k != "WATCH")
        base_requests = sum(base_counts.values())
        print(f"  operator : {op_time:7.2f} s until all {args.jobs} KaiwoJobs have a Job and a status "
              f"(workers={args.workers}; includes cache sync)")
        print(f"             {op_requests} requests, {op_requests / op_time:6.0f} req/s; by verb: {fmt(op_counts)}")
        print(f"  baseline : {base_time:7.2f} s for {args.jobs} Job creates + {args.jobs} status patches "
              f"(concurrency={args.concurrency})")
        print(f"             {base_requests} requests, {base_requests / base_time:6.0f} req/s; by verb: {fmt(base_counts)}")
        print(f"  ratio    : {op_time / base_time:5.2f}x")
        results.append((op_time, base_time))
    await admin.close()
    ratios = sorted(o / b for o, b in results)
    print()
    print(f"operator times: {', '.join(f'{o:.2f}' for o, _ in results)} s; baseline times: "
          f"{', '.join(f'{b:.2f}' for _, b in results)} s")
    print(f"median ratio over {len(ratios)} rounds: {statistics.median(ratios):.2f}x (target <= 1.5x); "
          f"best {ratios[0]:.2f}x, worst {ratios[-1]:.2f}x")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--workers", type=int, default=64, help="workers per controller")
    p.add_argument("--concurrency", type=int, default=256, help="baseline requests in flight")
    p.add_argument("--no-events", action="store_true",
                   help="analysis only: the operator records no Kubernetes Events (not how it runs)")
    p.add_argument("--rounds", type=int, default=5, help="operator/baseline pairs, alternating which goes first")
    p.add_argument("--profile", help="write a cProfile of the first operator phase here")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="bench-kaiwojobs-") as d:
        plane = ControlPlane(directory=Path(d), assets=locate_assets(build=True))
        t = time.perf_counter()
        plane.start(install_crds=True)
        PLANE_PIDS.update({name: p.pid for name, p in plane.processes.items() if p.pid})
        print(f"control plane up in {time.perf_counter() - t:.1f} s; event loop {loop.loop_name()}")
        try:
            loop.run(main_async(args, plane))
        finally:
            plane.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
