"""Entrypoint parsing and pod template decoration."""

import pytest

from kaiwo_ctrl.workloads.reconcile.desired import main_workload
from kaiwo_ctrl.workloads.builders.podtemplate import EntrypointError, normalize_entrypoint, parse_entrypoint
from kaiwo_ctrl.workloads.base.world import World


@pytest.mark.parametrize(
    "text,command",
    [
        ("sleep 1", ["/bin/sh", "-c", "sleep 1"]),
        ("  sleep 1\n", ["/bin/sh", "-c", "sleep 1"]),
        ("#!/bin/bash\n echo a", ["/bin/bash", "-c", " echo a"]),
        ("#!/bin/bash\n# comment\n\necho a", ["/bin/bash", "-c", "# comment\n\necho a"]),
        ("python train.py \\\n  --epochs 3", ["/bin/sh", "-c", "python train.py    --epochs 3"]),
        ("echo a \\  \n b", ["/bin/sh", "-c", "echo a   b"]),
        ("#!/usr/bin/env bash\necho hi", ["/usr/bin/env", "bash", "-c", "echo hi"]),
        ("#! /usr/bin/python3 \nprint(1)", ["/usr/bin/python3", "-c", "print(1)"]),
    ],
)
def test_parse_entrypoint(text, command):
    assert parse_entrypoint(text) == command


@pytest.mark.parametrize("text", ["", "   ", "#!\necho a", "#!/bin/bash", "#!/bin/bash\n   \n"])
def test_parse_entrypoint_rejects(text):
    with pytest.raises(EntrypointError):
        parse_entrypoint(text)


def test_normalize_entrypoint_for_ray():
    assert normalize_entrypoint("  python a.py \\\n --x 1 \n") == "python a.py   --x 1"


WORLD = World.from_dicts(nodes=None, config={"ray": {"defaultRayImage": "ray:img"}})


def job(**spec):
    return {"apiVersion": "kaiwo.silogen.ai/v1alpha1", "kind": "KaiwoJob",
            "metadata": {"name": "j", "namespace": "ns", "uid": "u-1"}, "spec": spec}


def pod(obj, world=WORLD):
    return main_workload(obj, world)["spec"]["template"]


def test_metadata_labels_precedence_and_annotations():
    obj = job(user="Me@X.org", podTemplateSpecLabels={"a": "1", "kaiwo.silogen.ai/name": "nope", "team": "pts"})
    obj["metadata"]["labels"] = {"team": "meta", "kueue.x-k8s.io/queue-name": "q", "b": "2"}
    obj["metadata"]["annotations"] = {
        "note": "x",
        "kubectl.kubernetes.io/last-applied-configuration": "{...}",
    }
    t = pod(obj)
    assert t["metadata"]["labels"] == {
        "a": "1",
        "team": "pts",
        "b": "2",
        "kaiwo.silogen.ai/name": "j",
        "kaiwo.silogen.ai/user": "me-x.org",
        "kaiwo.silogen.ai/type": "job",
        "kaiwo.silogen.ai/run-id": "u-1",
    }
    # no topology label in the spec: no Kueue topology request (TAS is opt-in)
    assert t["metadata"]["annotations"] == {"note": "x"}


@pytest.mark.parametrize(
    "spec,annotation",
    [
        # opt-in (upstream Kaiwo #432): nothing named, no topology request at all
        ({}, {}),
        ({"preferredTopologyLabel": ""}, {}),
        ({"requiredTopologyLabel": "", "preferredTopologyLabel": ""}, {}),
        ({"preferredTopologyLabel": "rack"}, {"kueue.x-k8s.io/podset-preferred-topology": "rack"}),
        ({"preferredTopologyLabel": "kubernetes.io/hostname"},
         {"kueue.x-k8s.io/podset-preferred-topology": "kubernetes.io/hostname"}),
        ({"requiredTopologyLabel": "block"}, {"kueue.x-k8s.io/podset-required-topology": "block"}),
        ({"requiredTopologyLabel": "block", "preferredTopologyLabel": "rack"}, {"kueue.x-k8s.io/podset-required-topology": "block"}),
        ({"requiredTopologyLabel": "", "preferredTopologyLabel": "rack"}, {"kueue.x-k8s.io/podset-preferred-topology": "rack"}),
    ],
)
def test_topology_annotation(spec, annotation):
    assert pod(job(**spec))["metadata"].get("annotations", {}) == annotation


