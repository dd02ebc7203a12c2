"""Builder: the Deployment of a non-Ray KaiwoService."""

from __future__ import annotations

from typing import Any

from ...base.labels import LABEL_APP, queue_labels
from ...base.naming import name_label
from ...builders.plan import WorkloadPlan
from ...builders.podtemplate import (
    PodRole,
    apply_entrypoint,
    check_pod_template,
    decorate_pod_template,
    default_pod_template,
    expect_mapping,
    mapping_at,
)


def build_deployment(p: WorkloadPlan) -> dict[str, Any]:
    obj, world, gpu, storage = p.o, p.world, p.gpu, p.storage
    settings = world.settings
    user = obj.user_spec
    if user is not None:
        spec: dict[str, Any] = dict(expect_mapping(user.get("spec"), "spec.deployment.spec"))
        spec["template"] = check_pod_template(spec.get("template"), "spec.deployment.spec.template")
        selector = spec["selector"] = dict(expect_mapping(spec.get("selector"), "spec.deployment.spec.selector"))
        mapping_at(selector, "matchLabels", "spec.deployment.spec.selector.matchLabels")
    else:
        spec = {
            "replicas": 1,
            "selector": {"matchLabels": {}},
            "template": default_pod_template(
                "workload", scheduler_name=settings.kube_scheduler_name, dshm_size="1Gi", dangerous=obj.dangerous
            ),
        }
    template = spec["template"]
    template.setdefault("spec", {})["restartPolicy"] = "Always"
    selector = spec.setdefault("selector", {})
    selector.setdefault("matchLabels", {})[LABEL_APP] = name_label(obj.name)
    spec["replicas"] = gpu.replicas
    if obj.entrypoint:
        apply_entrypoint(template, obj.entrypoint)
    extra = {LABEL_APP: name_label(obj.name), **queue_labels(p.queue, obj.priority_class)}
    decorate_pod_template(
        template, obj, world, storage, PodRole(plan=gpu, gpus_per_pod=gpu.gpus_per_replica, extra_labels=extra)
    )
    labels = dict(template["metadata"]["labels"])
    labels.update(obj.object_labels())
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": obj.child_metadata(labels), "spec": spec}
