"""Typed models: round trips, defaults, Python-side validation, helpers."""

from __future__ import annotations

import copy
from datetime import timedelta

import pytest
import yaml
from pydantic import ValidationError

from api import registry
from api.config.v1alpha1 import AIMNamespaceConfig, KaiwoConfig, KaiwoConfigSpec
from api.examples import EXAMPLES, INVALID_EXAMPLES, all_examples, load
from api.kaiwo.download import (
    CloudDownloadFolder,
    DownloadTaskConfig,
    S3DownloadItem,
    ValueReference,
)
from api.kaiwo.v1alpha1 import (
    KaiwoJob,
    KaiwoJobList,
    KaiwoJobSpec,
    KaiwoQueueConfig,
    KaiwoService,
    Status,
    TopologySpec,
)
from api.kubeai.v1 import Model
from api.meta import Condition, format_time, parse_duration, parse_time


def full_form(kind: str, manifest: dict) -> dict:
    """The manifest as stored: pass it through the model once."""
    return registry.by_kind(kind).model.model_validate(manifest).to_k8s()


# ---------------------------------------------------------------- round trips


@pytest.mark.parametrize("kind,manifest", all_examples(), ids=lambda v: v if isinstance(v, str) else "")
def test_full_form_round_trips_exactly(kind, manifest):
    stored = full_form(kind, manifest)
    again = registry.parse(copy.deepcopy(stored))
    assert type(again) is registry.by_kind(kind).model
    assert again.to_k8s() == stored


@pytest.mark.parametrize("kind,manifest", all_examples(), ids=lambda v: v if isinstance(v, str) else "")
def test_user_fields_survive_unchanged(kind, manifest):
    """Everything the user wrote is in the dump with the same value (defaults only add)."""
    dumped = full_form(kind, manifest)

    def contained(small, big, path="") -> None:
        if isinstance(small, dict):
            assert isinstance(big, dict), path
            for k, v in small.items():
                assert k in big, f"{path}.{k} dropped"
                contained(v, big[k], f"{path}.{k}")
        elif isinstance(small, list):
            assert isinstance(big, list) and len(big) == len(small), path
            for i, (a, b) in enumerate(zip(small, big)):
                contained(a, b, f"{path}[{i}]")
        else:
            assert small == big and type(small) is type(big) or (
                isinstance(small, int) and isinstance(big, float) and small == big
            ), f"{path}: {small!r} != {big!r}"

    contained(manifest, dumped)


def test_kaiwo_job_example_typed_access():
    job = KaiwoJob.model_validate(load(EXAMPLES["KaiwoJob"][0]))
    spec = job.spec
    assert job.name == "finetune-llama" and job.namespace == "team-a"
    assert spec.gpus == 8 and spec.gpu_vendor == "amd" and spec.gpu_models == ["mi300x"]
    assert spec.replicas == 1 and spec.ray is False and spec.dangerous is False
    assert parse_duration(spec.duration) == timedelta(hours=12)
    assert spec.entrypoint.startswith("#!/bin/bash")
    assert spec.resources["limits"]["cpu"] == 8
    assert spec.env[0]["valueFrom"]["secretKeyRef"]["name"] == "hf-token"
    storage = spec.storage
    assert storage.storage_enabled is True and storage.access_mode == "ReadWriteMany"
    assert storage.data.mount_path == "/workload" and storage.data.storage_size == "100Gi"
    s3 = storage.data.download.s3[0]
    assert s3.endpoint_url == "http://minio.minio:9000"
    assert s3.access_key_id.secret_name == "s3-creds"
    assert s3.buckets[0].files[0].target_path == "data/part-0.parquet"
    assert s3.buckets[0].folders[0].glob == "*.jpg"
    assert storage.data.download.azure_blob[0].containers[0].name == "blobs"
    assert storage.data.download.git[0].token.secret_key == "token"
    assert storage.hugging_face.mount_path == "/hf_cache"
    assert storage.hugging_face.pre_cache_repos[0].repo_id == "meta-llama/Llama-3.1-8B"
    assert job.status is None