@pytest.mark.parametrize("kind", ["job", "service"])
def test_topology_opt_in_reaches_every_pod_template(kind):
    """Every builder's pod templates (Job, Deployment, Ray head and workers) carry the
    topology request only when the spec asks for one."""
    from kaiwo_ctrl.workloads.reconcile.render import render

    def templates(obj):
        out = []

        def walk(node):
            if isinstance(node, dict):
                if isinstance(node.get("template"), dict) and "containers" in (node["template"].get("spec") or {}):
                    out.append(node["template"])
                for v in node.values():
                    walk(v)
            elif isinstance(node, list):
                for v in node:
                    walk(v)

        walk(obj)
        return out

    for ray in (False, True):
        for extra, want in (({}, None), ({"preferredTopologyLabel": "kaiwo/topology-rack"}, "kaiwo/topology-rack")):
            doc = {
                "apiVersion": "kaiwo.silogen.ai/v1alpha1",
                "kind": "KaiwoJob" if kind == "job" else "KaiwoService",
                "metadata": {"name": "w", "namespace": "ns"},
                "spec": {"image": "img", "entrypoint": "python x.py", "ray": ray, **extra},
            }
            children = render([doc], nodes=None)
            found = [t for c in children for t in templates(c)]
            assert found, (kind, ray)
            for t in found:
                got = (t["metadata"].get("annotations") or {}).get("kueue.x-k8s.io/podset-preferred-topology")
                assert got == want, (kind, ray, extra, t["metadata"])
                assert "kueue.x-k8s.io/podset-required-topology" not in (t["metadata"].get("annotations") or {})


def test_default_template_security_dshm_scheduler_image():
    t = pod(job())
    s = t["spec"]
    assert s["schedulerName"] == "kaiwo-scheduler"
    assert s["restartPolicy"] == "Never"
    assert s["securityContext"] == {"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000}
    assert s["volumes"] == [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}}]
    c = s["containers"][0]
    assert c["name"] == "workload" and c["imagePullPolicy"] == "Always"
    assert c["image"] == "ray:img"  # the default Ray image, for non-Ray kinds too
    assert c["volumeMounts"] == [{"name": "dshm", "mountPath": "/dev/shm"}]
    assert "command" not in c


def test_dangerous_drops_security_context():
    assert "securityContext" not in pod(job(dangerous=True))["spec"]


def test_scheduler_name_from_config():
    w = World.from_dicts(nodes=None, config={"scheduling": {"kubeSchedulerName": "other"}})
    assert pod(job(), w)["spec"]["schedulerName"] == "other"


def test_containers_env_mounts_secret_volumes_order():
    obj = job(
        image="img:1",
        env=[{"name": "A", "value": "1"}],
        secretVolumes=[
            {"name": "tok", "secretName": "s", "key": "token", "subPath": "token.txt", "mountPath": "/etc/tok/token.txt"},
            {"name": "all", "secretName": "s2", "mountPath": "/etc/all"},
        ],
        storage={
            "storageEnabled": True,
            "data": {"storageSize": "1Gi", "mountPath": "/data"},
            "huggingFace": {"storageSize": "2Gi"},
        },
        imagePullSecrets=[{"name": "reg"}],
    )
    t = pod(obj)
    s = t["spec"]
    c = s["containers"][0]
    assert c["image"] == "img:1"
    assert c["volumeMounts"] == [
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "data", "mountPath": "/data"},
        {"name": "hf", "mountPath": "/hf_cache"},
        {"name": "tok", "mountPath": "/etc/tok/token.txt", "subPath": "token.txt"},
        {"name": "all", "mountPath": "/etc/all"},
    ]
    assert c["env"] == [
        {"name": "A", "value": "1"},
        {"name": "HF_HOME", "value": "/hf_cache"},
        {"name": "NUM_GPUS", "value": "0"},
        {"name": "NUM_REPLICAS", "value": "1"},
        {"name": "NUM_GPUS_PER_REPLICA", "value": "0"},
    ]
    assert s["volumes"][1:] == [
        {"name": "data", "persistentVolumeClaim": {"claimName": "j-data"}},
        {"name": "hf", "persistentVolumeClaim": {"claimName": "j-hf"}},
        {"name": "tok", "secret": {"secretName": "s", "items": [{"key": "token", "path": "token.txt"}]}},
        {"name": "all", "secret": {"secretName": "s2"}},
    ]
    assert s["imagePullSecrets"] == [{"name": "reg"}]


