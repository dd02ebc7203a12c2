"""A real local control plane: etcd + kube-apiserver on loopback.

This is what ``kaiwo-ctrl local up`` starts, what the integration tests use as
their session fixture, and what ``hack/run-local.sh`` runs the operator
against. The binaries are built from Go modules by ``hack/envtest/build.sh``
into a cache outside the repository; the third-party CRDs come out of the
module zips their projects publish. Nothing here is a fake: the API server is
the real one, so admission, defaulting, CEL validation, watches, 409s and 410s
all behave as in a cluster.

Optionally (``components=SIMULATE_COMPONENTS``) the job/deployment/EndpointSlice/GC
controllers, the scheduler, kwok and the real Kueue controller manager run too,
so Kueue admits workloads whose Jobs create Pods that are scheduled onto
kwok-simulated Nodes and finish; and the real KubeRay and AppWrapper controllers
with a simulated Ray dashboard (:mod:`kaiwo_ctrl.local.ray`,
:mod:`kaiwo_ctrl.local.raydashboard`), so RayJobs and RayServices run too.

Its PKI (:mod:`kaiwo_ctrl.local.pki`, built on :class:`kaiwo_ctrl.runtime.net.certs.TinyCA`) has three independent CAs,
as a real cluster has: one signs the apiserver's serving certificate, one
signs client certificates (user = CN, groups = O), and one key pair signs
service-account tokens; all valid for a week (development and tests only).
"""

from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from kaiwo_ctrl.runtime.net.fetch import BlockingFetcher, fetch_blocking

from . import kwokstreams
from .components import Simulation, component_args
from .pki import client_ca, write_kubeconfig, write_pki
from .process import STOP_TIMEOUT, ControlPlaneError, Process, free_port, pid_alive, terminate, wait_until

REPO_ROOT = Path(__file__).resolve().parents[2]
#: Largest answer the set-up client reads (CRDs with long schemas are a few MiB at most).
ADMIN_MAX_BYTES = 64 << 20
START_TIMEOUT = float(os.environ.get("KAIWO_CTRL_START_TIMEOUT", "90"))
#: What ``local up --simulate`` runs besides etcd and kube-apiserver, in start order.
SIMULATE_COMPONENTS = ("controller-manager", "scheduler", "kwok", "kueue", "ray-dashboard", "kuberay", "appwrapper")
#: components started here rather than from :func:`.components.component_args`
_OWN_START = ("kueue", "ray-dashboard", "kuberay", "appwrapper")