def test_kaiwo_service_ray_example():
    svc = KaiwoService.model_validate(load(EXAMPLES["KaiwoService"][0]))
    assert svc.spec.ray is True and svc.spec.replicas == 2 and svc.spec.gpus_per_replica == 4
    assert "import_path: serve:app" in svc.spec.serve_config_v2
    assert svc.spec.ray_service["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["groupName"] == "gpu"
    assert svc.spec.storage.access_mode == "ReadWriteOnce"
    assert svc.to_k8s()["spec"]["serveConfigV2"] == svc.spec.serve_config_v2


def test_queue_config_example():
    qc = KaiwoQueueConfig.model_validate(load(EXAMPLES["KaiwoQueueConfig"][0]))
    assert [f.name for f in qc.spec.resource_flavors] == ["amd-mi300x-8gpu", "cpu-only-0gpu-7core-14gi"]
    assert qc.spec.resource_flavors[0].topology_name == "default-topology"
    assert qc.spec.cluster_queues[0].spec["resourceGroups"][0]["flavors"][0]["resources"][2]["nominalQuota"] == 8
    assert qc.spec.cluster_queues[0].namespaces == ["team-a", "team-b"]
    assert [(w.metadata.name, w.value) for w in qc.spec.workload_priority_classes] == [("high", 1000), ("low", 10)]
    levels = [lvl.node_label for lvl in qc.spec.topologies[0].spec.levels]
    assert levels == ["kaiwo/topology-block", "kaiwo/topology-rack", "kubernetes.io/hostname"]


def test_empty_kaiwo_config_gets_every_default():
    cfg = KaiwoConfig.model_validate(load(EXAMPLES["KaiwoConfig"][0]))
    assert cfg.to_k8s()["spec"] == {
        "ray": {"defaultRayImage": "ghcr.io/silogen/rocm-ray:6.4", "headPodMemory": "16Gi"},
        "storage": {"defaultDataMountPath": "/workload", "defaultHfMountPath": "/hf_cache"},
        "nodes": {
            "defaultGpuResourceKey": "amd.com/gpu",
            "defaultGpuTaintKey": "kaiwo.silogen.ai/gpu",
            "excludeMasterNodesFromNodePools": False,
            "addTaintsToGpuNodes": False,
        },
        "scheduling": {"kubeSchedulerName": "kaiwo-scheduler", "pendingThresholdForPreemption": "5m"},
        "resourceMonitoring": {
            "lowUtilizationThreshold": 1.0,
            "profile": "gpu",
            "terminateUnderutilized": False,
            "terminateUnderutilizedAfter": "24h",
        },
        "gpuPreemption": {},  # every field optional: unset falls through to the environment
        "defaultClusterQueueName": "kaiwo",
        "defaultClusterQueueCohortName": "kaiwo",
        "dynamicallyUpdateDefaultClusterQueue": False,
        "defaultTopologyName": "default-topology",  # upstream Kaiwo's default (#432)
        "models": {"gpuModelsUnderKueue": True, "inferencePools": False},
    }
    # no spec at all behaves the same (the CRD defaults spec to {})
    bare = KaiwoConfig.model_validate({"metadata": {"name": "kaiwo"}})
    assert bare.spec == KaiwoConfigSpec()
    assert bare.api_version == "config.kaiwo.silogen.ai/v1alpha1" and bare.kind == "KaiwoConfig"


def test_custom_kaiwo_config_keeps_values_and_fills_the_rest():
    cfg = KaiwoConfig.model_validate(load(EXAMPLES["KaiwoConfig"][1]))
    assert cfg.spec.ray.head_pod_memory == "32Gi"
    assert cfg.spec.ray.default_ray_image == "ghcr.io/silogen/rocm-ray:6.4"
    assert cfg.spec.storage.default_storage_class == "longhorn"
    assert cfg.spec.resource_monitoring.low_utilization_threshold == 20.5
    assert cfg.spec.resource_monitoring.terminate_underutilized_after == "1h30m"
    assert cfg.spec.default_cluster_queue_name == "shared"
    assert cfg.spec.default_cluster_queue_cohort_name == "kaiwo"


def test_aim_namespace_config_example():
    aim = AIMNamespaceConfig.model_validate(load(EXAMPLES["AIMNamespaceConfig"][0]))
    assert aim.spec.gateway.name == "kgw-default"
    assert aim.spec.credentials.hugging_face_token.secret_key == "token"
    assert aim.spec.credentials.s3[0].secret_access_key.secret_name == "s3-creds"
    assert aim.spec.images.image_pull_secrets == ["my-regcred", "another-secret"]


def test_model_example_and_defaults():
    m = Model.model_validate(load(EXAMPLES["Model"][0]))
    assert m.spec.engine == "VLLM" and m.spec.features == ["TextGeneration"]
    assert m.spec.min_replicas == 0 and m.spec.max_replicas == 3
    assert m.spec.target_requests == 100 and m.spec.scale_down_delay_seconds == 30
    assert m.spec.load_balancing.strategy == "PrefixHash"
    assert m.spec.load_balancing.prefix_hash.mean_load_factor == 150
    assert m.spec.load_balancing.prefix_hash.replication == 256
    assert m.spec.autoscaling_disabled is None
    minimal = Model.model_validate({"metadata": {"name": "m"}, "spec": {"url": "ollama://qwen", "engine": "OLlama", "features": []}})
    assert minimal.to_k8s()["spec"]["loadBalancing"] == {
        "strategy": "LeastLoad",
        "prefixHash": {"meanLoadFactor": 125, "replication": 256, "prefixCharLength": 100},
    }


# ---------------------------------------------------------------- reading apiserver objects


def test_apiserver_object_with_status_and_extra_metadata():
    raw = {
        "apiVersion": "kaiwo.silogen.ai/v1alpha1",
        "kind": "KaiwoJob",
        "metadata": {
            "name": "j",
            "namespace": "ns",
            "uid": "1234",
            "resourceVersion": "42",
            "generation": 3,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "managedFields": [{"manager": "kubectl", "operation": "Apply"}],
            "finalizers": ["kaiwo.silogen.ai/finalizer"],
        },
        "spec": {"gpus": 0, "gpuVendor": "amd", "replicas": 1, "ray": False, "dangerous": False},
        "status": {
            "status": "RUNNING",
            "startTime": "2026-01-01T00:00:05Z",
            "duration": 60,
            "observedGeneration": 3,
            "conditions": [
                {
                    "type": "KaiwoJobReady",
                    "status": "True",
                    "reason": "Running",
                    "message": "",
                    "lastTransitionTime": "2026-01-01T00:00:05Z",
                    "observedGeneration": 3,
                }
            ],
        },
        "someFutureField": {"x": 1},
    }
    job = KaiwoJob.model_validate(raw)
    assert job.metadata.generation == 3 and job.metadata.resource_version == "42"
    assert job.status.status == Status.RUNNING
    assert job.status.conditions[0].reason == "Running"
    out = job.to_k8s()
    expected = copy.deepcopy(raw)
    del expected["someFutureField"]  # unknown top-level fields are ignored on read
    assert out == expected


def test_list_kind():
    lst = KaiwoJobList.model_validate(
        {"apiVersion": "kaiwo.silogen.ai/v1alpha1", "kind": "KaiwoJobList", "metadata": {"resourceVersion": "7"},
         "items": [{"metadata": {"name": "a"}}, {"metadata": {"name": "b"}, "spec": {"gpus": 2}}]}
    )
    assert [i.name for i in lst.items] == ["a", "b"]
    assert lst.items[1].spec.gpus == 2 and lst.items[0].kind == "KaiwoJob"


def test_build_from_python_and_dump():
    job = KaiwoJob(metadata={"name": "x", "namespace": "y"}, spec=KaiwoJobSpec(gpus=2, entrypoint="echo hi"))
    assert job.to_k8s() == {
        "apiVersion": "kaiwo.silogen.ai/v1alpha1",
        "kind": "KaiwoJob",
        "metadata": {"name": "x", "namespace": "y"},
        "spec": {"gpus": 2, "gpuVendor": "amd", "replicas": 1, "ray": False, "dangerous": False,
                 "entrypoint": "echo hi"},
    }
    # attribute names are accepted as well as camelCase aliases
    assert KaiwoJobSpec(gpu_vendor="nvidia").gpu_vendor == KaiwoJobSpec(gpuVendor="nvidia").gpu_vendor


def test_class_metadata_of_every_kind():
    seen = set()
    for info in registry.KINDS:
        m = info.model
        assert (m.GROUP, m.VERSION, m.KIND, m.PLURAL) == (info.group, info.version, info.kind, info.plural)
        assert isinstance(m.NAMESPACED, bool)
        obj = m.model_validate({"metadata": {"name": "kaiwo"}, **({"spec": {"url": "hf://a/b", "engine": "VLLM", "features": []}} if m is Model else {})})
        assert obj.to_k8s()["apiVersion"] == f"{m.GROUP}/{m.VERSION}"
        assert obj.to_k8s()["kind"] == m.KIND
        seen.add(m.KIND)
    assert seen == {"KaiwoJob", "KaiwoService", "KaiwoQueueConfig", "KaiwoConfig", "AIMNamespaceConfig", "GpuWorkload", "Model"}
    assert registry.by_gvk("kaiwo.silogen.ai", "v1alpha1", "KaiwoJob").model is KaiwoJob
    with pytest.raises(KeyError):
        registry.by_kind("Nope")


# ---------------------------------------------------------------- Python enforces the CRD limits


@pytest.mark.parametrize(
    "cls,data,needle",
    [
        (KaiwoJobSpec, {"duration": "1 day"}, "duration"),
        (KaiwoQueueConfig, {"spec": {"clusterQueues": [{"name": f"q{i}"} for i in range(11)]}}, "clusterQueues"),
        (KaiwoQueueConfig, {"spec": {"workloadPriorityClasses": [{"metadata": {"name": f"p{i}"}, "value": i} for i in range(6)]}}, "workloadPriorityClasses"),
        (KaiwoQueueConfig, {"spec": {"resourceFlavors": [{"name": "f", "taints": [{"key": "k", "effect": "NoSchedule"}] * 6}]}}, "taints"),
        (KaiwoQueueConfig, {"spec": {"resourceFlavors": [{"nodeLabels": {}}]}}, "name"),
        (TopologySpec, {"levels": []}, "levels"),
        (TopologySpec, {"levels": [{"nodeLabel": f"l{i}"} for i in range(9)]}, "levels"),
        (KaiwoConfig, {"spec": {"resourceMonitoring": {"profile": "cpu"}}}, "profile"),
        (KaiwoConfig, {"spec": {"resourceMonitoring": {"terminateUnderutilizedAfter": "1d"}}}, "terminateUnderutilizedAfter"),
        (KaiwoConfig, {"spec": {"resourceMonitoring": {"lowUtilizationThreshold": -1}}}, "lowUtilizationThreshold"),
        (Model, {"spec": {"url": "hf://a/b", "engine": "TGI", "features": []}}, "engine"),
        (Model, {"spec": {"url": "hf://a/b"}}, "engine"),
        (Model, {"spec": {"url": "hf://a/b", "engine": "VLLM", "features": ["Chat"]}}, "features"),
        (Model, {"spec": {"url": "hf://a/b", "engine": "VLLM", "features": [], "minReplicas": -1}}, "minReplicas"),
        (Model, {"spec": {"url": "hf://a/b", "engine": "VLLM", "features": [], "adapters": [{"name": "Bad_Name"}]}}, "name"),
        (Model, {"spec": {"url": "hf://a/b", "engine": "VLLM", "features": [], "files": [{"path": f"/f{i}", "content": ""} for i in range(11)]}}, "files"),
        (Condition, {"type": "Ready", "status": "Maybe", "reason": "X"}, "status"),
        (Condition, {"type": "Ready", "status": "True", "reason": ""}, "reason"),
    ],
)
def test_python_rejects_what_the_crd_rejects(cls, data, needle):
    with pytest.raises(ValidationError) as err:
        cls.model_validate(data)
    assert needle in str(err.value)


# ---------------------------------------------------------------- download types and helpers


def test_download_task_config_document():
    text = """
downloadRoot: /workload
hfHome: /hf_cache
s3:
  - endpointUrl: http://minio:9000
    accessKeyId: {file: /app/secrets/s3/id, secretName: s3, secretKey: id}
    secretKey: {file: /app/secrets/s3/key, secretName: s3, secretKey: key}
    buckets:
      - name: b
        folders: [{path: p/, targetPath: t, glob: "*.txt"}]
hf:
  - repoId: org/repo
"""
    cfg = DownloadTaskConfig.model_validate(yaml.safe_load(text))
    assert cfg.download_root == "/workload" and cfg.hf_home == "/hf_cache"
    assert cfg.s3[0].secret_key.file == "/app/secrets/s3/key"
    assert cfg.s3[0].buckets[0].folders[0] == CloudDownloadFolder(path="p/", target_path="t", glob="*.txt")
    assert cfg.to_k8s() == yaml.safe_load(text)
    assert DownloadTaskConfig().to_k8s() == {"downloadRoot": "", "hfHome": ""}


def test_value_reference_default_path():
    assert ValueReference(secret_name="s", secret_key="k").default_file_path() == "/app/secrets/s/k"


def test_download_items_require_their_essentials():
    with pytest.raises(ValidationError):
        S3DownloadItem.model_validate({"buckets": []})
    with pytest.raises(ValidationError):
        CloudDownloadFolder.model_validate({"path": "x"})


@pytest.mark.parametrize(
    "text,seconds",
    [("0", 0), ("45s", 45), ("1h30m", 5400), ("1.5h", 5400), ("100ms", 0.1), ("2h3m4s", 7384), ("1µs", 1e-6)],
)
def test_parse_duration(text, seconds):
    assert parse_duration(text).total_seconds() == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "1d", "h", "1h 30m", "-5m", "5"])
