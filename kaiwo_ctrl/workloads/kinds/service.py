"""KaiwoService: the storage children, then a Deployment, or an AppWrapper
wrapping a RayService."""

from __future__ import annotations

from kaiwo_ctrl.kinds import APPWRAPPERS, KAIWOSERVICES, RAYSERVICES
from kaiwo_ctrl.runtime.api.resources import DEPLOYMENTS

from ..childstatus import deployment_status, ray_service_status
from ..deployment import build_deployment
from ..rayservice import build_appwrapper
from .mapping import ray_service_owner
from .spec import MAPPED, ChildSpec, WorkloadKind, main_object
from .storage import STORAGE_CHILDREN, SUSPEND


KAIWOSERVICE = WorkloadKind(
    "KaiwoService",
    KAIWOSERVICES,
    "kaiwoservice-controller",
    STORAGE_CHILDREN
    + (
        ChildSpec(
            "Deployment", DEPLOYMENTS, "main", build=main_object(build_deployment), status=lambda ch, prev: deployment_status(ch.main),
            immutable=("spec.selector",), ray=False, main=True, terminate=True,
        ),
        ChildSpec(
            "AppWrapper", APPWRAPPERS, "main", build=main_object(build_appwrapper),
            status=lambda ch, prev: ray_service_status(ch.main, ch.ray_service),
            # the AppWrapper webhook refuses changes to its components
            immutable=("spec.components",), foreign=SUSPEND, ray=True, main=True, terminate=True,
        ),
        # made by the AppWrapper controller, owned by the AppWrapper: only read
        ChildSpec("RayService", RAYSERVICES, "ray_service", ray=True, terminate=True, watch=MAPPED, map=ray_service_owner),
    ),
    pod_workloads=True,
)
