"""Pure parts of serving/: config, URLs, profiles, JSON patches, Pods, rollout plan."""

from __future__ import annotations

import pytest

from kaiwo_ctrl.runtime.objects.fielderrors import FieldError
from kaiwo_ctrl.serving.model.config import ConfigError, ConfigSource, load_config, parse_config
from kaiwo_ctrl.serving.model.modelfields import bounded_replicas, feature_labels
from kaiwo_ctrl.serving.model.files import desired_configmap, file_key
from kaiwo_ctrl.serving.model.jsonpatch import PatchError, apply_patch
from kaiwo_ctrl.serving.model.pods import build_pod
from kaiwo_ctrl.serving.model.profiles import multiply, resolve_profile
from kaiwo_ctrl.serving.model.rollout import deletion_order, plan
from kaiwo_ctrl.serving.model.urls import parse_url


def model(**spec) -> dict:
    base = {"url": "hf://org/repo", "engine": "VLLM", "features": [], "resourceProfile": "cpu:1"}
    base.update(spec)
    return {"metadata": {"name": "m", "namespace": "ns", "uid": "u-1"}, "spec": base}


# ---------------------------------------------------------------- config
def test_defaults_have_chart_profiles_and_images():
    c = parse_config(None)
    assert c.resource_profiles["cpu"] == {"imageName": "cpu", "requests": {"cpu": "1", "memory": "2Gi"}}
    assert c.resource_profiles["nvidia-gpu-l4"]["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert set(c.images) == {"VLLM", "OLlama", "FasterWhisper", "Infinity"}
    assert all("default" in imgs for imgs in c.images.values())
    assert c.surge == 1 and c.autoscaling_interval == 10 and c.autoscaling_time_window == 600


def test_file_merges_over_defaults():
    c = parse_config({"resourceProfiles": {"x": {"requests": {"cpu": "2"}}}, "modelServers": {"VLLM": {"images": {"default": "v:1"}}},
                      "metricsAddr": ":9090", "modelAutoscaling": {"interval": "1m30s"}})
    assert "x" in c.resource_profiles and "cpu" in c.resource_profiles
    assert c.images["VLLM"]["default"] == "v:1" and c.images["VLLM"]["cpu"].startswith("public.ecr.aws")
    assert c.autoscaling_interval == 90


@pytest.mark.parametrize(
    "data,key",
    [
        ({"modelRollouts": {"surge": -1}}, "modelRollouts.surge"),
        ({"modelAutoscaling": {"interval": "10 seconds"}}, "modelAutoscaling.interval"),
        ({"resourceProfiles": {"p": {"requests": {"cpu": True}}}}, "resourceProfiles.p.requests.cpu"),
        ({"resourceProfiles": {"p": {"gpus": 1}}}, "resourceProfiles.p.gpus"),
        ({"cacheProfiles": {"c": {"sharedFilesystem": {}}}}, "cacheProfiles.c.sharedFilesystem"),
        ({"modelServers": {"TGI": {"images": {}}}}, "modelServers.TGI"),
        ({"modelServerPods": {"jsonPatches": [{"op": "merge", "path": "/x"}]}}, "modelServerPods.jsonPatches[0].op"),
        ({"secretNames": {"aws": 3}}, "secretNames.aws"),
        (["not", "a", "mapping"], "(root)"),
    ],
)
def test_invalid_config_names_the_key(data, key):
    with pytest.raises(ConfigError) as e:
        parse_config(data)
    assert e.value.key == key


def test_config_source_reloads_and_keeps_last_good(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("modelRollouts: {surge: 0}\n")
    src = ConfigSource(f)
    seen = []
    src.listeners.append(seen.append)
    assert src.current.surge == 0 and not src.check()
    f.write_text("modelRollouts: {surge: 2}\n")
    assert src.check() and src.current.surge == 2 and len(seen) == 1
    f.write_text("modelRollouts: {surge: x}\n")
    assert not src.check() and src.current.surge == 2 and "modelRollouts.surge" in src.error
    with pytest.raises(ConfigError):
        load_config(tmp_path / "missing.yaml")


# ------------------------------------------------------------ urls, profiles
def test_parse_url():
    u = parse_url("ollama://registry:5000/lib/m:tag?insecure=true&pull=False")
    assert (u.scheme, u.ref, u.name, u.path, u.insecure, u.pull) == ("ollama", "registry:5000/lib/m:tag", "registry:5000", "lib/m:tag", True, False)
    assert parse_url("pvc://claim/a/b?model=q").model_param == "q"
    with pytest.raises(FieldError):
        parse_url("ftp://x")


@pytest.mark.parametrize("q,n,out", [("2Gi", 3, "6Gi"), ("500m", 3, "1500m"), ("1", 4, "4"), (1, 2, "2"), ("1.5", 2, "3"), ("0.5Gi", 3, "1.5Gi")])
def test_multiply(q, n, out):
    assert multiply(q, n, "x") == out


@pytest.mark.parametrize("value,detail", [(None, "required"), ("cpu", "<profile>:<count>"), ("cpu:x", "not an integer"),
                                          ("cpu:0", "at least 1"), ("gone:1", "unknown resource profile")])
def test_bad_profile_names_the_field(value, detail):
    with pytest.raises(FieldError) as e:
        resolve_profile(value, parse_config(None))
    assert e.value.path == "spec.resourceProfile" and detail in str(e.value)


# ------------------------------------------------------------------ patches
def test_json_patch_ops():
    doc = {"a": {"b": [1, 2]}, "c": 1}
    out = apply_patch(doc, [{"op": "add", "path": "/a/b/-", "value": 3}, {"op": "replace", "path": "/c", "value": 2},
                            {"op": "move", "from": "/c", "path": "/d"}, {"op": "copy", "from": "/d", "path": "/e"},
                            {"op": "remove", "path": "/a/b/0"}, {"op": "test", "path": "/e", "value": 2},
                            {"op": "add", "path": "/a/x~1y", "value": True}])
    assert out == {"a": {"b": [2, 3], "x/y": True}, "d": 2, "e": 2} and doc == {"a": {"b": [1, 2]}, "c": 1}
    with pytest.raises(PatchError, match=r"jsonPatches\[0\]"):
        apply_patch(doc, [{"op": "remove", "path": "/nope"}])


# --------------------------------------------------------------------- pods
def test_hash_ignores_metadata_but_follows_spec():
    c = parse_config(None)
    a = build_pod(model(), c)
    b = build_pod(model(features=["TextGeneration"]), c)
    assert a.hash == b.hash
    assert build_pod(model(args=["--x"]), c).hash != a.hash
    assert build_pod(model(files=[{"path": "/a", "content": "1"}]), c).hash == build_pod(model(files=[{"path": "/a", "content": "2"}]), c).hash


def test_json_patch_applied_before_hash():
    c = parse_config({"modelServerPods": {"jsonPatches": [{"op": "add", "path": "/spec/priorityClassName", "value": "hi"}]}})
    d = build_pod(model(), c)
    assert d.pod["spec"]["priorityClassName"] == "hi" and d.hash != build_pod(model(), parse_config(None)).hash


def test_adapters_sidecar_and_gcs_volume_once():
    c = parse_config({"cacheProfiles": {"f": {"sharedFilesystem": {"storageClassName": "s"}}}})
    d = build_pod(model(url="gs://b/m", cacheProfile="f", adapters=[{"name": "a", "url": "hf://o/a"}]), c)
    names = [v["name"] for v in d.pod["spec"]["volumes"]]
    assert names.count("gcp-credentials") == 1  # KubeAI declares it twice and the Pod is rejected
    server, loader = d.pod["spec"]["containers"]
    assert server["args"][-1] == "--enable-lora" and server["env"][0] == {"name": "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "value": "True"}
    assert loader["name"] == "loader" and {"name": "adapters", "mountPath": "/adapters"} in loader["volumeMounts"]
    assert {"name": "adapters", "mountPath": "/adapters", "readOnly": True} in server["volumeMounts"]


def test_ollama_pvc_needs_model_param():
    with pytest.raises(FieldError, match=r"\?model="):
        build_pod(model(engine="OLlama", url="pvc://claim"), parse_config(None))
    d = build_pod(model(engine="OLlama", url="pvc://claim/dir?model=qwen"), parse_config(None))
    s = d.pod["spec"]["containers"][0]
    assert s["startupProbe"]["exec"]["command"][2] == "/bin/ollama cp qwen m"
    assert {"name": "OLLAMA_MODELS", "value": "/model"} in s["env"]


def test_files_configmap_and_keys():
    assert file_key("/config/a.txt") == "_config_a.txt"
    assert desired_configmap(model()) is None
    cm = desired_configmap(model(files=[{"path": "/a/b", "content": "x"}]))
    assert cm["metadata"]["name"] == "model-m-files" and cm["data"] == {"_a_b": "x"}


# ------------------------------------------------------------ model object
def test_feature_labels_and_bounds():
    m = model(features=["TextEmbedding"])
    m["metadata"]["labels"] = {"features.kubeai.org/TextGeneration": "true", "team": "a"}
    assert feature_labels(m) == {"features.kubeai.org/TextEmbedding": "true", "features.kubeai.org/TextGeneration": None}
    assert bounded_replicas({}) == 0
    assert bounded_replicas({"replicas": 0}) is None
    assert bounded_replicas({"minReplicas": 2, "replicas": 1}) == 2
    assert bounded_replicas({"maxReplicas": 2, "replicas": 5}) == 2
    assert bounded_replicas({"autoscalingDisabled": True, "maxReplicas": 2, "replicas": 5}) is None


# ------------------------------------------------------------------ rollout
def pod(name: str, h: str, ready: bool = False, node: bool = False, created: str = "2026-01-01T00:00:00Z", phase: str = "Running") -> dict:
    return {"metadata": {"name": name, "labels": {"pod-hash": h}, "creationTimestamp": created},
            "spec": {"nodeName": "n"} if node else {},
            "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def names(pods):
    return [p["metadata"]["name"] for p in pods]


def test_deletion_order():
    pods = [pod("ready-new", "H", True, True), pod("old-sched", "O", False, True), pod("unsched-old", "O"),
            pod("unsched-new-young", "H", created="2026-01-02T00:00:00Z"), pod("unsched-new", "H")]
    assert names(deletion_order(pods, "H")) == ["unsched-old", "unsched-new-young", "unsched-new", "old-sched", "ready-new"]


def test_plan_scale_and_replace():
    assert plan([], "H", 2, 1).create == 2
    p = plan([pod("a", "H"), pod("b", "H", True)], "H", 1, 0)
    assert names(p.delete) == ["a"] and p.create == 0
    failed = plan([pod("f", "H", phase="Failed"), pod("ok", "H", True)], "H", 2, 0)
    assert names(failed.delete) == ["f"] and failed.create == 1


def test_plan_rollout_surge_zero_and_one():
    old = [pod("o1", "O", True, True), pod("o2", "O", True, True)]
    p0 = plan(old, "H", 2, 0)
    assert len(p0.delete) == 1 and p0.create == 1  # one Ready old Pod per pass
    p1 = plan(old, "H", 2, 1)
    assert p1.create == 1 and p1.delete == []  # surge Pod first, all old ones kept
    p1b = plan([*old, pod("n1", "H", True, True)], "H", 2, 1)
    assert len(p1b.delete) == 1 and p1b.create == 1  # 3 Ready = desired: replace one old Pod
    p_notready = plan([pod("o1", "O"), pod("o2", "O", True, True)], "H", 2, 0)
    assert names(p_notready.delete)[0] == "o1"


def test_plan_rollout_under_full_quota_makes_room():
    """The surge Pod waits for quota the old Pods hold: one Ready old Pod goes per pass."""
    old = [pod("o1", "O", True, True), pod("o2", "O", True, True)]
    waiting = pod("n1", "H")
    assert plan([*old, waiting], "H", 2, 1).delete == []  # without Kueue's verdict: wait as before
    p = plan([*old, waiting], "H", 2, 1, frozenset({"n1"}))
    assert len(p.delete) == 1 and names(p.delete)[0] in ("o1", "o2") and p.create == 1
    # not while an old Pod is still terminating (its quota is on its way back)
    going = pod("o0", "O", True, True)
    going["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:01Z"
    assert plan([going, *old, waiting], "H", 2, 1, frozenset({"n1"})).delete == []
    # an out-of-date Pod waiting for quota is replaced as any not-Ready old Pod; no Ready one goes for it
    assert names(plan([*old, pod("n1", "O")], "H", 2, 1, frozenset({"n1"})).delete) == ["n1"]


# ---------------------------------------------------------------------- cli
def test_run_refuses_an_invalid_model_config(tmp_path, capsys):
    from kaiwo_ctrl.cli import main

    bad = tmp_path / "bad.yaml"
    bad.write_text("resourceProfiles:\n  cpu:\n    requests: {cpu: [1]}\n")
    # listeners off: the default ports may be taken on a shared machine, and a taken port is exit 3
    off = ["--metrics-bind-address=0", "--health-probe-bind-address=0", "--proxy-bind-address=0"]
    assert main(["run", "--model-config", str(bad), "--kubeconfig", str(tmp_path / "none"), *off]) == 2
    assert "resourceProfiles.cpu.requests.cpu" in capsys.readouterr().err


def test_render_models(tmp_path, capsys):
    import yaml

    from kaiwo_ctrl.cli import main

    f = tmp_path / "m.yaml"
    f.write_text(yaml.safe_dump({"apiVersion": "kubeai.org/v1", "kind": "Model", "metadata": {"name": "m"},
                                 "spec": {"url": "hf://o/r", "engine": "VLLM", "features": [], "resourceProfile": "cpu:2",
                                          "minReplicas": 2, "cacheProfile": "c", "files": [{"path": "/a", "content": "x"}]}}))
    cfg = tmp_path / "c.yaml"
    cfg.write_text("cacheProfiles: {c: {sharedFilesystem: {storageClassName: s}}}\n")
    assert main(["render", str(f), "--model-config", str(cfg)]) == 0
    kinds = [d["kind"] for d in yaml.safe_load_all(capsys.readouterr().out)]
    assert kinds == ["ConfigMap", "PersistentVolumeClaim", "Job", "Pod", "Pod"]
    assert main(["render", str(f)]) == 2  # cache profile "c" is not in the built-in config
    assert "spec.cacheProfile" in capsys.readouterr().err
