"""The batch Job of a non-Ray KaiwoJob: its table entry (builder in
:mod:`.build`, status mapper in :mod:`.status`, adoption in :mod:`.watch`)."""

from __future__ import annotations

from kaiwo_ctrl.runtime.api.resources import JOBS

from ..spec import JOB_IMMUTABLE, SUSPEND, ChildSpec, Paths
from .build import build_batch_job
from .status import status
from .watch import adopted_job_owner

CHILD = ChildSpec(
    JOBS, build=build_batch_job, status=status, paths=Paths(immutable=JOB_IMMUTABLE, foreign=SUSPEND),
    ray=False, main=True, terminate=True, adopted=adopted_job_owner,
)
