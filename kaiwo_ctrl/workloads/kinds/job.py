"""KaiwoJob: the storage children, then a batch Job or a RayJob."""

from __future__ import annotations

from kaiwo_ctrl.kinds import KAIWOJOBS, RAYJOBS
from kaiwo_ctrl.runtime.api.resources import JOBS

from ..batchjob import build_batch_job
from ..childstatus import batch_job_status, ray_job_status
from ..rayjob import build_ray_job
from .mapping import adopted_job_owner
from .spec import ChildSpec, WorkloadKind, main_object
from .storage import JOB_IMMUTABLE, STORAGE_CHILDREN, SUSPEND

#: KubeRay does not act on changes to a submitted RayJob's entrypoint or cluster.
RAYJOB_IMMUTABLE = ("spec.entrypoint", "spec.rayClusterSpec", "spec.runtimeEnvYAML", "spec.submitterPodTemplate")


KAIWOJOB = WorkloadKind(
    "KaiwoJob",
    KAIWOJOBS,
    "kaiwojob-controller",
    STORAGE_CHILDREN
    + (
        ChildSpec(
            "Job", JOBS, "main", build=main_object(build_batch_job), status=lambda ch, prev: batch_job_status(ch.main, prev),
            immutable=JOB_IMMUTABLE, foreign=SUSPEND, ray=False, main=True, terminate=True, adopted=adopted_job_owner,
        ),
        ChildSpec(
            "RayJob", RAYJOBS, "main", build=main_object(build_ray_job), status=lambda ch, prev: ray_job_status(ch.main),
            immutable=RAYJOB_IMMUTABLE, foreign=SUSPEND, ray=True, main=True, terminate=True,
        ),
    ),
)
