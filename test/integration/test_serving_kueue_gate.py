"""GPU Models go through Kueue where a KaiwoQueueConfig exists, and the operator
gates their Pods itself: a Pod Kueue does not manage stays gated instead of
running outside quota. Kueue is played by the test (no Kueue webhook runs here,
which is exactly a Pod Kueue does not take); the real Kueue runs in e2e."""

from __future__ import annotations

import pytest

from kaiwo_ctrl.serving.model.admission import OPERATOR_GATE
from test_serving_support import (  # noqa: F401 - fixtures
    MERGE,
    TEST_CONFIG,
    condition,
    create_model,
    eventually,
    get_model,
    list_pods,
    serving_op,
    wait_pods,
    write_config,
)
from test_workloads_support import KUEUE, admit, ensure_queue_config

pytestmark = pytest.mark.integration

GPU_CONFIG = {**TEST_CONFIG, "resourceProfiles": {
    **TEST_CONFIG["resourceProfiles"],
    "gpu": {"imageName": "cpu", "requests": {"cpu": "1"}, "limits": {"amd.com/gpu": "1"}},
}}
KAIWO_CONFIG = "/apis/config.kaiwo.silogen.ai/v1alpha1/kaiwoconfigs/kaiwo"


def gates(pod: dict) -> list[str]:
    return [g["name"] for g in pod["spec"].get("schedulingGates") or ()]


def set_opt_out(admin, value: bool | None) -> None:
    r = admin.get(KAIWO_CONFIG)
    if r.status_code == 404:
        r = admin.post(KAIWO_CONFIG.rsplit("/", 1)[0], json={
            "apiVersion": "config.kaiwo.silogen.ai/v1alpha1", "kind": "KaiwoConfig", "metadata": {"name": "kaiwo"}, "spec": {}})
        assert r.status_code in (201, 409), r.text
    r = admin.patch(KAIWO_CONFIG, headers=MERGE, json={"spec": {"models": {"gpuModelsUnderKueue": value}}})
    assert r.status_code == 200, r.text


async def test_gpu_model_is_queued_and_stays_gated_until_kueue_admits(serving_op, admin, namespace):
    ensure_queue_config(admin)
    write_config(serving_op, GPU_CONFIG)
    create_model(admin, namespace, "gpu", resourceProfile="gpu:1")
    create_model(admin, namespace, "cpu")  # no GPUs: outside Kueue, as in KubeAI
    [pod] = await wait_pods(admin, namespace, "gpu", 1, timeout=60)
    assert pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "kaiwo"  # the default ClusterQueue's LocalQueue
    assert OPERATOR_GATE in gates(pod)
    assert admin.get(f"{KUEUE}/namespaces/{namespace}/localqueues/kaiwo").status_code == 200
    [cpu] = await wait_pods(admin, namespace, "cpu", 1)
    assert "kueue.x-k8s.io/queue-name" not in cpu["metadata"]["labels"] and not gates(cpu)

    # no Kueue webhook took the Pod: it stays gated, and the Model says why
    def unmanaged():
        c = condition(get_model(admin, namespace, "gpu"), "QuotaReserved")
        return c if c and c[1] == "NotManagedByKueue" else None

    c = await eventually(unmanaged, what="QuotaReserved=Unknown/NotManagedByKueue")
    assert c[0] == "Unknown" and OPERATOR_GATE in c[2]
    assert gates(list_pods(admin, namespace, "gpu")[0]) == [OPERATOR_GATE]

    # Kueue takes the Pod and admits its Workload: the operator removes its gate
    name = pod["metadata"]["name"]
    r = admin.patch(f"/api/v1/namespaces/{namespace}/pods/{name}", headers=MERGE,
                    json={"metadata": {"labels": {"kueue.x-k8s.io/managed": "true"}}})
    assert r.status_code == 200, r.text
    admit(admin, namespace, {**pod, "apiVersion": "v1", "kind": "Pod"})
    await eventually(lambda: not gates(list_pods(admin, namespace, "gpu")[0]), what="the operator's gate removed")
    assert [p["metadata"]["name"] for p in list_pods(admin, namespace, "gpu")] == [name]  # the same Pod, not a new one


async def test_an_admin_may_opt_gpu_models_out_of_kueue(serving_op, admin, namespace):
    ensure_queue_config(admin)
    write_config(serving_op, GPU_CONFIG)
    set_opt_out(admin, False)
    try:
        create_model(admin, namespace, "free", resourceProfile="gpu:1")
        [pod] = await wait_pods(admin, namespace, "free", 1, timeout=60)
        assert "kueue.x-k8s.io/queue-name" not in pod["metadata"]["labels"] and not gates(pod)
    finally:
        set_opt_out(admin, None)
