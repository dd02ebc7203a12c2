"""The Model controller on the real kube-apiserver: Pod shape, replicas, status, files, config."""

from __future__ import annotations

import pytest

from kaiwo_ctrl.runtime.control.handler import Request

from test_serving_support import (  # noqa: F401 - fixtures
    TEST_CONFIG,
    condition,
    create_model,
    env_names,
    env_of,
    eventually,
    get_model,
    list_pods,
    models_url,
    patch_model,
    serving_op,
    server,
    set_pod_phase,
    wait_pods,
    write_config,
)

pytestmark = pytest.mark.integration


async def test_vllm_pod_shape_profile_and_status(serving_op, admin, namespace):
    m = create_model(admin, namespace, "llama", resourceProfile="small:3", env={"ZED": "1", "ALPHA": "2"},
                     args=["--max-model-len=512"])
    [pod] = await wait_pods(admin, namespace, "llama", 1)
    meta = pod["metadata"]
    labels = meta["labels"]
    assert labels["app"] == "model" and labels["model"] == "llama"
    assert labels["app.kubernetes.io/name"] == "vllm" and labels["app.kubernetes.io/instance"] == "vllm-llama"
    assert labels["app.kubernetes.io/managed-by"] == "kubeai"
    assert meta["generateName"] == f"model-llama-{labels['pod-hash']}-"
    assert meta["annotations"]["model-pod-port"] == "8000"
    ref = meta["ownerReferences"][0]
    assert ref["kind"] == "Model" and ref["uid"] == m["metadata"]["uid"] and ref["controller"] is True
    c = server(pod)
    assert c["image"] == "public.ecr.aws/q9t5s3a7/vllm-cpu-release-repo:v0.10.2"  # profile imageName "cpu"
    assert c["command"] == ["python3", "-m", "vllm.entrypoints.openai.api_server"]
    assert c["args"] == ["--model=org/repo", "--served-model-name=llama", "--max-model-len=512"]
    assert c["ports"] == [{"containerPort": 8000, "name": "http", "protocol": "TCP"}]
    assert c["resources"] == {"requests": {"cpu": "1500m", "memory": "3Gi"}, "limits": {"memory": "6Gi"}}
    assert pod["spec"]["nodeSelector"] == {"pool": "cpu"}
    # engine env, then spec.env sorted, then credentials (which spec.env cannot override)
    assert env_names(c) == ["ALPHA", "ZED", "HF_TOKEN"]
    assert env_of(c)["HF_TOKEN"] == {"secretKeyRef": {"name": "hf-secret", "key": "token", "optional": True}}
    assert c["startupProbe"]["failureThreshold"] == 5400 and c["startupProbe"]["httpGet"]["port"] == "http"
    assert {"name": "dshm", "emptyDir": {"medium": "Memory"}} in pod["spec"]["volumes"]

    model = await eventually(lambda: (x := get_model(admin, namespace, "llama"))
                             and (x.get("status") or {}).get("replicas") == {"all": 1, "ready": 0} and x,
                             what="status all=1 ready=0")
    assert model["metadata"]["labels"]["features.kubeai.org/TextGeneration"] == "true"
    assert condition(model, "ConfigValid")[0] == "True"
    assert condition(model, "Ready")[:2] == ("False", "PodsNotReady")
    set_pod_phase(admin, namespace, pod)
    model = await eventually(lambda: (x := get_model(admin, namespace, "llama"))
                             and (x["status"]["replicas"].get("ready") == 1) and x, what="ready=1")
    assert condition(model, "Ready")[:2] == ("True", "PodsReady")
    table = admin.get(f"/apis/kubeai.org/v1/namespaces/{namespace}/models/llama",
                      headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"}).json()
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Engine", "URL", "Replicas", "Ready", "Age"]


@pytest.mark.parametrize(
    "name,spec,check",
    [
        ("pvc", {"url": "pvc://weights/sub/dir"}, "pvc"),
        ("s3", {"url": "s3://bucket/path/model"}, "s3"),
        ("ollama", {"engine": "OLlama", "url": "ollama://qwen2:0.5b?insecure=true"}, "ollama"),
        ("whisper", {"engine": "FasterWhisper", "url": "hf://Systran/faster-whisper-small", "features": ["SpeechToText"]}, "whisper"),
        ("infinity", {"engine": "Infinity", "url": "hf://BAAI/bge-small", "features": ["TextEmbedding"]}, "infinity"),
    ],
)
async def test_engine_and_url_scheme_shapes(serving_op, admin, namespace, name, spec, check):
    create_model(admin, namespace, name, **spec)
    [pod] = await wait_pods(admin, namespace, name, 1)
    c = server(pod)
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    vols = {v["name"]: v for v in pod["spec"]["volumes"]}
    if check == "pvc":
        assert c["args"][0] == "--model=/model"
        assert vols["model"]["persistentVolumeClaim"]["claimName"] == "weights"
        assert mounts["model"]["mountPath"] == "/model" and mounts["model"]["subPath"] == "sub/dir"
    elif check == "s3":
        assert c["args"][:3] == ["--model=s3://bucket/path/model", "--served-model-name=s3", "--load-format=runai_streamer"]
        assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} <= set(env_names(c))
    elif check == "ollama":
        assert "command" not in c
        assert env_of(c)["OLLAMA_HOST"] == "0.0.0.0:8000" and env_of(c)["OLLAMA_KEEP_ALIVE"] == "999999h"
        script = c["startupProbe"]["exec"]["command"]
        assert script == ["bash", "-c", "/bin/ollama pull --insecure qwen2:0.5b && /bin/ollama cp qwen2:0.5b ollama"
                          " && /bin/ollama run ollama hi"]
        assert c["readinessProbe"]["httpGet"]["path"] == "/"
        assert c["image"] == "ollama/ollama:0.11.11"  # no "cpu" image for OLlama: default
    elif check == "whisper":
        assert env_of(c)["WHISPER__MODEL"] == "Systran/faster-whisper-small" and env_of(c)["ENABLE_UI"] == "false"
        assert c["startupProbe"]["failureThreshold"] == 900
        assert c["image"] == "fedirz/faster-whisper-server:latest-cpu"
    elif check == "infinity":
        assert c["args"] == ["v2"]
        assert env_of(c)["INFINITY_MODEL_ID"] == "BAAI/bge-small" and env_of(c)["INFINITY_PORT"] == "8000"
        assert "securityContext" not in c
        assert c["image"] == "michaelf34/infinity:0.0.77-cpu"
    if check != "infinity":
        assert c["securityContext"]["allowPrivilegeEscalation"] is False


