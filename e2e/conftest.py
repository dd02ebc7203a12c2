"""Fixtures of the e2e suite: a simulated cluster and the operator run the way
``config/default`` deploys it.

* ``sim_plane``: real etcd + kube-apiserver + kube-controller-manager +
  kube-scheduler + kwok + Kueue, plus the kaiwo-scheduler (see :mod:`e2e.simcluster`).
  Only third-party CRDs are preinstalled; ``config/default`` brings ours.
* ``installed``: ``kubectl apply -k config/default`` for real. The manager
  Deployment is then scaled to 0: there is no container runtime here, so the
  same program runs as a local process instead (``operator``).
* ``operator``: ``kaiwo-ctrl`` started with the command, args and env of the
  rendered manager container. Its identity is the ServiceAccount of
  config/default (a token from the TokenRequest API), so it has exactly the
  generated RBAC and no more. Two deliberate differences from the Pod, both
  because a test process shares the host's network and file system: the
  health/metrics bind addresses get free loopback ports instead of :8081/:8080,
  and the kubeconfig comes from ``KUBECONFIG`` instead of the in-cluster
  service-account mount.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from e2e.simcluster import start_sim_plane
from kaiwo_ctrl.local.controlplane import free_port
from kaiwo_ctrl.local.pki import b64
from support.admin import admin_http

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
#: How long a simulated Job Pod runs: long enough that a test can act while two
#: jobs hold the GPU quota (submit a higher-priority job, add a node).
E2E_POD_RUN_MS = int(os.environ.get("KAIWO_SIM_POD_RUN_MS", "20000"))
#: Where kwok forwards pod port 8080 of every simulated pod (a test's server listens there).
E2E_FORWARD_TARGET = free_port()


def tool(name: str) -> str:
    exe = BIN / name
    found = str(exe) if exe.exists() else shutil.which(name)
    assert found, f"{name} not found: install the dev extras (pip install -e '.[dev]')"
    return found


def wait_for(fn, timeout: float, what: str, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            last = fn()
        except (httpx.HTTPError, OSError) as e:
            last = e
        if last and not isinstance(last, Exception):
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last: {last!r}")
        time.sleep(interval)


def get(admin: httpx.Client, path: str) -> dict | None:
    """GET an object or list; None when it does not exist."""
    r = admin.get(path)
    if r.status_code == 404:
        return None
    assert r.status_code == 200, r.text
    return r.json()


def condition(obj: dict | None, type_: str) -> dict:
    """The status condition of that type ({} when absent)."""
    return next((c for c in ((obj or {}).get("status") or {}).get("conditions") or [] if c["type"] == type_), {})


def render(path: str) -> list[dict]:
    out = subprocess.run([tool("kubectl"), "kustomize", str(ROOT / path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


class Kubectl:
    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = kubeconfig

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        out = subprocess.run([tool("kubectl"), *args], capture_output=True, text=True, env=env, timeout=120)
        if check:
            assert out.returncode == 0, f"kubectl {' '.join(args)}:\n{out.stdout}\n{out.stderr}"
        return out


@pytest.fixture(scope="session")
def sim_plane(tmp_path_factory: pytest.TempPathFactory):
    plane = start_sim_plane(tmp_path_factory.mktemp("sim-plane"), run_ms=E2E_POD_RUN_MS,
                            sim_forwards={8080: E2E_FORWARD_TARGET})
    yield plane
    plane.stop()


@pytest.fixture(scope="session")
def admin(sim_plane):
    with admin_http(sim_plane) as h:
        yield h


@pytest.fixture(scope="session")
def kubectl(sim_plane) -> Kubectl:
    return Kubectl(sim_plane.kubeconfig)


@pytest.fixture(scope="session")
def deployed() -> dict:
    """The rendered config/default: the manager Deployment and its container, and (under "proxy")
    the proxy's Deployment, container and ServiceAccount."""
    docs = render("config/default")

    def named(kind: str, name: str) -> dict:
        return next(d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name)

    dep, pdep = named("Deployment", "kaiwo-controller-manager"), named("Deployment", "kaiwo-proxy")
    container = next(c for c in dep["spec"]["template"]["spec"]["containers"] if c["name"] == "manager")
    proxy = {"deployment": pdep, "container": next(c for c in pdep["spec"]["template"]["spec"]["containers"] if c["name"] == "proxy"),
             "service_account": named("ServiceAccount", pdep["spec"]["template"]["spec"]["serviceAccountName"])}
    sa = named("ServiceAccount", dep["spec"]["template"]["spec"]["serviceAccountName"])
    return {"docs": docs, "deployment": dep, "container": container, "service_account": sa, "proxy": proxy}


