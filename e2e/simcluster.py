"""A simulated cluster for the e2e tests and ``hack/run-local.sh --simulate``.

On top of the real local control plane (etcd, kube-apiserver,
kube-controller-manager, kube-scheduler serving both the default and the
``kaiwo-scheduler`` profile, and kwok, see :mod:`kaiwo_ctrl.local.controlplane`)
this adds what a Kaiwo cluster has and the plain control plane lacks:

* kwok stages in which a Job's Pod stays Running for a while before it
  succeeds (the stock "fast" stages complete it at once, so nobody could see
  it run);
* the admission plugin ``OwnerReferencesPermissionEnforcement``, so setting
  ``blockOwnerDeletion`` really needs ``<owner>/finalizers: update``;
* the real Kueue controller manager (see :mod:`kaiwo_ctrl.local.kueue`),
  started after the third-party CRDs are installed: it creates and admits the
  Workloads of the operator's Jobs, Pods and Deployments and unsuspends them;
* the real KubeRay and AppWrapper controllers and a simulated Ray dashboard
  (:mod:`kaiwo_ctrl.local.ray`, :mod:`kaiwo_ctrl.local.raydashboard`), so
  RayJobs, RayClusters and RayServices (in AppWrappers) run on kwok Pods.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import yaml

from kaiwo_ctrl.local.controlplane import SIMULATE_COMPONENTS, Assets, ControlPlane, locate_assets

ROOT = Path(__file__).resolve().parents[1]
#: How long a simulated Job Pod stays Running before kwok marks it Succeeded.
POD_RUN_MS = int(os.environ.get("KAIWO_SIM_POD_RUN_MS", "8000"))


def slow_job_stages(src: Path, dst: Path, run_ms: int = POD_RUN_MS) -> Path:
    """A copy of kwok's stages where ``pod-complete`` waits ``run_ms`` first."""
    docs = [d for d in yaml.safe_load_all(src.read_text()) if d]
    for d in docs:
        if d.get("kind") == "Stage" and d["metadata"]["name"] == "pod-complete":
            d["spec"]["delay"] = {"durationMilliseconds": run_ms}
    dst.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return dst


class SimPlane(ControlPlane):
    """The simulated control plane with owner-reference permission enforcement on,
    as production clusters have it (blockOwnerDeletion then needs RBAC on
    ``<owner>/finalizers``)."""

    def apiserver_args(self) -> list[str]:
        return super().apiserver_args() + ["--enable-admission-plugins=OwnerReferencesPermissionEnforcement"]


def sim_assets(directory: Path, run_ms: int = POD_RUN_MS) -> Assets:
    assets = locate_assets(build=True)
    if assets.kwok_stages is None:
        raise RuntimeError("kwok stages missing; run ./hack/envtest/build.sh")
    directory.mkdir(parents=True, exist_ok=True)
    assets.kwok_stages = slow_job_stages(assets.kwok_stages, directory / "kwok-stages-slow-jobs.yaml", run_ms)
    return assets


def third_party_crds(plane: ControlPlane) -> list[Path]:
    """Kueue, KubeRay, AppWrapper, ... CRDs (ours come from config/default)."""
    own = (ROOT / "config" / "crd").resolve()
    return [f for f in plane.crd_files() if own not in f.resolve().parents]


def start_sim_plane(directory: Path, run_ms: int = POD_RUN_MS, sim_forwards: dict[int, int] | None = None) -> SimPlane:
    """etcd + apiserver + controller-manager + scheduler (default and kaiwo-scheduler
    profiles) + kwok + Kueue.

    Only third-party CRDs are installed: the operator's come from
    ``kubectl apply -k config/default``, as in a real installation. Kueue starts
    once its CRDs are there.
    """
    plane = SimPlane(directory, sim_assets(directory, run_ms), components=SIMULATE_COMPONENTS, sim_forwards=sim_forwards)
    return plane.start(crd_files=third_party_crds(plane))


# ----------------------------------------------------------------------------- CLI for run-local


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m e2e.simcluster", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    sa = sub.add_parser("assets", help="write an assets directory (for KAIWO_CTRL_ASSETS) whose kwok stages keep Job Pods running a while")
    sa.add_argument("--dir", type=Path, required=True)
    args = p.parse_args(argv)
    base = locate_assets(build=True)
    out = args.dir.resolve()
    out.mkdir(parents=True, exist_ok=True)
    links = {"bin": base.bin_dir, "crds": base.crd_dirs[-1]}
    links.update({f"{c}-bin": base.bin_dir.parent / f"{c}-bin" for c in ("kueue", "kuberay", "appwrapper")})
    if base.kueue_manifests is not None:
        links["kueue-manifests"] = base.kueue_manifests
    for name, target in links.items():
        link = out / name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(target.resolve())
    if base.kwok_stages is None:
        raise SystemExit("kwok stages missing; run ./hack/envtest/build.sh")
    slow_job_stages(base.kwok_stages, out / "kwok-stages.yaml")
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