async def test_feature_labels_follow_spec(serving_op, admin, namespace):
    create_model(admin, namespace, "feat", features=["TextGeneration", "TextEmbedding"])
    await eventually(lambda: {k for k in get_model(admin, namespace, "feat")["metadata"].get("labels", {})
                              if k.startswith("features.kubeai.org/")} == {"features.kubeai.org/TextGeneration",
                                                                           "features.kubeai.org/TextEmbedding"},
                     what="two feature labels")
    patch_model(admin, namespace, "feat", {"spec": {"features": ["TextEmbedding"]}})
    await eventually(lambda: [k for k in get_model(admin, namespace, "feat")["metadata"].get("labels", {})
                              if k.startswith("features.kubeai.org/")] == ["features.kubeai.org/TextEmbedding"],
                     what="TextGeneration label removed")


async def test_bounds_manual_replicas_and_scale(serving_op, admin, namespace):
    create_model(admin, namespace, "bounded", minReplicas=2, maxReplicas=3)
    assert get_model(admin, namespace, "bounded")["spec"].get("replicas") is None
    await eventually(lambda: get_model(admin, namespace, "bounded")["spec"].get("replicas") == 2, what="replicas=min")
    await wait_pods(admin, namespace, "bounded", 2)
    # kubectl scale above the bound: clamped back to maxReplicas
    r = admin.patch(f"/apis/kubeai.org/v1/namespaces/{namespace}/models/bounded/scale",
                    json={"spec": {"replicas": 7}}, headers={"Content-Type": "application/merge-patch+json"})
    assert r.status_code == 200, r.text
    await eventually(lambda: get_model(admin, namespace, "bounded")["spec"]["replicas"] == 3, what="clamped to max")
    pods = await wait_pods(admin, namespace, "bounded", 3)
    scale = admin.get(f"/apis/kubeai.org/v1/namespaces/{namespace}/models/bounded/scale").json()
    await eventually(lambda: admin.get(f"/apis/kubeai.org/v1/namespaces/{namespace}/models/bounded/scale")
                     .json()["status"]["replicas"] == 3, what="scale status")
    assert scale["spec"]["replicas"] == 3
    for p in pods[:2]:
        set_pod_phase(admin, namespace, p)
    await eventually(lambda: get_model(admin, namespace, "bounded")["status"]["replicas"] == {"all": 3, "ready": 2},
                     what="2 of 3 ready")

    # autoscaling disabled: the user's value is kept, even outside the bounds; unset means 0
    create_model(admin, namespace, "manual", autoscalingDisabled=True, minReplicas=1, maxReplicas=1, replicas=2)
    await wait_pods(admin, namespace, "manual", 2)
    assert get_model(admin, namespace, "manual")["spec"]["replicas"] == 2
    patch_model(admin, namespace, "manual", {"spec": {"replicas": None}})
    await wait_pods(admin, namespace, "manual", 0)