@pytest.fixture(scope="session")
def installed(kubectl, deployed, admin):
    out = kubectl("apply", "-k", str(ROOT / "config" / "default"))
    for d in (deployed["deployment"], deployed["proxy"]["deployment"]):  # they run as local processes here
        kubectl("scale", "deployment", d["metadata"]["name"], "-n", d["metadata"]["namespace"], "--replicas=0")
    return out.stdout


def service_account_kubeconfig(plane, admin, namespace: str, name: str, path: Path) -> Path:
    r = admin.post(
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
        json={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 7200}},
    )
    assert r.status_code == 201, r.text
    token = r.json()["status"]["token"]
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "sim",
                "cluster": {"server": plane.url, "certificate-authority-data": b64((plane.certs / "serving-ca.crt").read_bytes())},
            }
        ],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": "sim", "context": {"cluster": "sim", "user": name}}],
        "current-context": "sim",
    }
    path.write_text(yaml.safe_dump(cfg))
    path.chmod(0o600)
    return path


class OperatorProcess:
    def __init__(self, argv: list[str], env: dict[str, str], log: Path, health: int, metrics: int) -> None:
        self.argv, self.env, self.log = argv, env, log
        self.health_port, self.metrics_port = health, metrics
        fh = open(log, "ab")  # noqa: SIM115 - handed to the child
        self.popen = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
        fh.close()

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self, timeout: float = 40) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(10)
        return self.popen.returncode


def _substitute_port(arg: str, flag: str, port: int) -> str:
    if arg.startswith(flag + "=") and arg != f"{flag}=0":  # a listener that is off stays off
        return f"{flag}=127.0.0.1:{port}"
    return arg


def bound_port(argv: list[str], flag: str) -> int:
    """The loopback port :func:`operator_command` gave ``flag``."""
    return int(next(a for a in argv if a.startswith(flag + "=")).rpartition(":")[2])


def operator_command(deployed: dict, kubeconfig: Path, health: int, metrics: int) -> tuple[list[str], dict[str, str]]:
    """argv and environment of the manager container (or of another Deployment's, such as the
    proxy's: ``{"deployment": ..., "container": ...}``), for a local process."""
    c = deployed["container"]
    namespace = deployed["deployment"]["metadata"]["namespace"]
    command = list(c["command"])
    command[0] = tool(command[0])
    proxy, proxy_gateway = free_port(), free_port()
    args = [
        _substitute_port(
            _substitute_port(
                _substitute_port(_substitute_port(a, "--health-probe-bind-address", health), "--metrics-bind-address", metrics),
                "--proxy-bind-address", proxy,
            ),
            "--proxy-gateway-bind-address", proxy_gateway,
        )
        for a in c["args"]
    ]
    # the model config is mounted from the ConfigMap kustomize generates from this file
    args = [f"--model-config={ROOT / 'config' / 'manager' / 'model-config.yaml'}" if a.startswith("--model-config=") else a
            for a in args]
    if any(a.startswith("--webhook-bind-address=") for a in args):
        # the apiserver calls the webhooks of this local process at a URL instead of the Service
        webhook = free_port()
        args = [_substitute_port(a, "--webhook-bind-address", webhook) for a in args] + ["--webhook-url-host=127.0.0.1"]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp"), "KUBECONFIG": str(kubeconfig)}
    for e in c.get("env", []):
        if "value" in e:
            env[e["name"]] = e["value"]
        elif e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.namespace":
            env[e["name"]] = namespace
        else:
            raise AssertionError(f"env {e['name']}: a source this test cannot provide: {e}")
    return command + args, env


