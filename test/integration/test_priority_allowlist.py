"""Priority is the admin's to say: a Model, KaiwoJob or KaiwoService naming a
PriorityClass or WorkloadPriorityClass its namespace may not use gets a condition
naming the field and nothing is created for it; an allowed one proceeds. One rule
(kaiwo_ctrl/settings/priority.py) for both controllers, on the real API server."""

from __future__ import annotations

import pytest

from test_serving_support import condition, create_model, get_model, list_pods, serving_op, wait_pods  # noqa: F401
from test_workloads_support import (  # noqa: F401 - fixtures
    MERGE,
    conditions,
    create_kaiwo,
    eventually,
    get,
    job_url,
    operator,
    status_of,
    wait_object,
)

pytestmark = pytest.mark.integration

ANNOTATION = "kaiwo.silogen.ai/priority-classes"


def annotate(admin, ns: str, value: str | None) -> None:
    r = admin.patch(f"/api/v1/namespaces/{ns}", headers=MERGE, json={"metadata": {"annotations": {ANNOTATION: value}}})
    assert r.status_code == 200, r.text


def config_invalid(admin, ns: str, name: str) -> str | None:
    c = condition(get_model(admin, ns, name), "ConfigValid")
    return c[2] if c and c[0] == "False" else None


async def test_models_naming_a_class_not_allowed_get_no_pod(serving_op, admin, namespace):
    # system-* outside system namespaces: refused whatever the lists say
    annotate(admin, namespace, "*")
    create_model(admin, namespace, "sys", priorityClassName="system-node-critical")
    # the Kueue label with a class the namespace's list leaves out
    annotate(admin, namespace, "low")
    body = {"apiVersion": "kubeai.org/v1", "kind": "Model",
            "metadata": {"name": "wpc", "namespace": namespace, "labels": {"kueue.x-k8s.io/priority-class": "high"}},
            "spec": {"features": ["TextGeneration"], "engine": "VLLM", "url": "hf://org/repo",
                     "resourceProfile": "small:1", "minReplicas": 1}}
    r = admin.post(f"/apis/kubeai.org/v1/namespaces/{namespace}/models", json=body)
    assert r.status_code == 201, r.text
    # an allowed one proceeds (the namespace allows "low"; a missing PriorityClass is not the point here)
    create_model(admin, namespace, "ok")

    await eventually(lambda: config_invalid(admin, namespace, "sys"), what="ConfigValid=False on sys")
    assert config_invalid(admin, namespace, "sys").startswith("spec.priorityClassName: priority class 'system-node-critical'")
    await eventually(lambda: config_invalid(admin, namespace, "wpc"), what="ConfigValid=False on wpc")
    assert config_invalid(admin, namespace, "wpc").startswith("metadata.labels[kueue.x-k8s.io/priority-class]: priority class 'high'")
    await wait_pods(admin, namespace, "ok", 1)
    assert list_pods(admin, namespace, "sys") == [] and list_pods(admin, namespace, "wpc") == []

    # the admin allows "high": the refused Model gets its Pod (the Namespace change enqueues it)
    annotate(admin, namespace, "low,high")
    await wait_pods(admin, namespace, "wpc", 1)
    assert list_pods(admin, namespace, "sys") == []


async def test_kaiwojobs_naming_a_class_not_allowed_get_no_job(operator, admin, namespace):
    annotate(admin, namespace, "low")
    create_kaiwo(admin, "KaiwoJob", namespace, "denied", image="busybox:1.36", entrypoint="true", priorityClass="high")
    create_kaiwo(admin, "KaiwoJob", namespace, "system", image="busybox:1.36", entrypoint="true",
                 priorityClass="system-cluster-critical")
    create_kaiwo(admin, "KaiwoJob", namespace, "allowed", image="busybox:1.36", entrypoint="true", priorityClass="low")
    await wait_object(admin, job_url(namespace, "allowed"), what="the allowed KaiwoJob's Job")

    def refused(name: str):
        c = conditions(status_of(admin, "KaiwoJob", namespace, name)).get("SpecValid")
        return c if c and c[0] == "False" else None

    await eventually(lambda: refused("denied"), what="SpecValid=False on denied")
    assert refused("denied")[2].startswith("spec.priorityClass: priority class 'high' is not allowed")
    await eventually(lambda: refused("system"), what="SpecValid=False on system")
    assert "reserved for system namespaces" in refused("system")[2]
    assert status_of(admin, "KaiwoJob", namespace, "denied")["status"] == "ERROR"
    assert get(admin, job_url(namespace, "denied")) is None and get(admin, job_url(namespace, "system")) is None