def test_parse_duration_rejects(text):
    with pytest.raises(ValueError):
        parse_duration(text)


def test_time_helpers_round_trip():
    t = parse_time("2026-03-04T05:06:07Z")
    assert format_time(t) == "2026-03-04T05:06:07Z"


def test_condition_fills_transition_time():
    c = Condition(type="Ready", status="True", reason="Done")
    assert parse_time(c.last_transition_time).tzinfo is not None
    assert c.to_k8s()["message"] == ""


@pytest.mark.parametrize("obj,python_message", [(o, p) for o, _, p in INVALID_EXAMPLES if p is not None])
def test_python_rejects_every_invalid_example_the_apiserver_rejects(obj, python_message):
    # The same table drives test_crd_apiserver.py, which checks the apiserver side.
    with pytest.raises(ValidationError) as err:
        registry.parse(copy.deepcopy(obj))
    assert python_message in str(err.value)


@pytest.mark.parametrize("obj", [o for o, _, p in INVALID_EXAMPLES if p is None])
def test_name_rules_are_left_to_the_apiserver(obj):
    # Controllers must be able to read (and report on) such objects if they exist anyway.
    parsed = registry.parse(copy.deepcopy(obj))
    assert parsed.name == obj["metadata"]["name"]


def test_kaiwo_config_legacy_data_section_overrides_storage():
    # Older docs call the storage section "data"; the apiserver keeps both (storage defaulted).
    stored = {
        "metadata": {"name": "kaiwo"},
        "spec": {
            "storage": {"defaultDataMountPath": "/workload", "defaultHfMountPath": "/hf_cache"},
            "data": {"defaultStorageClass": "longhorn", "defaultDataMountPath": "/mnt/data"},
        },
    }
    cfg = KaiwoConfig.model_validate(stored)
    assert cfg.spec.storage.default_storage_class == "longhorn"
    assert cfg.spec.storage.default_data_mount_path == "/mnt/data"
    assert cfg.spec.storage.default_hf_mount_path == "/hf_cache"
    assert cfg.spec.data.default_hf_mount_path is None
    # stable when read again
    assert KaiwoConfig.model_validate(cfg.to_k8s()).spec == cfg.spec
    # and without the legacy section nothing changes
    assert KaiwoConfig.model_validate({"metadata": {"name": "kaiwo"}}).spec.data is None
