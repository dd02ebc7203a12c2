"""KaiwoService: the storage children, then a Deployment, or an AppWrapper
wrapping a RayService."""

from __future__ import annotations

from typing import Any

from kaiwo_ctrl.kinds import APPWRAPPERS, KAIWOSERVICES, RAYSERVICES
from kaiwo_ctrl.runtime.resources import DEPLOYMENTS

from ..childstatus import deployment_status, ray_service_status
from ..deployment import build_deployment
from ..rayservice import build_appwrapper
from .mapping import ray_service_owner
from .spec import MAPPED, Build, ChildSpec, WorkloadKind
from .storage import STORAGE_CHILDREN, SUSPEND


def _deployment(b: Build) -> dict[str, Any]:
    return build_deployment(b.o, b.world, b.gpu, b.storage)


def _appwrapper(b: Build) -> dict[str, Any]:
    return build_appwrapper(b.o, b.world, b.gpu, b.storage)


KAIWOSERVICE = WorkloadKind(
    "KaiwoService",
    KAIWOSERVICES,
    "kaiwoservice-controller",
    STORAGE_CHILDREN
    + (
        ChildSpec(
            "Deployment", DEPLOYMENTS, "main", build=_deployment, status=lambda ch, prev: deployment_status(ch.main),
            immutable=("spec.selector",), ray=False, main=True, terminate=True,
        ),
        ChildSpec(
            "AppWrapper", APPWRAPPERS, "main", build=_appwrapper,
            status=lambda ch, prev: ray_service_status(ch.main, ch.ray_service),
            # the AppWrapper webhook refuses changes to its components
            immutable=("spec.components",), foreign=SUSPEND, ray=True, main=True, terminate=True,
        ),
        # made by the AppWrapper controller, owned by the AppWrapper: only read
        ChildSpec("RayService", RAYSERVICES, "ray_service", ray=True, terminate=True, watch=MAPPED, map=ray_service_owner),
    ),
    pod_workloads=True,
)
