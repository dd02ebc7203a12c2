"""Two `kaiwo-ctrl run --leader-elect` processes: one reconciles, the other takes over."""

from __future__ import annotations

import signal
import time

import pytest

from support import eventually
from support.demo import LABEL
from support.operator import OperatorProcess

pytestmark = pytest.mark.integration

LEASE = "demo-leader.kaiwo-ctrl.dev"


class Operator(OperatorProcess):
    def __init__(self, kubeconfig: str, namespace: str, log_path) -> None:
        super().__init__(
            kubeconfig, log_path, "--leader-elect",
            f"--leader-election-id={LEASE}", f"--leader-election-namespace={namespace}", module="support.demo",
        )

    def is_leader(self) -> bool:  # type: ignore[override]
        return super().is_leader(LEASE)

    def reconciled(self) -> bool:
        return 'controller_runtime_reconcile_total{controller="demo-mirror",result="success"}' in self.metrics()


def mirror_exists(admin, ns, name) -> bool:
    return admin.get(f"/api/v1/namespaces/{ns}/configmaps/{name}-mirror").status_code == 200


def make_source(admin, ns, name) -> None:
    r = admin.post(
        f"/api/v1/namespaces/{ns}/configmaps",
        json={"metadata": {"name": name, "labels": {LABEL: "mirror"}}, "data": {"k": name}},
    )
    assert r.status_code == 201, r.text


async def test_one_leader_reconciles_and_standby_takes_over(control_plane, admin, namespace, tmp_path):
    kc = str(control_plane.kubeconfig)
    a = Operator(kc, namespace, tmp_path / "a.log")
    b = Operator(kc, namespace, tmp_path / "b.log")
    ops = [a, b]
    try:
        await eventually(lambda: a.ready() and b.ready(), timeout=60, what="both ready (standbys are ready too)")
        leader = await eventually(lambda: next((o for o in ops if o.is_leader()), None), timeout=60, what="a leader")
        standby = b if leader is a else a
        make_source(admin, namespace, "one")
        await eventually(lambda: mirror_exists(admin, namespace, "one"), what="leader reconciles")
        assert leader.reconciled()
        assert not standby.is_leader() and not standby.reconciled(), "the standby must not reconcile"

        # graceful stop releases the lease: the standby takes over within a retry period or two
        t0 = time.monotonic()
        assert leader.stop() == 0
        await eventually(standby.is_leader, timeout=30, what="standby takes over after graceful stop")
        graceful = time.monotonic() - t0
        make_source(admin, namespace, "two")
        await eventually(lambda: mirror_exists(admin, namespace, "two"), what="new leader reconciles")

        # a crash (kill -9) leaves the lease held: takeover after it expires (15 s)
        c = Operator(kc, namespace, tmp_path / "c.log")
        ops.append(c)
        await eventually(c.ready, timeout=60, what="third replica ready")
        t0 = time.monotonic()
        standby.stop(signal.SIGKILL)
        await eventually(c.is_leader, timeout=60, what="takeover after kill -9")
        crashed = time.monotonic() - t0
        make_source(admin, namespace, "three")
        await eventually(lambda: mirror_exists(admin, namespace, "three"), what="third leader reconciles")
        lease = admin.get(f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{LEASE}").json()
        assert lease["spec"]["leaseTransitions"] >= 2
        print(f"takeover after graceful stop: {graceful:.1f}s, after kill -9: {crashed:.1f}s")
    finally:
        for o in ops:
            if o.proc.poll() is None:
                o.stop(signal.SIGKILL)