async def test_failed_pod_is_replaced(serving_op, admin, namespace):
    create_model(admin, namespace, "evicted")
    [pod] = await wait_pods(admin, namespace, "evicted", 1)
    set_pod_phase(admin, namespace, pod, ready=False, phase="Failed")
    [new] = await wait_pods(admin, namespace, "evicted", 1,
                            pred=lambda p: p["metadata"]["name"] != pod["metadata"]["name"], what="replacement")
    assert new["metadata"]["labels"]["pod-hash"] == pod["metadata"]["labels"]["pod-hash"]


async def test_priority_class_and_env_from_order(serving_op, admin, namespace):
    pc = f"models-{namespace}"
    r = admin.post("/apis/scheduling.k8s.io/v1/priorityclasses",
                   json={"metadata": {"name": pc}, "value": 1000})
    assert r.status_code == 201, r.text
    try:
        env_from = [{"secretRef": {"name": "a"}}, {"configMapRef": {"name": "b"}}]
        create_model(admin, namespace, "prio", priorityClassName=pc, envFrom=env_from, env={"HF_TOKEN": "mine", "B": "x"})
        [pod] = await wait_pods(admin, namespace, "prio", 1)
        assert pod["spec"]["priorityClassName"] == pc and pod["spec"]["priority"] == 1000
        c = server(pod)
        assert c["envFrom"] == env_from
        # a credential the Model sets itself wins: no Secret reference is added after it
        # (KubeAI appends one, which silently overrides the user's value)
        assert env_names(c) == ["B", "HF_TOKEN"]
        assert c["env"][-1] == {"name": "HF_TOKEN", "value": "mine"}
    finally:
        admin.delete(f"/apis/scheduling.k8s.io/v1/priorityclasses/{pc}")


async def test_rejected_pod_is_reported(serving_op, admin, namespace):
    create_model(admin, namespace, "nopc", priorityClassName="does-not-exist")
    model = await eventually(lambda: (c := condition(x := get_model(admin, namespace, "nopc"), "Ready"))
                             and c[1] == "PodRejected" and x, what="PodRejected condition")
    assert "does-not-exist" in condition(model, "Ready")[2]
    assert list_pods(admin, namespace, "nopc") == []


