#!/usr/bin/env python
"""Benchmark: the Model controller converging N Models, then idling.

Starts its own control plane, creates N Models (default 100, one replica
each, CPU profile) in one namespace, starts the Model controller in a
Manager (as ``kaiwo-ctrl run`` wires it) and measures the time until every
Model has its server Pod and ``status.replicas.all == 1`` in the operator's
caches. Then it marks every Pod Ready, waits for the statuses, and counts the
operator's writes over an idle period (should be 0).

Not a test; run it by hand:

    .venv/bin/python bench/bench_models.py [--models 100] [--idle 30]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kaiwo_ctrl.kinds import MODELS  # noqa: E402
from kaiwo_ctrl.runtime.process import loop  # noqa: E402
from kaiwo_ctrl.local.controlplane import ControlPlane, locate_assets  # noqa: E402
from kaiwo_ctrl.runtime.api.client import Client  # noqa: E402
from kaiwo_ctrl.runtime.manager.manager import Manager  # noqa: E402
from kaiwo_ctrl.runtime.observe.metrics import Metrics  # noqa: E402
from kaiwo_ctrl.runtime.api.resources import NAMESPACES, PODS  # noqa: E402
from kaiwo_ctrl.serving.model import controller as serving  # noqa: E402
from kaiwo_ctrl.serving.model.config import ConfigSource  # noqa: E402

WRITES = ("POST", "PUT", "PATCH", "DELETE")


def model(ns: str, i: int) -> dict:
    return {"apiVersion": "kubeai.org/v1", "kind": "Model", "metadata": {"name": f"m-{i}", "namespace": ns},
            "spec": {"features": ["TextGeneration"], "engine": "VLLM", "url": f"hf://org/m-{i}",
                     "resourceProfile": "cpu:1", "minReplicas": 1}}


async def wait(pred, what: str, timeout: float = 600) -> None:
    t = time.monotonic()
    while not pred():
        if time.monotonic() - t > timeout:
            raise TimeoutError(what)
        await asyncio.sleep(0.02)


async def main_async(args: argparse.Namespace, plane: ControlPlane) -> None:
    admin = await Client.from_kubeconfig(str(plane.kubeconfig))
    ns = "bench-models"
    await admin.create(NAMESPACES, {"metadata": {"name": ns}})
    sem = asyncio.Semaphore(32)

    async def create(i: int) -> None:
        async with sem:
            await admin.create(MODELS, model(ns, i))

    await asyncio.gather(*(create(i) for i in range(args.models)))
    client = await Client.from_kubeconfig(str(plane.kubeconfig))
    mgr = Manager(client, metrics=Metrics(), metrics_addr="127.0.0.1:0", health_addr="127.0.0.1:0")
    rec = serving.setup(mgr, ConfigSource(None), workers=args.workers)
    stop = asyncio.Event()
    t0 = time.perf_counter()
    task = asyncio.create_task(mgr.run(stop))

    def converged(ready: int) -> bool:
        models = rec.models.list(ns)
        return len(models) == args.models and all(
            (m.get("status") or {}).get("replicas") == {"all": 1, "ready": ready} for m in models)

    await wait(lambda: converged(0), "converge")
    elapsed = time.perf_counter() - t0
    print(f"{args.models} Models converged (Pod created, status written) in {elapsed:.2f} s "
          f"after manager start; {rec.controller.reconciles} reconciles; writes {dict((k, client.counts[k]) for k in WRITES)}")

    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    pods, _ = await admin.list_all(PODS, ns)
    t1 = time.perf_counter()

    async def ready(p: dict) -> None:
        async with sem:
            await admin.patch(PODS, p["metadata"]["name"], {"status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": now}]}}, ns, subresource="status")

    await asyncio.gather(*(ready(p) for p in pods))
    await wait(lambda: converged(1), "ready")
    print(f"  statuses ready=1 written {time.perf_counter() - t1:.2f} s after marking {len(pods)} Pods Ready")
    await asyncio.sleep(2)
    before = {k: client.counts[k] for k in WRITES}
    r0 = rec.controller.reconciles
    for m in rec.models.list(ns):  # a full resync: every Model reconciled again, nothing changed
        rec.controller.enqueue(serving.Request(ns, m["metadata"]["name"]))
    await asyncio.sleep(args.idle)
    after = {k: client.counts[k] for k in WRITES}
    print(f"  idle {args.idle:.0f} s with a forced reconcile of every Model: {rec.controller.reconciles - r0} reconciles, "
          f"writes {sum(after.values()) - sum(before.values())} ({ {k: after[k] - before[k] for k in WRITES} })")
    stop.set()
    await task
    await client.close()
    await admin.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", type=int, default=100)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--idle", type=float, default=30.0)
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="bench-models-") as d:
        plane = ControlPlane(directory=Path(d), assets=locate_assets(build=True))
        plane.start(install_crds=True)
        try:
            loop.run(main_async(args, plane))
        finally:
            plane.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
