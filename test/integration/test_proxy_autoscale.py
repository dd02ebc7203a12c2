"""The autoscaler in `kaiwo-ctrl run` (leader) with a second `kaiwo-ctrl proxy` process.

One test walks the whole story with short windows: load held at a fake
backend through both proxy processes scales the Model up to a count only the
sum over both can reach; the state ConfigMap carries the window across an
operator restart (the new leader continues the saved window instead of
starting from zeros); once the load is gone the Model scales back down.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid

import aiohttp
import httpx
import orjson
import pytest

from kaiwo_ctrl.local.controlplane import free_port
from proxy_support import backends, create_model, get_model, server_pod  # noqa: F401 - fixtures
from support import eventually
from support.operator import OperatorProcess
from support.tokens import bearer, grant_model_user, service_account_token

pytestmark = pytest.mark.integration


class ProxyProcess:
    """`kaiwo-ctrl proxy` as a separate process."""

    def __init__(self, kubeconfig: str, log_path) -> None:
        self.proxy_port, self.metrics_port, self.health_port = free_port(), free_port(), free_port()
        self.proxy_gateway_port = free_port()
        self.log = open(log_path, "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kaiwo_ctrl", "proxy", f"--kubeconfig={kubeconfig}",
             f"--proxy-bind-address=127.0.0.1:{self.proxy_port}", f"--proxy-gateway-bind-address=127.0.0.1:{self.proxy_gateway_port}",
             f"--metrics-bind-address=127.0.0.1:{self.metrics_port}",
             f"--health-probe-bind-address=127.0.0.1:{self.health_port}"],
            stdout=self.log, stderr=subprocess.STDOUT,
        )

    def ready(self) -> bool:
        try:
            # serving (it starts once its caches synced): 401 is --proxy-auth kubernetes refusing no token
            return httpx.get(f"http://127.0.0.1:{self.proxy_port}/openai/v1/models", timeout=2).status_code in (200, 401)
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=60)
        self.log.close()


def state_window(admin, ns: str, cm: str, key: str) -> list[float] | None:
    r = admin.get(f"/api/v1/namespaces/{ns}/configmaps/{cm}")
    if r.status_code != 200 or "models" not in (r.json().get("data") or {}):
        return None
    entry = orjson.loads(r.json()["data"]["models"])["models"].get(key)
    return entry["window"] if entry else None


def continues(old: list[float], new: list[float]) -> bool:
    """``new`` is ``old`` moved on by k >= 1 samples."""
    n = len(old)
    return len(new) == n and any(new[: n - k] == old[k:] for k in range(1, n))


async def test_autoscaler_sums_two_proxies_survives_restart_and_scales_down(control_plane, admin, namespace, backends, tmp_path):
    kc = str(control_plane.kubeconfig)
    cm = f"state-{uuid.uuid4().hex[:6]}"
    b = await backends("auto")
    b.hold.clear()
    create_model(admin, namespace, "auto", replicas=1, minReplicas=1, maxReplicas=4, targetRequests=1, scaleDownDelaySeconds=1)
    server_pod(admin, namespace, "auto", b)

    second = ProxyProcess(kc, tmp_path / "proxy.log")
    a_metrics = free_port()
    # both proxies run --proxy-auth kubernetes (the default): the counts are of an allowed caller's requests
    token = service_account_token(admin, namespace, "autoscaled")
    grant_model_user(admin, namespace, namespace, "autoscaled")

    def start_operator(log: str) -> OperatorProcess:
        op = OperatorProcess(
            kc, tmp_path / log, "--leader-elect", f"--leader-election-namespace={namespace}",
            f"--leader-election-id=autoscale-{cm}", f"--metrics-bind-address=127.0.0.1:{a_metrics}",
            "--autoscaler-interval=1s", "--autoscaler-time-window=20s", f"--autoscaler-state-configmap={cm}",
            f"--autoscaler-peers=127.0.0.1:{a_metrics},127.0.0.1:{second.metrics_port}",
        )
        op.metrics_port = a_metrics  # the later flag wins
        return op

    op = start_operator("op1.log")
    http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300))
    held: list[asyncio.Task] = []
    try:
        await eventually(op.ready, timeout=120, what="operator ready")
        await eventually(second.ready, timeout=120, what="second proxy ready")
        await eventually(lambda: op.is_leader(f"autoscale-{cm}"), timeout=60, what="leader")

        async def call(port: int) -> int:
            async with http.post(f"http://127.0.0.1:{port}/openai/v1/completions", json={"model": "auto", "prompt": "x"},
                                 headers=bearer(token)) as r:
                await r.read()
                return r.status

        for port in (op.proxy_port, second.proxy_port):
            held += [asyncio.create_task(call(port)) for _ in range(3)]
        await eventually(lambda: b.held == 6, timeout=60, what="6 requests held at the backend")
        # 3 active per proxy, target 1 per replica: only the sum over both proxies reaches 4
        await eventually(lambda: get_model(admin, namespace, "auto")["spec"]["replicas"] == 4, timeout=120,
                         what="scaled up to 4", interval=0.5)
        key = f"{namespace}/auto"
        assert max(state_window(admin, namespace, cm, key)) == 6.0

        op.stop()  # its 3 held requests are cut; the second proxy keeps 3
        saved = state_window(admin, namespace, cm, key)
        op = start_operator("op2.log")
        await eventually(lambda: (w := state_window(admin, namespace, cm, key)) is not None and w != saved,
                         timeout=120, what="the new leader's first write", interval=0.2)
        assert continues(saved, state_window(admin, namespace, cm, key)), "the window was reloaded, not restarted"
        assert get_model(admin, namespace, "auto")["spec"]["replicas"] == 4

        b.hold.set()
        await eventually(lambda: get_model(admin, namespace, "auto")["spec"]["replicas"] == 1, timeout=120,
                         what="scaled down to minReplicas", interval=0.5)
        assert "Traceback" not in op.log_text()
    finally:
        b.hold.set()
        await asyncio.gather(*held, return_exceptions=True)
        await http.close()
        op.stop()
        second.stop()
