"""Runnables on two managers sharing one lease (real kube-apiserver): the leader's run only on the
leader, every replica's on the standby too, from the moment its caches synced."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from kaiwo_ctrl.runtime.api.client import Client
from kaiwo_ctrl.runtime.manager.manager import LeaderElectionConfig, Manager
from kaiwo_ctrl.runtime.observe.metrics import Metrics
from support import eventually

pytestmark = pytest.mark.integration


async def test_a_standby_runs_its_replica_runnables_but_not_the_leaders(control_plane, namespace):
    lease = f"runnables-{uuid.uuid4().hex[:6]}"
    ran: dict[str, set[str]] = {"a": set(), "b": set()}
    managers, stops, tasks = {}, {}, {}

    def runnable(who: str, kind: str):
        async def run():
            ran[who].add(kind)
            await asyncio.Event().wait()
        return run

    for who in ("a", "b"):
        client = await Client.from_kubeconfig(str(control_plane.kubeconfig))
        mgr = Manager(client, metrics=Metrics(), metrics_addr=None, health_addr=None,
                      leader_election=LeaderElectionConfig(name=lease, namespace=namespace, identity=who))
        for kind, kw in (("leader", {"leader": True}), ("replica", {}), ("early", {"before_caches": True})):
            mgr.add_runnable(kind, runnable(who, kind), **kw)
        managers[who], stops[who] = mgr, asyncio.Event()
        tasks[who] = asyncio.create_task(mgr.run(stops[who]))
        if who == "a":
            await asyncio.wait_for(mgr.is_leader.wait(), 60)
    try:
        await eventually(lambda: ran["b"] == {"replica", "early"}, timeout=60, what="the standby's replica runnables")
        assert ran["a"] == {"leader", "replica", "early"}
        assert not managers["b"].is_leader.is_set() and "leader" not in ran["b"]
        stops["a"].set()  # a graceful stop gives the lease up: b leads and starts its leader runnable
        await asyncio.wait_for(tasks["a"], 60)
        await eventually(lambda: "leader" in ran["b"], timeout=60, what="the new leader's leader runnable")
    finally:
        for who in ("a", "b"):
            stops[who].set()
        await asyncio.wait_for(asyncio.gather(*tasks.values(), return_exceptions=True), 60)
