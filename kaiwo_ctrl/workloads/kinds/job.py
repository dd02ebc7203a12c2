"""KaiwoJob: the storage children, then a batch Job or a RayJob."""

from __future__ import annotations

from typing import Any

from kaiwo_ctrl.kinds import KAIWOJOBS, RAYJOBS
from kaiwo_ctrl.runtime.resources import JOBS

from ..batchjob import build_batch_job
from ..childstatus import batch_job_status, ray_job_status
from ..rayjob import build_ray_job
from .mapping import adopted_job_owner
from .spec import Build, ChildSpec, WorkloadKind
from .storage import JOB_IMMUTABLE, STORAGE_CHILDREN, SUSPEND

#: KubeRay does not act on changes to a submitted RayJob's entrypoint or cluster.
RAYJOB_IMMUTABLE = ("spec.entrypoint", "spec.rayClusterSpec", "spec.runtimeEnvYAML", "spec.submitterPodTemplate")


def _batch_job(b: Build) -> dict[str, Any]:
    return build_batch_job(b.o, b.world, b.gpu, b.storage)


def _ray_job(b: Build) -> dict[str, Any]:
    return build_ray_job(b.o, b.world, b.gpu, b.storage)


KAIWOJOB = WorkloadKind(
    "KaiwoJob",
    KAIWOJOBS,
    "kaiwojob-controller",
    STORAGE_CHILDREN
    + (
        ChildSpec(
            "Job", JOBS, "main", build=_batch_job, status=lambda ch, prev: batch_job_status(ch.main, prev),
            immutable=JOB_IMMUTABLE, foreign=SUSPEND, ray=False, main=True, terminate=True, adopted=adopted_job_owner,
        ),
        ChildSpec(
            "RayJob", RAYJOBS, "main", build=_ray_job, status=lambda ch, prev: ray_job_status(ch.main),
            immutable=RAYJOB_IMMUTABLE, foreign=SUSPEND, ray=True, main=True, terminate=True,
        ),
    ),
)