async def test_pod_created_when_its_priority_class_appears(serving_op, admin, namespace):
    pc = f"late-{namespace}"
    create_model(admin, namespace, "late", priorityClassName=pc)
    await eventually(lambda: (c := condition(get_model(admin, namespace, "late"), "Ready")) and c[1] == "PodRejected",
                     what="PodRejected condition")
    r = admin.post("/apis/scheduling.k8s.io/v1/priorityclasses", json={"metadata": {"name": pc}, "value": 10})
    assert r.status_code == 201, r.text
    try:
        # the PriorityClass watch enqueues the Model at once; a rejected Pod is otherwise
        # retried only after 30 s, so 20 s tells the two apart with a wide margin
        [pod] = await wait_pods(admin, namespace, "late", 1, timeout=20)
        assert pod["spec"]["priorityClassName"] == pc
    finally:
        admin.delete(f"/apis/scheduling.k8s.io/v1/priorityclasses/{pc}")


async def test_files_configmap_and_updates(serving_op, admin, namespace):
    files = [{"path": "/config/a.txt", "content": "one"}, {"path": "/etc/b.json", "content": "{}"}]
    create_model(admin, namespace, "files", files=files)
    cm_url = f"/api/v1/namespaces/{namespace}/configmaps/model-files-files"
    cm = await eventually(lambda: (r := admin.get(cm_url)).status_code == 200 and r.json(), what="files ConfigMap")
    assert cm["data"] == {"_config_a.txt": "one", "_etc_b.json": "{}"}
    assert cm["metadata"]["ownerReferences"][0]["kind"] == "Model"
    [pod] = await wait_pods(admin, namespace, "files", 1)
    mounts = [m for m in server(pod)["volumeMounts"] if m["name"] == "model-files"]
    assert mounts == [
        {"name": "model-files", "mountPath": "/config/a.txt", "subPath": "_config_a.txt", "readOnly": True},
        {"name": "model-files", "mountPath": "/etc/b.json", "subPath": "_etc_b.json", "readOnly": True},
    ]
    # a content change updates the ConfigMap and does not roll the Pod
    patch_model(admin, namespace, "files", {"spec": {"files": [{"path": "/config/a.txt", "content": "two"},
                                                               {"path": "/etc/b.json", "content": "{}"}]}})
    await eventually(lambda: admin.get(cm_url).json()["data"]["_config_a.txt"] == "two", what="content updated")
    assert [p["metadata"]["name"] for p in list_pods(admin, namespace, "files")] == [pod["metadata"]["name"]]
    # removing the files deletes the ConfigMap (and it stays deleted) and rolls the Pod
    patch_model(admin, namespace, "files", {"spec": {"files": None}})
    await eventually(lambda: admin.get(cm_url).status_code == 404, what="ConfigMap deleted")
    await wait_pods(admin, namespace, "files", 1, pred=lambda p: p["metadata"]["name"] != pod["metadata"]["name"])
    # a reconcile of the settled Model writes nothing (no empty ConfigMap created and deleted again)
    rec = serving_op.rec
    await eventually(lambda: rec.model_pods(namespace, "files") and all(
        p["metadata"]["labels"]["pod-hash"] != pod["metadata"]["labels"]["pod-hash"] for p in rec.model_pods(namespace, "files")),
        what="cache caught up")
    await eventually(quiet(serving_op), timeout=30, interval=0.1, what="controller idle")
    before = dict(serving_op.client.counts)
    done = rec.controller.reconciles
    rec.controller.enqueue(Request(namespace, "files"))
    await eventually(lambda: rec.controller.reconciles > done, what="reconcile ran")
    assert {k: serving_op.client.counts[k] for k in ("POST", "PUT", "PATCH", "DELETE")} == {
        k: before.get(k, 0) for k in ("POST", "PUT", "PATCH", "DELETE")}
    assert admin.get(cm_url).status_code == 404