def test_storage_disabled_adds_nothing():
    t = pod(job(storage={"storageEnabled": False, "data": {"storageSize": "1Gi"}}))
    assert [v["name"] for v in t["spec"]["volumes"]] == ["dshm"]


def test_config_default_mount_paths_used_when_workload_leaves_them_empty():
    w = World.from_dicts(nodes=None, config={"storage": {"defaultDataMountPath": "/d", "defaultHfMountPath": "/h"}})
    t = pod(job(storage={"storageEnabled": True, "data": {"storageSize": "1Gi"}, "huggingFace": {"storageSize": "1Gi"}}), w)
    mounts = t["spec"]["containers"][0]["volumeMounts"]
    assert {"name": "data", "mountPath": "/d"} in mounts and {"name": "hf", "mountPath": "/h"} in mounts


def test_init_containers_get_mounts_env_but_no_image_num_env_or_derived_resources():
    obj = job(
        env=[{"name": "A", "value": "1"}],
        resources={"limits": {"memory": "1Gi"}},
        job={"spec": {"template": {"spec": {
            "initContainers": [{"name": "init", "image": "busybox"}],
            "containers": [{"name": "main"}],
        }}}},
        storage={"storageEnabled": True, "data": {"storageSize": "1Gi"}},
    )
    s = pod(obj)["spec"]
    init = s["initContainers"][0]
    assert init["env"] == [{"name": "A", "value": "1"}]
    assert init["volumeMounts"] == [{"name": "data", "mountPath": "/workload"}]
    assert init["resources"] == {"limits": {"memory": "1Gi"}}
    main = s["containers"][0]
    assert main["resources"]["limits"] == {"memory": "1Gi", "cpu": "2"}
    # user-supplied spec: no scheduler name, no dshm, no security context
    assert "schedulerName" not in s and "securityContext" not in s
    assert [v["name"] for v in s["volumes"]] == ["data"]


NODES = [{"metadata": {"name": "n", "labels": {"kaiwo/nodepool": "amd-mi300x-8gpu-100core-1000gi"}},
          "status": {"allocatable": {"amd.com/gpu": "8"}}}]


def test_gpu_model_affinity_replaces_node_affinity():
    w = World.from_dicts(nodes=NODES)
    obj = job(gpus=2, gpuModels=["mi300x", "mi250"], job={"spec": {"template": {"spec": {
        "affinity": {"nodeAffinity": {"x": 1}, "podAffinity": {"y": 2}}, "containers": [{"name": "c"}]}}}})
    aff = pod(obj, w)["spec"]["affinity"]
    assert aff["podAffinity"] == {"y": 2}
    assert aff["nodeAffinity"] == {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kaiwo/gpu-model", "operator": "In", "values": ["mi300x", "mi250"]}]}]}}
    assert "affinity" not in pod(job(gpuModels=["mi300x"]), w)["spec"]  # no GPUs -> no affinity


@pytest.mark.parametrize("taint,gpus,expected", [(True, 1, True), (True, 0, False), (False, 1, False)])
def test_gpu_toleration(taint, gpus, expected):
    w = World.from_dicts(nodes=NODES, config={"nodes": {"addTaintsToGpuNodes": taint, "defaultGpuTaintKey": "gpu-taint"}})
    tol = pod(job(gpus=gpus), w)["spec"].get("tolerations")
    if expected:
        assert tol == [{"key": "gpu-taint", "operator": "Exists", "effect": "NoSchedule"}]
    else:
        assert tol is None


def test_priority_class_name_only_when_k8s_priority_class_exists():
    w = World.from_dicts(nodes=None, priority_classes=["high"], workload_priority_classes=["wl"])
    assert pod(job(priorityClass="high"), w)["spec"]["priorityClassName"] == "high"
    assert "priorityClassName" not in pod(job(priorityClass="wl"), w)["spec"]
    j = main_workload(job(priorityClass="wl"), w)
    assert j["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "wl"
    j = main_workload(job(priorityClass="missing"), w)
    assert j["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "missing"  # label set anyway


def test_entrypoint_sets_first_container_command_keeps_args():
    obj = job(entrypoint="#!/bin/bash\necho hi", job={"spec": {"template": {"spec": {"containers": [
        {"name": "a", "command": ["x"], "args": ["--y"]}, {"name": "b"}]}}}})
    cs = pod(obj)["spec"]["containers"]
    assert cs[0]["command"] == ["/bin/bash", "-c", "echo hi"] and cs[0]["args"] == ["--y"]
    assert "command" not in cs[1]
