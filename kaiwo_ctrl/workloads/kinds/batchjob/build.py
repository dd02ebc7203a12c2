"""Builder: the batch Job of a non-Ray KaiwoJob."""

from __future__ import annotations

from typing import Any

from ...base.labels import queue_labels
from ...builders.plan import WorkloadPlan
from ...builders.podtemplate import (
    PodRole,
    apply_entrypoint,
    check_pod_template,
    decorate_pod_template,
    default_pod_template,
    expect_mapping,
)

DEFAULT_TTL_SECONDS = 3600


def build_batch_job(p: WorkloadPlan) -> dict[str, Any]:
    obj, world, gpu, storage = p.o, p.world, p.gpu, p.storage
    settings = world.settings
    user = obj.user_spec
    if user is not None:
        spec: dict[str, Any] = dict(expect_mapping(user.get("spec"), "spec.job.spec"))  # user metadata is ignored
        spec["template"] = check_pod_template(spec.get("template"), "spec.job.spec.template")
    else:
        spec = {
            "ttlSecondsAfterFinished": DEFAULT_TTL_SECONDS,
            "backoffLimit": 0,
            "template": default_pod_template(
                "workload", scheduler_name=settings.kube_scheduler_name, dshm_size="1Gi", dangerous=obj.dangerous
            ),
        }
    # The reference only forced backoffLimit > 0 to 0; an unset backoffLimit would
    # let Kubernetes default it to 6 retries, defeating the same intent, so it is
    # set to 0 in both cases.
    spec["backoffLimit"] = 0
    if spec.get("ttlSecondsAfterFinished") is None:
        spec["ttlSecondsAfterFinished"] = DEFAULT_TTL_SECONDS
    template = spec["template"]
    if obj.entrypoint:
        apply_entrypoint(template, obj.entrypoint)
    spec["suspend"] = True
    decorate_pod_template(
        template, obj, world, storage, PodRole(plan=gpu, gpus_per_pod=gpu.gpus_per_replica)
    )
    labels = obj.object_labels()
    labels.update(queue_labels(p.queue, obj.priority_class))
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": obj.child_metadata(labels), "spec": spec}
