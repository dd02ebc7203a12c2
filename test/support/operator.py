"""Run `kaiwo-ctrl run` as a separate process, the way users run it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx

from kaiwo_ctrl.local.controlplane import free_port

TEST_DIR = Path(__file__).resolve().parents[1]


class OperatorProcess:
    def __init__(self, kubeconfig: str, log_path: Path, *args: str, module: str = "kaiwo_ctrl") -> None:
        """``module``: what ``python -m`` runs with the ``run`` options (a
        test-support module such as ``support.demo`` is found through PYTHONPATH)."""
        self.metrics_port, self.health_port = free_port(), free_port()
        # each process gets its own proxy port (the default :8000 would clash)
        self.proxy_port = free_port()
        if not any(a.startswith("--proxy-bind-address") for a in args):
            args = (f"--proxy-bind-address=127.0.0.1:{self.proxy_port}", *args)
        # and its own loopback Gateway listener port (the default :8001 would clash too)
        self.proxy_gateway_port = free_port()
        if not any(a.startswith("--proxy-gateway-bind-address") for a in args):
            args = (f"--proxy-gateway-bind-address=127.0.0.1:{self.proxy_gateway_port}", *args)
        self.log_path = log_path
        self.log = open(log_path, "ab")  # noqa: SIM115
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(TEST_DIR), env.get("PYTHONPATH", "")) if p)
        self.proc = subprocess.Popen(
            [
                sys.executable, "-m", module, "run",
                f"--kubeconfig={kubeconfig}",
                f"--metrics-bind-address=127.0.0.1:{self.metrics_port}",
                f"--health-probe-bind-address=127.0.0.1:{self.health_port}",
                *args,
            ],
            stdout=self.log, stderr=subprocess.STDOUT, env=env,
        )

    def metrics(self) -> str:
        try:
            return httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=2).text
        except httpx.HTTPError:
            return ""

    def metric_sum(self, name: str, **labels: str) -> float:
        total = 0.0
        for line in self.metrics().splitlines():
            if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def writes(self, exclude: tuple[str, ...] = ("leases",)) -> float:
        """Writes by the operator, not counting lease renewals (leader election renews every 2 s)."""
        return sum(self.writes_by_resource(exclude).values())

    def writes_by_resource(self, exclude: tuple[str, ...] = ("leases",)) -> dict[str, float]:
        out: dict[str, float] = {}
        for line in self.metrics().splitlines():
            if not line.startswith("rest_client_resource_requests_total{"):
                continue
            if not any(f'method="{m}"' in line for m in ("POST", "PUT", "PATCH", "DELETE")):
                continue
            if any(f'resource="{r}"' in line for r in exclude):
                continue
            key = line.split("{", 1)[1].split("}", 1)[0]
            out[key] = out.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
        return out

    def is_leader(self, lease: str) -> bool:
        return f'leader_election_master_status{{name="{lease}"}} 1.0' in self.metrics()

    def ready(self) -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{self.health_port}/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        rc = self.proc.wait(timeout=60)
        self.log.close()
        return rc

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")