@pytest.fixture(scope="session")
def cluster_nodes(kubectl, admin, installed):
    """The simulated Nodes of config/samples, Ready before the operator starts
    (a cluster has its nodes before an operator is installed; the operator's
    start-up task discovers the node pools and labels the nodes)."""
    kubectl("apply", "-f", str(ROOT / "config" / "samples" / "nodes_kwok.yaml"))

    def ready():
        nodes = admin.get("/api/v1/nodes").json()["items"]
        ok = [n for n in nodes if any(c["type"] == "Ready" and c["status"] == "True" for c in n.get("status", {}).get("conditions", []))]
        return len(ok) == 3 and ok

    return wait_for(ready, 90, "kwok to mark the sample Nodes Ready")


def _as_service_account(plane, admin, deployment: dict, work: Path, what: str):
    """Run ``deployment``'s container command as a local process under its own ServiceAccount, until
    /readyz; yields the process, then stops it and asserts a clean exit."""
    sa = deployment["service_account"]["metadata"]
    kubeconfig = service_account_kubeconfig(plane, admin, sa["namespace"], sa["name"], work / "kubeconfig")
    health, metrics = free_port(), free_port()
    argv, env = operator_command(deployment, kubeconfig, health, metrics)
    proc = OperatorProcess(argv, env, work / f"{what}.log", health, metrics)

    def ready() -> bool:
        if proc.popen.poll() is not None:
            raise AssertionError(f"{what} exited with {proc.popen.returncode}:\n{proc.text()[-4000:]}")
        return httpx.get(f"http://127.0.0.1:{health}/readyz", timeout=2).status_code == 200

    wait_for(ready, 120, f"{what} /readyz")
    yield proc
    rc = proc.stop()
    assert rc == 0, f"{what} exit code {rc}:\n{proc.text()[-4000:]}"


@pytest.fixture(scope="session")
def operator(sim_plane, admin, installed, cluster_nodes, deployed, tmp_path_factory):
    yield from _as_service_account(sim_plane, admin, deployed, tmp_path_factory.mktemp("operator"), "operator")


FORBIDDEN = re.compile(r"(?<![\w.])403(?![\w.])|forbidden", re.IGNORECASE)
#: the API server's NamespaceLifecycle refusal, a 403 that is no missing grant: a child the operator makes
#: again while a test deletes its namespace ("unable to create new content in namespace N because it is being
#: terminated")
TERMINATING = re.compile(r"unable to create new content in namespace \S+ because it is being terminated")


def forbidden_lines(text: str) -> list[str]:
    """The operator's log lines that say a request was refused for want of a grant."""
    return [line for line in text.splitlines() if FORBIDDEN.search(line) and not TERMINATING.search(line)]


@pytest.fixture(scope="module")
def proxy(sim_plane, admin, installed, deployed, operator, tmp_path_factory):
    """The proxy Deployment's command (kaiwo-ctrl proxy) as a local process, as the proxy's own
    ServiceAccount (kaiwo-proxy, bound only to the proxy's roles); ``ports``: its two listeners."""
    for proc in _as_service_account(sim_plane, admin, deployed["proxy"], tmp_path_factory.mktemp("proxy"), "proxy"):
        proc.ports = {"http": bound_port(proc.argv, "--proxy-bind-address"),
                      "gateway": bound_port(proc.argv, "--proxy-gateway-bind-address")}
        yield proc
