"""Two `kaiwo-ctrl run --leader-elect` processes: one reconciles, the other takes over."""

from __future__ import annotations

import signal
import time
import uuid

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
        # the series exists at 0 on every replica; a reconcile makes it positive
        return self.metric_sum("controller_runtime_reconcile_total", controller="demo-mirror", result="success") > 0


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


ZERO_SERIES = (
    'controller_runtime_reconcile_total{controller="demo-mirror",result="success"} 0.0',
    'controller_runtime_reconcile_total{controller="demo-mirror",result="error"} 0.0',
    'controller_runtime_reconcile_errors_total{controller="demo-mirror"} 0.0',
    'controller_runtime_reconcile_time_seconds_count{controller="demo-mirror"} 0.0',
    'controller_runtime_max_concurrent_reconciles{controller="demo-mirror"}',
    'controller_runtime_active_workers{controller="demo-mirror"} 0.0',
    'workqueue_depth{controller="demo-mirror",name="demo-mirror"} 0.0',
    'workqueue_adds_total{controller="demo-mirror",name="demo-mirror"} 0.0',
    'workqueue_retries_total{controller="demo-mirror",name="demo-mirror"} 0.0',
)


async def test_standby_exports_zero_valued_controller_metrics(control_plane, admin, namespace, tmp_path):
    """Dashboards see every controller's series on every replica, from the first scrape."""
    kc = str(control_plane.kubeconfig)
    a = Operator(kc, namespace, tmp_path / "a.log")
    b = None
    try:
        await eventually(a.is_leader, timeout=60, what="first replica leads")
        b = Operator(kc, namespace, tmp_path / "b.log")
        await eventually(b.ready, timeout=60, what="standby ready")
        text = b.metrics()
        assert 'leader_election_master_status{name="' + LEASE + '"} 0.0' in text
        missing = [s for s in ZERO_SERIES if s not in text]
        assert not missing, f"standby lacks zero-valued series: {missing}"
    finally:
        for o in (a, b):
            if o is not None and o.proc.poll() is None:
                o.stop(signal.SIGKILL)


async def test_missing_lease_namespace_fails_fast_naming_namespace_and_flag(control_plane, tmp_path):
    """Without its Lease namespace the operator exits with a message, instead of retrying forever."""
    missing = f"no-such-ns-{uuid.uuid4().hex[:6]}"
    op = OperatorProcess(
        str(control_plane.kubeconfig), tmp_path / "op.log", "--leader-elect",
        f"--leader-election-id={LEASE}", f"--leader-election-namespace={missing}", module="support.demo",
    )
    try:
        await eventually(lambda: not op.alive(), timeout=90, what="the operator exits")
        assert op.proc.returncode == 2
        text = op.log_text()
        assert f"leader-election namespace '{missing}'" in text
        assert "--leader-election-namespace" in text and f"kubectl create namespace {missing}" in text
        assert "leader election attempt failed" not in text  # no retry loop before giving up
    finally:
        if op.alive():
            op.stop(signal.SIGKILL)