def quiet(mgr, settle: float = 1.0):
    """A condition: the controller's queue is empty, no reconcile runs, and no write for ``settle`` s."""
    import time

    state = {"writes": -1, "since": 0.0}

    def check() -> bool:
        c = mgr.rec.controller
        writes = mgr.client.writes
        now = time.monotonic()
        if writes != state["writes"] or len(c.queue) or c.active:
            state.update(writes=writes, since=now)
            return False
        return now - state["since"] >= settle

    return check


async def test_rollout_surge_zero(serving_op, admin, namespace):
    create_model(admin, namespace, "roll0", minReplicas=2)
    old = await wait_pods(admin, namespace, "roll0", 2)
    for p in old:
        set_pod_phase(admin, namespace, p)
    patch_model(admin, namespace, "roll0", {"spec": {"args": ["--x"]}})
    # surge 0: one Ready old Pod replaced per pass while all are Ready; never more than 2 Pods
    old_hash = old[0]["metadata"]["labels"]["pod-hash"]
    seen_max = 0

    async def progress():
        nonlocal seen_max
        pods = list_pods(admin, namespace, "roll0")
        seen_max = max(seen_max, len(pods))
        for p in pods:
            if p["metadata"]["labels"]["pod-hash"] != old_hash and not p.get("status", {}).get("conditions"):
                set_pod_phase(admin, namespace, p)
        return len(pods) == 2 and all(p["metadata"]["labels"]["pod-hash"] != old_hash for p in pods)

    await eventually(progress, timeout=60, interval=0.2, what="rolled to new hash")
    assert seen_max <= 2


async def test_rollout_surge_one_keeps_ready_capacity(serving_op, admin, namespace):
    cfg = dict(TEST_CONFIG, modelRollouts={"surge": 1})
    write_config(serving_op, cfg)
    await eventually(lambda: serving_op.rec.source.current.surge == 1, what="config reloaded")
    create_model(admin, namespace, "roll1", minReplicas=2)
    old = await wait_pods(admin, namespace, "roll1", 2)
    for p in old:
        set_pod_phase(admin, namespace, p)
    old_hash = old[0]["metadata"]["labels"]["pod-hash"]
    patch_model(admin, namespace, "roll1", {"spec": {"env": {"NEW": "1"}}})
    pods = await wait_pods(admin, namespace, "roll1", 3, what="one surge Pod")
    assert sum(p["metadata"]["labels"]["pod-hash"] == old_hash for p in pods) == 2
    min_ready_old_or_new = []

    async def progress():
        pods = list_pods(admin, namespace, "roll1")
        min_ready_old_or_new.append(sum(1 for p in pods if p.get("status", {}).get("conditions")))
        for p in pods:
            if p["metadata"]["labels"]["pod-hash"] != old_hash and not p.get("status", {}).get("conditions"):
                set_pod_phase(admin, namespace, p)
        return len(pods) == 2 and all(p["metadata"]["labels"]["pod-hash"] != old_hash for p in pods)

    await eventually(progress, timeout=60, interval=0.2, what="rolled with surge")
    assert min(min_ready_old_or_new) >= 2


async def test_broken_profile_gives_condition_while_others_work(serving_op, admin, namespace):
    create_model(admin, namespace, "broken", resourceProfile="nope:1")
    create_model(admin, namespace, "fine")
    await wait_pods(admin, namespace, "fine", 1)
    model = await eventually(lambda: condition(x := get_model(admin, namespace, "broken"), "ConfigValid") and x,
                             what="ConfigValid condition")
    status, reason, message = condition(model, "ConfigValid")
    assert status == "False" and "spec.resourceProfile" in message and "nope" in message
    assert condition(model, "Ready")[:2] == ("False", "ConfigInvalid")
    assert list_pods(admin, namespace, "broken") == []
    events = await eventually(
        lambda: [e for e in admin.get(f"/api/v1/namespaces/{namespace}/events").json()["items"]
                 if e["involvedObject"]["name"] == "broken" and e["reason"] == "InvalidConfig"],
        what="InvalidConfig event")
    assert "spec.resourceProfile" in events[0]["message"]
    # a config change that adds the profile fixes it without touching the Model
    write_config(serving_op, dict(TEST_CONFIG, resourceProfiles={**TEST_CONFIG["resourceProfiles"],
                                                                 "nope": {"requests": {"cpu": "1"}}}))
    await wait_pods(admin, namespace, "broken", 1)
    await eventually(lambda: condition(get_model(admin, namespace, "broken"), "ConfigValid")[0] == "True",
                     what="ConfigValid=True")


