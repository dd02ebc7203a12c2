"""The real KubeRay and AppWrapper controllers as components of the simulated plane.

``hack/envtest/build.sh`` builds KubeRay's operator
(``github.com/ray-project/kuberay/ray-operator``) and AppWrapper's controller
(``github.com/project-codeflare/appwrapper/cmd``) from their Go modules, at the
versions ``versions.env`` pins for their CRDs. Here they get what a cluster
install would give them, on loopback:

* KubeRay: leader election off, metrics and probes on 127.0.0.1, and
  ``HTTP_PROXY`` pointing at the simulated Ray dashboard
  (:mod:`kaiwo_ctrl.local.raydashboard`): KubeRay reaches a Ray head's
  dashboard by its Service's cluster DNS name, which only that proxy answers.
  ``NO_PROXY`` is left empty on purpose: Go never proxies loopback addresses,
  so the API server (127.0.0.1) and the Pod IPs (127.64.0.0/16) stay direct.
* AppWrapper: its configuration ConfigMap written before it starts (it reads
  ``<NAMESPACE>/appwrapper-operator-config``) with webhooks off, as upstream's
  own development mode (``make run``) runs it, leader election off, and
  metrics and probes on 127.0.0.1 (it would bind ``:8443``/``:8081``).
  Without webhooks nothing defaults or validates an AppWrapper's spec: the
  operator writes complete ones.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import yaml

from kaiwo_ctrl.runtime.net.fetch import BlockingFetcher, fetch_blocking

from .process import ControlPlaneError, Process, free_port, wait_until

APPWRAPPER_NAMESPACE = "appwrapper-system"
APPWRAPPER_CONFIGMAP = "appwrapper-operator-config"


def dashboard_args(kubeconfig: Path, port: int, ready_file: Path, python: str) -> list[str]:
    """argv of the simulated Ray dashboard (this package, run by this Python)."""
    return [python, "-m", "kaiwo_ctrl.local.raydashboard", f"--kubeconfig={kubeconfig}", f"--port={port}",
            f"--ready-file={ready_file}"]


def kuberay_args(binary: Path, metrics: int, health: int) -> list[str]:
    return [
        str(binary),
        f"--metrics-addr=127.0.0.1:{metrics}",
        f"--health-probe-bind-address=127.0.0.1:{health}",
        "--enable-leader-election=false",
        "--log-stdout-encoder=console",
        "--qps=100",
        "--burst=200",
    ]


def kuberay_env(kubeconfig: Path, dashboard_port: int) -> dict[str, str]:
    """KubeRay's environment: the dashboard proxy (only non-loopback hosts use it)."""
    proxy = f"http://127.0.0.1:{dashboard_port}"
    return {"KUBECONFIG": str(kubeconfig), "HTTP_PROXY": proxy, "http_proxy": proxy, "NO_PROXY": "", "no_proxy": "",
            "HTTPS_PROXY": "", "https_proxy": ""}


def appwrapper_config(metrics: int, health: int) -> dict:
    """AppWrapper's OperatorConfig: upstream's defaults but webhooks off and everything on loopback."""
    return {
        "webhooksEnabled": False,
        "controllerManager": {
            "metrics": {"bindAddress": f"127.0.0.1:{metrics}"},
            "health": {"bindAddress": f"127.0.0.1:{health}"},
            "leaderElection": False,
        },
        # the RBAC check on the creator is done by its (absent) webhook; the
        # node monitor watches autopilot's GPU-health labels, absent here
        "appwrapper": {"userRBACAdmissionCheck": False, "autopilot": {"injectAntiAffinities": False, "monitorNodes": False}},
    }


def install_appwrapper_config(h: BlockingFetcher, metrics: int, health: int) -> None:
    """The namespace and the ConfigMap AppWrapper reads at start (replaced if present)."""
    r = h.post("/api/v1/namespaces", json={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": APPWRAPPER_NAMESPACE}})
    if r.status not in (201, 409):
        raise RuntimeError(f"namespace {APPWRAPPER_NAMESPACE}: {r.status} {r.text()[:300]}")
    path = f"/api/v1/namespaces/{APPWRAPPER_NAMESPACE}/configmaps"
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": APPWRAPPER_CONFIGMAP},
          "data": {"config.yaml": yaml.safe_dump(appwrapper_config(metrics, health))}}
    h.request("DELETE", f"{path}/{APPWRAPPER_CONFIGMAP}")
    r = h.post(path, json=cm)
    if r.status != 201:
        raise RuntimeError(f"configmap {APPWRAPPER_CONFIGMAP}: {r.status} {r.text()[:300]}")


def appwrapper_env(kubeconfig: Path) -> dict[str, str]:
    return {"KUBECONFIG": str(kubeconfig), "NAMESPACE": APPWRAPPER_NAMESPACE}


def child_env(extra: dict[str, str]) -> dict[str, str]:
    """This process's environment without inherited proxy settings, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy", "no_proxy", "all_proxy")}
    env.update({k: v for k, v in extra.items() if v})
    return env


def start(plane: Any, name: str, kubeconfig: Path, timeout: float) -> Process:
    """Start ``ray-dashboard``, ``kuberay`` or ``appwrapper`` for ``plane`` (a
    ControlPlane) and wait up to ``timeout`` until it listens or answers its probe."""
    log = plane.directory / "logs" / f"{name}.log"
    if name == "ray-dashboard":
        ready = plane.directory / "ray-dashboard.port"
        ready.unlink(missing_ok=True)
        plane.ray_dashboard_port = free_port()
        p = Process(name, dashboard_args(kubeconfig, plane.ray_dashboard_port, ready, sys.executable), log, env=child_env({}))
        p.start()
        try:
            wait_until(ready.exists, timeout, "the simulated Ray dashboard to listen", p)
        except BaseException:
            p.stop()
            raise
        return p
    metrics, health = free_port(), free_port()
    if name == "kuberay":
        if not plane.ray_dashboard_port:
            raise ControlPlaneError("kuberay needs the ray-dashboard component started before it")
        args = kuberay_args(plane.assets.binary("kuberay"), metrics, health)
        env = child_env(kuberay_env(kubeconfig, plane.ray_dashboard_port))
    else:
        with plane.admin() as h:
            install_appwrapper_config(h, metrics, health)
        args, env = [str(plane.assets.binary("appwrapper"))], child_env(appwrapper_env(kubeconfig))
    p = Process(name, args, log, env=env)
    p.start()
    # never AppWrapper's /readyz: its check asks the manager for the webhook server,
    # which starts that server (on :9443, wanting certificates) even with webhooks off
    url = f"http://127.0.0.1:{health}/" + ("readyz" if name == "kuberay" else "healthz")
    try:
        wait_until(lambda: fetch_blocking("GET", url, timeout=2).status == 200, timeout, f"{name} {url}", p)
    except BaseException:
        p.stop()
        raise
    return p
