"""The RayJob of a Ray KaiwoJob: its table entry (builder in :mod:`.build`,
status mapper in :mod:`.status`)."""

from __future__ import annotations

from kaiwo_ctrl.kinds import RAYJOBS

from ..spec import SUSPEND, ChildSpec, Paths
from .build import build_ray_job
from .status import status

#: KubeRay does not act on changes to a submitted RayJob's entrypoint or cluster.
RAYJOB_IMMUTABLE = ("spec.entrypoint", "spec.rayClusterSpec", "spec.runtimeEnvYAML", "spec.submitterPodTemplate")

CHILD = ChildSpec(
    RAYJOBS, build=build_ray_job, status=status, paths=Paths(immutable=RAYJOB_IMMUTABLE, foreign=SUSPEND),
    ray=True, main=True, terminate=True,
)