async def test_bad_json_patch_and_invalid_reload(serving_op, admin, namespace):
    create_model(admin, namespace, "patched")
    [pod] = await wait_pods(admin, namespace, "patched", 1)
    bad = dict(TEST_CONFIG, modelServerPods={"jsonPatches": [{"op": "remove", "path": "/spec/nope"}]})
    write_config(serving_op, bad)
    model = await eventually(lambda: (c := condition(x := get_model(admin, namespace, "patched"), "ConfigValid"))
                             and c[0] == "False" and x, what="patch failure condition")
    assert "modelServerPods.jsonPatches" in condition(model, "ConfigValid")[2]
    assert [p["metadata"]["name"] for p in list_pods(admin, namespace, "patched")] == [pod["metadata"]["name"]]
    # an invalid file is refused and the previous config stays in force
    serving_op.config_path.write_text("modelRollouts: {surge: -1}\n")
    await eventually(lambda: serving_op.rec.source.error and "modelRollouts.surge" in serving_op.rec.source.error,
                     what="invalid reload reported")
    good = dict(TEST_CONFIG, modelServerPods={"jsonPatches": [
        {"op": "add", "path": "/metadata/labels/team", "value": "a"},
        {"op": "add", "path": "/spec/hostNetwork", "value": False}]})
    write_config(serving_op, good)
    [new] = await wait_pods(admin, namespace, "patched", 1, pred=lambda p: p["metadata"]["labels"].get("team") == "a",
                            what="patched Pod")
    assert new["metadata"]["labels"]["pod-hash"] != pod["metadata"]["labels"]["pod-hash"]


async def test_a_reconcile_writes_the_models_status_once_or_not_at_all(serving_op, admin, namespace):
    """Each pass computes the Model's status and writes it at one place: a Pod turning Ready costs one status
    PATCH (not one per step), and a pass that finds nothing changed writes nothing at all."""
    create_model(admin, namespace, "once")
    [pod] = await wait_pods(admin, namespace, "once", 1)
    await eventually(lambda: ((get_model(admin, namespace, "once").get("status") or {}).get("replicas") == {"all": 1, "ready": 0}),
                     what="status all=1 ready=0")
    await eventually(quiet(serving_op), timeout=30, interval=0.1, what="controller idle")
    status_url = models_url(namespace, "once") + "/status"
    writes: list[tuple[str, str]] = []

    def record(method: str, path: str, status: int, seconds: float) -> None:
        if method in ("POST", "PUT", "PATCH", "DELETE"):
            writes.append((method, path))

    serving_op.client.hooks.append(record)
    try:
        rec = serving_op.rec
        done = rec.controller.reconciles
        rec.controller.enqueue(Request(namespace, "once"))
        await eventually(lambda: rec.controller.reconciles > done and not rec.controller.active, what="reconcile ran")
        assert writes == []  # nothing changed: nothing written
        set_pod_phase(admin, namespace, pod)
        await eventually(lambda: get_model(admin, namespace, "once")["status"]["replicas"].get("ready") == 1, what="ready=1")
        await eventually(quiet(serving_op), timeout=30, interval=0.1, what="controller idle")
        assert writes == [("PATCH", status_url)]  # one status write, and the Pod's readiness changes nothing else
    finally:
        serving_op.client.hooks.remove(record)
    assert condition(get_model(admin, namespace, "once"), "Ready")[:2] == ("True", "PodsReady")