@dataclass
class Assets:
    bin_dir: Path
    crd_dirs: list[Path]
    kwok_stages: Path | None = None
    #: Kueue's webhook manifests and CRD conversion patches (see kaiwo_ctrl.local.kueue)
    kueue_manifests: Path | None = None

    def binary(self, name: str) -> Path:
        p = self.bin_dir / name
        if name in ("kueue", "kuberay", "appwrapper"):
            p = self.bin_dir.parent / f"{name}-bin" / name
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
    #: with kwok: pod port -> 127.0.0.1 port for port-forward (None: the defaults), and whether exec runs commands
    sim_forwards: Mapping[int, int] | None = None
    sim_exec: bool = True
    #: the simulated Ray dashboard's port (KubeRay's HTTP_PROXY), once started
    ray_dashboard_port: int = 0

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
        write_pki(self.certs)
        if "kwok" in self.components:
            kwokstreams.write_certs(self.certs)
        try:
            self.start_etcd()
            self.start_apiserver()
            write_kubeconfig(self.kubeconfig, self.certs, self.url, "admin", ("system:masters",))
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
        wait_until(lambda: fetch_blocking("GET", f"{client}/health", timeout=2).status == 200, START_TIMEOUT, "etcd /health", p)

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
            *(kwokstreams.apiserver_args(c) if "kwok" in self.components else ()),
        ]

    def start_apiserver(self) -> None:
        p = Process("kube-apiserver", self.apiserver_args(), self.directory / "logs" / "kube-apiserver.log")
        p.start()
        self.processes["kube-apiserver"] = p
        verify = ssl.create_default_context(cafile=str(self.certs / "serving-ca.crt"))
        wait_until(
            lambda: fetch_blocking("GET", f"{self.url}/readyz", ssl=verify, timeout=2).status == 200,
            START_TIMEOUT,
            "kube-apiserver /readyz",
            p,
        )

    def stop_apiserver(self, sig: int = signal.SIGTERM) -> None:
        p = self.processes.pop("kube-apiserver", None)
        if p:
            p.stop(sig)

    # ----------------------------------------------------- users and access
    def add_user(self, name: str, groups: Iterable[str] = ()) -> Path:
        """Mint a client certificate for ``name`` and write a kubeconfig for it."""
        return write_kubeconfig(self.directory / f"kubeconfig-{name}", self.certs, self.url, name, tuple(groups))

    def admin_ssl_context(self) -> ssl.SSLContext:
        """TLS as the plane's admin (system:masters): its serving CA and the admin's client certificate."""
        ctx = ssl.create_default_context(cafile=str(self.certs / "serving-ca.crt"))
        ctx.load_cert_chain(*self._admin_pair())
        return ctx

    def admin(self) -> BlockingFetcher:
        """A synchronous admin client for the set-up (paths relative to the API server; close it)."""
        return BlockingFetcher(self.url, ssl=self.admin_ssl_context(), timeout=30, max_bytes=ADMIN_MAX_BYTES)

    def _admin_pair(self) -> tuple[str, str]:
        crt, key = self.certs / "admin.crt", self.certs / "admin.key"
        if not crt.exists():
            client_ca(self.certs).issue("admin", ("system:masters",)).write(crt, key)
        return str(crt), str(key)

    def _wait_default_namespace(self) -> None:
        with self.admin() as h:
            wait_until(lambda: h.get("/api/v1/namespaces/default").status == 200, 30, "default namespace")

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
        with self.admin() as h:
            for crd in crds:
                name = crd["metadata"]["name"]
                r = h.post(base, json=crd)
                if r.status == 409:
                    for _ in range(5):
                        cur = h.get(f"{base}/{name}").json()
                        crd["metadata"]["resourceVersion"] = cur["metadata"]["resourceVersion"]
                        r = h.put(f"{base}/{name}", json=crd)
                        if r.status != 409:
                            break
                if r.status >= 300:
                    raise ControlPlaneError(f"installing CRD {name}: {r.status} {r.text()[:500]}")
            for crd in crds:
                self._wait_crd(h, crd, timeout)
        return [c["metadata"]["name"] for c in crds]

    def _wait_crd(self, h: BlockingFetcher, crd: dict, timeout: float) -> None:
        name = crd["metadata"]["name"]
        group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]

        def established() -> bool:
            conds = h.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}").json()
            st = {c["type"]: c["status"] for c in conds.get("status", {}).get("conditions", [])}
            return st.get("Established") == "True" and st.get("NamesAccepted") == "True"

        wait_until(established, timeout, f"CRD {name} Established")
        for v in crd["spec"]["versions"]:
            if not v.get("served", True):
                continue

            def discoverable(version: str = v["name"]) -> bool:
                r = h.get(f"/apis/{group}/{version}")
                return r.status == 200 and any(res["name"] == plural for res in r.json().get("resources", []))

            wait_until(discoverable, timeout, f"discovery of {plural}.{group}/{v['name']}")

    # ------------------------------------------------------------ components
    def start_component(self, name: str) -> None:
        kc = self.add_user(name.replace("-", ""), ("system:masters",))
        if name == "kueue":
            self._start_kueue(kc)
            return
        if name in _OWN_START:
            self._start_ray_component(name, kc)
            return
        sim = Simulation(self.certs, self.sim_forwards, self.sim_exec)
        args = component_args(name, self.assets.binary, kc, self.directory, self.assets.kwok_stages, sim)
        p = Process(name, args, self.directory / "logs" / f"{name}.log")
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
        with self.admin() as h:
            self.install_crds(kueue.missing_crds(h, self.assets.kueue_manifests))
            kueue.install(h, self.assets.kueue_manifests, pki, ports.webhook)
        p = Process("kueue", [str(binary), f"--config={cfg}", f"--kubeconfig={kubeconfig}"], self.directory / "logs" / "kueue.log")
        p.start()
        self.processes["kueue"] = p
        health = f"http://127.0.0.1:{ports.health}/readyz"
        wait_until(lambda: fetch_blocking("GET", health, timeout=2).status == 200, START_TIMEOUT, "kueue /readyz", p)
        with self.admin() as h:
            wait_until(lambda: kueue.webhooks_answer(h), START_TIMEOUT, "Kueue's webhooks to answer the apiserver", p)

    def _start_ray_component(self, name: str, kubeconfig: Path) -> None:
        from kaiwo_ctrl.local import ray

        self.processes[name] = ray.start(self, name, kubeconfig, START_TIMEOUT)

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
                if pid and pid_alive(pid):
                    terminate(pid, signal.SIGTERM, STOP_TIMEOUT)
                    stopped.append(name)
            state_file.unlink()
        if remove and directory.exists():
            import shutil

            shutil.rmtree(directory, ignore_errors=True)
        return stopped
