"""A real local control plane: etcd + kube-apiserver on loopback.

This is what ``kaiwo-ctrl local up`` starts, what the integration tests use as
their session fixture, and what ``hack/run-local.sh`` runs the operator
against. The binaries are built from Go modules by ``hack/envtest/build.sh``
into a cache outside the repository; the third-party CRDs come out of the
module zips their projects publish. Nothing here is a fake: the API server is
the real one, so admission, defaulting, CEL validation, watches, 409s and 410s
all behave as in a cluster.

Optionally (``components=("controller-manager", "scheduler", "kwok", "kueue")``)
the job/deployment/GC controllers, the scheduler, kwok and the real Kueue
controller manager run too, so Kueue admits workloads whose Jobs create Pods
that are scheduled onto kwok-simulated Nodes and finish.

Its PKI (:class:`kaiwo_ctrl.runtime.certs.TinyCA`) has three independent CAs,
as a real cluster has: one signs the apiserver's serving certificate, one
signs client certificates (user = CN, groups = O), and one key pair signs
service-account tokens; all valid for a week (development and tests only).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import yaml

from kaiwo_ctrl.runtime.certs import TinyCA

REPO_ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT = float(os.environ.get("KAIWO_CTRL_START_TIMEOUT", "90"))
STOP_TIMEOUT = 20.0
#: What ``local up --simulate`` runs besides etcd and kube-apiserver, in start order.
SIMULATE_COMPONENTS = ("controller-manager", "scheduler", "kwok", "kueue")


class ControlPlaneError(RuntimeError):
    pass


@dataclass
class Assets:
    bin_dir: Path
    crd_dirs: list[Path]
    kwok_stages: Path | None = None
    #: Kueue's webhook manifests and CRD conversion patches (see kaiwo_ctrl.local.kueue)
    kueue_manifests: Path | None = None

    def binary(self, name: str) -> Path:
        p = self.bin_dir / name
        if name == "kueue":
            p = self.bin_dir.parent / "kueue-bin" / name
        if not p.is_file():
            raise ControlPlaneError(f"missing binary {p}; run ./hack/envtest/build.sh")
        return p


def locate_assets(build: bool = True) -> Assets:
    """Find the control-plane binaries and CRDs.

    ``KAIWO_CTRL_ASSETS`` may point at a directory holding ``bin/`` and
    ``crds/`` (as build.sh writes it). Otherwise the repository's build script
    is run, which is a no-op when its cache is warm.
    """
    root = os.environ.get("KAIWO_CTRL_ASSETS")
    if not root:
        script = REPO_ROOT / "hack" / "envtest" / "build.sh"
        if not build or not script.exists():
            raise ControlPlaneError("set KAIWO_CTRL_ASSETS to the directory build.sh printed")
        out = subprocess.run([str(script)], check=True, capture_output=True, text=True)
        root = out.stdout.strip().splitlines()[-1]
    base = Path(root)
    crd_dirs = [base / "crds"]
    own = REPO_ROOT / "config" / "crd" / "bases"
    if own.is_dir():
        crd_dirs.insert(0, own)
    stages = base / "kwok-stages.yaml"
    kueue = base / "kueue-manifests"
    return Assets(
        bin_dir=base / "bin",
        crd_dirs=crd_dirs,
        kwok_stages=stages if stages.exists() else None,
        kueue_manifests=kueue if kueue.is_dir() else None,
    )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(predicate, timeout: float, what: str, proc: "Process | None" = None) -> None:
    deadline = time.monotonic() + timeout
    last_err: Exception | None = None
    while time.monotonic() < deadline:
        if proc is not None and proc.popen is not None and proc.popen.poll() is not None:
            raise ControlPlaneError(f"{proc.name} exited with {proc.popen.returncode}; log tail:\n{proc.log_tail()}")
        try:
            if predicate():
                return
        except Exception as exc:  # noqa: BLE001 - polled until timeout
            last_err = exc
        time.sleep(0.1)
    tail = proc.log_tail() if proc else ""
    raise ControlPlaneError(f"timed out after {timeout:.0f}s waiting for {what}: {last_err}\n{tail}")


@dataclass
class Process:
    name: str
    args: list[str]
    log: Path
    popen: subprocess.Popen | None = None
    pid: int | None = None

    def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        fh = open(self.log, "ab")  # noqa: SIM115 - handed to the child
        self.popen = subprocess.Popen(
            self.args,
            stdin=subprocess.DEVNULL,
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        fh.close()
        self.pid = self.popen.pid

    def alive(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is None
        return self.pid is not None and _pid_alive(self.pid)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = STOP_TIMEOUT) -> None:
        if self.pid is None:
            return
        _terminate(self.pid, sig, timeout, self.popen)
        self.popen = None

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie we are not the parent of still answers kill(0); check /proc
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _terminate(pid: int, sig: int, timeout: float, popen: subprocess.Popen | None = None) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if popen is not None:
            if popen.poll() is not None:
                return
        elif not _pid_alive(pid):
            return
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    if popen is not None:
        popen.wait(timeout=10)


@dataclass
class ControlPlane:
    """etcd + kube-apiserver (+ optional controllers) in ``directory``."""

    directory: Path
    assets: Assets
    components: Sequence[str] = ()
    etcd_port: int = 0
    etcd_peer_port: int = 0
    api_port: int = 0
    processes: dict[str, Process] = field(default_factory=dict)

    # ---------------------------------------------------------------- paths
    @property
    def certs(self) -> Path:
        return self.directory / "certs"

    @property
    def kubeconfig(self) -> Path:
        return self.directory / "kubeconfig"

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    @property
    def state_file(self) -> Path:
        return self.directory / "state.json"

    # ---------------------------------------------------------------- start
    def start(self, install_crds: bool = True, crd_files: list[Path] | None = None) -> "ControlPlane":
        """Start everything; install every CRD (or only ``crd_files``) before the components."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self.etcd_port = self.etcd_port or free_port()
        self.etcd_peer_port = self.etcd_peer_port or free_port()
        self.api_port = self.api_port or free_port()
        self._write_pki()
        try:
            self.start_etcd()
            self.start_apiserver()
            self._write_kubeconfig(self.kubeconfig, "admin", ("system:masters",))
            self._wait_default_namespace()
            if install_crds:
                self.install_crds(self.crd_files() if crd_files is None else crd_files)
            for c in self.components:
                self.start_component(c)
        except BaseException:
            self.stop()
            raise
        self.save_state()
        return self

    def _write_pki(self) -> None:
        self.certs.mkdir(parents=True, exist_ok=True)
        if (self.certs / "client-ca.crt").exists():
            return  # reuse on restart so existing kubeconfigs stay valid
        serving_ca, client_ca, sa = TinyCA("serving-ca"), TinyCA("client-ca"), TinyCA("sa-signer")
        serving_ca.pair.write(self.certs / "serving-ca.crt", self.certs / "serving-ca.key")
        client_ca.pair.write(self.certs / "client-ca.crt", self.certs / "client-ca.key")
        sa.pair.write(self.certs / "sa-signer.crt", self.certs / "sa-signer.key")
        serving_ca.issue("localhost", server=True, dns=("localhost",), ips=("127.0.0.1",)).write(
            self.certs / "apiserver.crt", self.certs / "apiserver.key"
        )

    def _client_ca(self) -> TinyCA:
        from cryptography import x509
        from cryptography.hazmat.primitives import serialization

        ca = TinyCA.__new__(TinyCA)
        from kaiwo_ctrl.runtime.certs import CertPair

        ca.pair = CertPair(
            x509.load_pem_x509_certificate((self.certs / "client-ca.crt").read_bytes()),
            serialization.load_pem_private_key((self.certs / "client-ca.key").read_bytes(), None),  # type: ignore[arg-type]
        )
        return ca

    def start_etcd(self) -> None:
        data = self.directory / "etcd-data"
        data.mkdir(parents=True, exist_ok=True)
        client = f"http://127.0.0.1:{self.etcd_port}"
        p = Process(
            "etcd",
            [
                str(self.assets.binary("etcd")),
                f"--data-dir={data}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls=http://127.0.0.1:{self.etcd_peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{self.etcd_peer_port}",
                f"--initial-cluster=default=http://127.0.0.1:{self.etcd_peer_port}",
                "--unsafe-no-fsync=true",
                "--quota-backend-bytes=8589934592",
                "--log-level=warn",
            ],
            self.directory / "logs" / "etcd.log",
        )
        p.start()
        self.processes["etcd"] = p
        _wait(lambda: httpx.get(f"{client}/health", timeout=2).status_code == 200, START_TIMEOUT, "etcd /health", p)

    def apiserver_args(self) -> list[str]:
        c = self.certs
        return [
            str(self.assets.binary("kube-apiserver")),
            f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            f"--cert-dir={c}",
            f"--tls-cert-file={c / 'apiserver.crt'}",
            f"--tls-private-key-file={c / 'apiserver.key'}",
            f"--client-ca-file={c / 'client-ca.crt'}",
            f"--secure-port={self.api_port}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--allow-privileged=true",
            "--authorization-mode=RBAC",
            # no ServiceAccount controller runs; with kwok, no node-lifecycle controller
            # lifts the not-ready taint the apiserver puts on new Nodes either
            "--disable-admission-plugins=ServiceAccount" + (",TaintNodesByCondition" if "kwok" in self.components else ""),
            f"--service-account-issuer=https://127.0.0.1:{self.api_port}/",
            f"--service-account-key-file={c / 'sa-signer.crt'}",
            f"--service-account-signing-key-file={c / 'sa-signer.key'}",
            "--enable-priority-and-fairness=false",
            "--max-requests-inflight=0",
            "--max-mutating-requests-inflight=0",
            "--event-ttl=1h",
            "-v=0",
        ]

    def start_apiserver(self) -> None:
        p = Process("kube-apiserver", self.apiserver_args(), self.directory / "logs" / "kube-apiserver.log")
        p.start()
        self.processes["kube-apiserver"] = p
        import ssl

        verify = ssl.create_default_context(cafile=str(self.certs / "serving-ca.crt"))
        _wait(
            lambda: httpx.get(f"{self.url}/readyz", verify=verify, timeout=2).status_code == 200,
            START_TIMEOUT,
            "kube-apiserver /readyz",
            p,
        )

    def stop_apiserver(self, sig: int = signal.SIGTERM) -> None:
        p = self.processes.pop("kube-apiserver", None)
        if p:
            p.stop(sig)

    # ----------------------------------------------------- users and access
    def _write_kubeconfig(self, path: Path, user: str, groups: tuple[str, ...]) -> Path:
        pair = self._client_ca().issue(user, groups)
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "kaiwo-local",
                    "cluster": {
                        "server": self.url,
                        "certificate-authority-data": _b64((self.certs / "serving-ca.crt").read_bytes()),
                    },
                }
            ],
            "users": [
                {
                    "name": user,
                    "user": {
                        "client-certificate-data": _b64(pair.cert_pem),
                        "client-key-data": _b64(pair.key_pem),
                    },
                }
            ],
            "contexts": [{"name": "kaiwo-local", "context": {"cluster": "kaiwo-local", "user": user}}],
            "current-context": "kaiwo-local",
        }
        path.write_text(yaml.safe_dump(cfg))
        path.chmod(0o600)
        return path

    def add_user(self, name: str, groups: Iterable[str] = ()) -> Path:
        """Mint a client certificate for ``name`` and write a kubeconfig for it."""
        return self._write_kubeconfig(self.directory / f"kubeconfig-{name}", name, tuple(groups))

    def http(self) -> httpx.Client:
        """A synchronous admin client (set-up and test assertions)."""
        import ssl

        ctx = ssl.create_default_context(cafile=str(self.certs / "serving-ca.crt"))
        ctx.load_cert_chain(*self._admin_pair())
        return httpx.Client(base_url=self.url, verify=ctx, timeout=30)

    def _admin_pair(self) -> tuple[str, str]:
        crt, key = self.certs / "admin.crt", self.certs / "admin.key"
        if not crt.exists():
            self._client_ca().issue("admin", ("system:masters",)).write(crt, key)
        return str(crt), str(key)

    def _wait_default_namespace(self) -> None:
        with self.http() as h:
            _wait(lambda: h.get("/api/v1/namespaces/default").status_code == 200, 30, "default namespace")

    # ------------------------------------------------------------------ CRDs
    def crd_files(self) -> list[Path]:
        files: list[Path] = []
        for d in self.assets.crd_dirs:
            if d.is_dir():
                files += sorted(p for p in d.glob("*.yaml") if p.name != "kustomization.yaml")
        return files

    def install_crds(self, files: Iterable[Path], timeout: float = 90) -> list[str]:
        """Create or update every CRD in ``files``; wait until each is Established and discoverable."""
        crds = []
        for f in files:
            # libyaml's C loader: the pure-Python one took seconds for the third-party CRDs
            for doc in yaml.load_all(f.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
                if doc and doc.get("kind") == "CustomResourceDefinition":
                    crds.append(doc)
        base = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
        with self.http() as h:
            for crd in crds:
                name = crd["metadata"]["name"]
                body = json.dumps(crd)
                r = h.post(base, content=body, headers={"Content-Type": "application/json"})
                if r.status_code == 409:
                    for _ in range(5):
                        cur = h.get(f"{base}/{name}").json()
                        crd["metadata"]["resourceVersion"] = cur["metadata"]["resourceVersion"]
                        r = h.put(f"{base}/{name}", content=json.dumps(crd), headers={"Content-Type": "application/json"})
                        if r.status_code != 409:
                            break
                if r.status_code >= 300:
                    raise ControlPlaneError(f"installing CRD {name}: {r.status_code} {r.text[:500]}")
            for crd in crds:
                self._wait_crd(h, crd, timeout)
        return [c["metadata"]["name"] for c in crds]

    def _wait_crd(self, h: httpx.Client, crd: dict, timeout: float) -> None:
        name = crd["metadata"]["name"]
        group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]

        def established() -> bool:
            conds = h.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}").json()
            st = {c["type"]: c["status"] for c in conds.get("status", {}).get("conditions", [])}
            return st.get("Established") == "True" and st.get("NamesAccepted") == "True"

        _wait(established, timeout, f"CRD {name} Established")
        for v in crd["spec"]["versions"]:
            if not v.get("served", True):
                continue

            def discoverable(version: str = v["name"]) -> bool:
                r = h.get(f"/apis/{group}/{version}")
                return r.status_code == 200 and any(res["name"] == plural for res in r.json().get("resources", []))

            _wait(discoverable, timeout, f"discovery of {plural}.{group}/{v['name']}")

    # ------------------------------------------------------------ components
    def start_component(self, name: str) -> None:
        kc = self.add_user(name.replace("-", ""), ("system:masters",))
        logs = self.directory / "logs"
        if name == "controller-manager":
            port = free_port()
            args = [
                str(self.assets.binary("kube-controller-manager")),
                f"--kubeconfig={kc}",
                "--leader-elect=false",
                "--controllers=job-controller,garbage-collector-controller,namespace-controller,"
                "replicaset-controller,deployment-controller",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                "--kube-api-qps=500",
                "--kube-api-burst=1000",
                "--concurrent-job-syncs=10",
            ]
            p = Process(name, args, logs / f"{name}.log")
        elif name == "scheduler":
            # one scheduler, two profiles: the default one and ``kaiwo-scheduler``,
            # the scheduler name the operator puts on the pods it generates
            cfg_path = self.directory / "scheduler-config.yaml"
            cfg_path.write_text(yaml.safe_dump(scheduler_config(str(kc))))
            args = [
                str(self.assets.binary("kube-scheduler")),
                f"--config={cfg_path}",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
            ]
            p = Process(name, args, logs / f"{name}.log")
        elif name == "kwok":
            if self.assets.kwok_stages is None:
                raise ControlPlaneError("kwok stages missing; run ./hack/envtest/build.sh")
            args = [
                str(self.assets.binary("kwok")),
                f"--kubeconfig={kc}",
                f"--config={self.assets.kwok_stages}",
                "--manage-all-nodes=false",
                "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                f"--server-address=127.0.0.1:{free_port()}",
            ]
            p = Process(name, args, logs / f"{name}.log")
        elif name == "kueue":
            self._start_kueue(kc)
            return
        else:
            raise ControlPlaneError(f"unknown component {name!r}")
        p.start()
        self.processes[name] = p
        time.sleep(0.2)
        if not p.alive():
            raise ControlPlaneError(f"{name} exited at once:\n{p.log_tail()}")

    def _start_kueue(self, kubeconfig: Path) -> None:
        """Kueue's controller manager, its webhooks served on loopback (see kaiwo_ctrl.local.kueue)."""
        from kaiwo_ctrl.local import kueue

        if self.assets.kueue_manifests is None:
            raise ControlPlaneError("Kueue's manifests are missing; run ./hack/envtest/build.sh")
        binary = self.assets.binary("kueue")
        work = self.directory / "kueue"
        ports = kueue.KueuePorts(webhook=free_port(), health=free_port(), metrics=free_port())
        pki = kueue.KueuePKI.create()
        pki.write_cert_dir(work / "certs")
        cfg = work / "config.yaml"
        cfg.write_text(yaml.safe_dump(kueue.configuration(ports, work / "certs")))
        with self.http() as h:
            self.install_crds(kueue.missing_crds(h, self.assets.kueue_manifests))
            kueue.install(h, self.assets.kueue_manifests, pki, ports.webhook)
        p = Process("kueue", [str(binary), f"--config={cfg}", f"--kubeconfig={kubeconfig}"], self.directory / "logs" / "kueue.log")
        p.start()
        self.processes["kueue"] = p
        health = f"http://127.0.0.1:{ports.health}/readyz"
        _wait(lambda: httpx.get(health, timeout=2).status_code == 200, START_TIMEOUT, "kueue /readyz", p)
        with self.http() as h:
            _wait(lambda: kueue.webhooks_answer(h), START_TIMEOUT, "Kueue's webhooks to answer the apiserver", p)

    # ------------------------------------------------------------ stop/state
    def stop(self) -> None:
        for name in reversed(list(self.processes)):
            self.processes.pop(name).stop()
        if self.state_file.exists():
            self.state_file.unlink()

    def save_state(self) -> None:
        state = {
            "api_port": self.api_port,
            "etcd_port": self.etcd_port,
            "etcd_peer_port": self.etcd_peer_port,
            "kubeconfig": str(self.kubeconfig),
            "pids": {n: p.pid for n, p in self.processes.items()},
        }
        self.state_file.write_text(json.dumps(state, indent=2))

    @classmethod
    def down(cls, directory: Path, remove: bool = True) -> list[str]:
        """Stop the processes recorded in ``directory/state.json`` (for ``local down``)."""
        stopped = []
        state_file = directory / "state.json"
        if state_file.exists():
            state = json.loads(state_file.read_text())
            for name, pid in reversed(list(state.get("pids", {}).items())):
                if pid and _pid_alive(pid):
                    _terminate(pid, signal.SIGTERM, STOP_TIMEOUT)
                    stopped.append(name)
            state_file.unlink()
        if remove and directory.exists():
            import shutil

            shutil.rmtree(directory, ignore_errors=True)
        return stopped


def scheduler_config(kubeconfig: str) -> dict:
    """kube-scheduler configuration with the default and the ``kaiwo-scheduler`` profiles.

    ``kaiwo-scheduler`` packs GPU pods onto the fullest nodes first, the way a
    GPU cluster's scheduler is usually tuned.
    """
    gpu_packing = {
        "name": "NodeResourcesFit",
        "args": {
            "scoringStrategy": {
                "type": "RequestedToCapacityRatio",
                "resources": [{"name": "amd.com/gpu", "weight": 5}, {"name": "nvidia.com/gpu", "weight": 5}],
                "requestedToCapacityRatio": {"shape": [{"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}]},
            }
        },
    }
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": kubeconfig},
        "leaderElection": {"leaderElect": False},
        "profiles": [
            {"schedulerName": "default-scheduler"},
            {"schedulerName": "kaiwo-scheduler", "pluginConfig": [gpu_packing]},
        ],
    }


def _b64(data: bytes) -> str:
    import base64

    return base64.b64encode(data).decode()
