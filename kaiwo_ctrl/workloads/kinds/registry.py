"""The registry: every child kind a Kaiwo workload can have, one line each
(the workload kind it belongs to, the table entry of its folder), and the
workload kinds assembled from it.

A new child kind is one folder under ``kinds/`` (its ``ChildSpec`` entry,
builder and status mapper) and one line in :data:`CHILD_KINDS`.
"""

from __future__ import annotations

from collections.abc import Iterable

from kaiwo_ctrl.kinds import KAIWOJOBS, KAIWOSERVICES

from . import appwrapper, batchjob, deployment, rayjob, rayservice
from .spec import ChildSpec, WorkloadKind
from .storage import STORAGE_CHILDREN

#: (workload kind, child), in creation order after the storage children.
CHILD_KINDS: tuple[tuple[str, ChildSpec], ...] = (
    ("KaiwoJob", batchjob.CHILD),
    ("KaiwoJob", rayjob.CHILD),
    ("KaiwoService", deployment.CHILD),
    ("KaiwoService", appwrapper.CHILD),
    ("KaiwoService", rayservice.CHILD),
)

_KAIWOJOB = WorkloadKind("KaiwoJob", KAIWOJOBS, "kaiwojob-controller", ())
# the Kueue Workloads of its Deployment are per pod
_KAIWOSERVICE = WorkloadKind("KaiwoService", KAIWOSERVICES, "kaiwoservice-controller", (), pod_workloads=True)


def workload_kinds(children: Iterable[tuple[str, ChildSpec]] = CHILD_KINDS) -> dict[str, WorkloadKind]:
    """Each workload kind with its children: the storage children every kind
    shares, then those ``children`` lists for it."""
    children = tuple(children)
    return {
        k.kind: WorkloadKind(
            k.kind, k.resource, k.component,
            STORAGE_CHILDREN + tuple(c for owner, c in children if owner == k.kind),
            pod_workloads=k.pod_workloads,
        )
        for k in (_KAIWOJOB, _KAIWOSERVICE)
    }
