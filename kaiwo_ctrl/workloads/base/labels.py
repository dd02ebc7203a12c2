"""Label and annotation keys and the label sets put on children."""

from __future__ import annotations

from collections.abc import Mapping

from .naming import name_label, rfc1123_normalize

LABEL_USER = "kaiwo.silogen.ai/user"
LABEL_NAME = "kaiwo.silogen.ai/name"
LABEL_TYPE = "kaiwo.silogen.ai/type"
LABEL_RUN_ID = "kaiwo.silogen.ai/run-id"
LABEL_MANAGED = "kaiwo.silogen.ai/managed"
LABEL_QUEUE_NAME = "kueue.x-k8s.io/queue-name"
LABEL_PRIORITY_CLASS = "kueue.x-k8s.io/priority-class"
LABEL_APP = "app"
LABEL_KUEUE_JOB_UID = "kueue.x-k8s.io/job-uid"

ANNOTATION_REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
ANNOTATION_PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"

NODE_LABEL_NODEPOOL = "kaiwo/nodepool"
NODE_LABEL_GPU_MODEL = "kaiwo/gpu-model"

TYPE_JOB = "job"
TYPE_SERVICE = "service"
TYPE_DOWNLOADER = "downloader"

#: Annotations of the Kaiwo object that are never copied onto pod templates:
#: kubectl's copy of the whole applied manifest would otherwise land on every pod.
NOT_COPIED_ANNOTATIONS = frozenset({"kubectl.kubernetes.io/last-applied-configuration"})

KIND_TYPES = {"KaiwoJob": TYPE_JOB, "KaiwoService": TYPE_SERVICE}


def system_labels(kind: str, name: str, user: str | None, uid: str | None) -> dict[str, str]:
    """The four Kaiwo system labels of a workload's children and pod templates."""
    return {
        LABEL_USER: rfc1123_normalize(user),
        LABEL_NAME: name_label(name),
        LABEL_TYPE: KIND_TYPES[kind],
        LABEL_RUN_ID: uid or "",
    }


def inherited_labels(workload_labels: Mapping[str, str] | None) -> dict[str, str]:
    """The Kaiwo object's own labels that children inherit: all but the queue label
    (the queue label is set from the resolved queue name instead). This carries
    ``kaiwo.silogen.ai/managed`` along when the object has it."""
    return {k: v for k, v in (workload_labels or {}).items() if k != LABEL_QUEUE_NAME}


def queue_labels(queue: str, priority_class: str | None) -> dict[str, str]:
    out = {LABEL_QUEUE_NAME: queue}
    if priority_class:
        out[LABEL_PRIORITY_CLASS] = priority_class
    return out


def object_labels(kind: str, meta: Mapping, spec: Mapping) -> dict[str, str]:
    """Kaiwo workload labels (minus queue) overlaid with the system labels."""
    out = inherited_labels(meta.get("labels"))
    out.update(system_labels(kind, meta.get("name", ""), spec.get("user"), meta.get("uid")))
    return out
