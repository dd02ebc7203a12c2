"""Batch Job, RayJob, Deployment, RayService + AppWrapper, Ray cluster, storage
and desired_children: the children built from minimal and full specs,
user-supplied specs merged, storage children, creation order, download gating
and spec errors."""

import copy

import pytest
import yaml

from kaiwo_ctrl.workloads.reconcile.desired import desired_children, main_workload
from kaiwo_ctrl.workloads.builders.validation import SpecError
from kaiwo_ctrl.workloads.base.world import World

NVIDIA_NODES = [
    {"metadata": {"name": f"g{i}", "labels": {"kaiwo/nodepool": "nvidia-teslak80-8gpu-28core-200gi"}},
     "status": {"allocatable": {"nvidia.com/gpu": "8"}}}
    for i in range(4)
]
QUEUES = {"clusterQueues": [{"name": "kaiwo"}, {"name": "team", "namespaces": ["ns"]}]}
WORLD = World.from_dicts(nodes=NVIDIA_NODES, queue_config=QUEUES, config={"ray": {"headPodMemory": "1Gi"}})

OWNER_JOB = {"apiVersion": "kaiwo.silogen.ai/v1alpha1", "kind": "KaiwoJob", "name": "j", "uid": "uid-j",
             "controller": True, "blockOwnerDeletion": True}
OWNER_SVC = {**OWNER_JOB, "kind": "KaiwoService", "name": "s", "uid": "uid-s"}
SYS_JOB = {"kaiwo.silogen.ai/name": "j", "kaiwo.silogen.ai/type": "job",
           "kaiwo.silogen.ai/user": "test-amd.com", "kaiwo.silogen.ai/run-id": "uid-j"}
SYS_SVC = {"kaiwo.silogen.ai/name": "s", "kaiwo.silogen.ai/type": "service",
           "kaiwo.silogen.ai/user": "test-amd.com", "kaiwo.silogen.ai/run-id": "uid-s"}


def kjob(**spec):
    spec.setdefault("user", "test@amd.com")
    return {"apiVersion": "kaiwo.silogen.ai/v1alpha1", "kind": "KaiwoJob",
            "metadata": {"name": "j", "namespace": "ns", "uid": "uid-j", "generation": 1}, "spec": spec}


def ksvc(**spec):
    spec.setdefault("user", "test@amd.com")
    return {"apiVersion": "kaiwo.silogen.ai/v1alpha1", "kind": "KaiwoService",
            "metadata": {"name": "s", "namespace": "ns", "uid": "uid-s", "generation": 1}, "spec": spec}


# --------------------------------------------------------------------------- batch Job

def test_batch_job_acceptance_shape():
    (job,) = desired_children(kjob(image="busybox:latest", gpuVendor="nvidia", gpus=8, entrypoint="sleep 1"), WORLD)
    assert job["apiVersion"] == "batch/v1" and job["kind"] == "Job"
    assert job["metadata"] == {"name": "j", "namespace": "ns",
                               "labels": {**SYS_JOB, "kueue.x-k8s.io/queue-name": "kaiwo"},
                               "ownerReferences": [OWNER_JOB]}
    spec = job["spec"]
    assert (spec["backoffLimit"], spec["suspend"], spec["ttlSecondsAfterFinished"]) == (0, True, 3600)
    t = spec["template"]
    assert t["metadata"]["labels"] == SYS_JOB  # no queue label on the template
    c = t["spec"]["containers"][0]
    assert c["command"] == ["/bin/sh", "-c", "sleep 1"]
    assert c["env"] == [{"name": "NUM_GPUS", "value": "8"}, {"name": "NUM_REPLICAS", "value": "1"},
                        {"name": "NUM_GPUS_PER_REPLICA", "value": "8"}]
    res = {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "8"}
    assert c["resources"] == {"limits": res, "requests": res}


def test_batch_job_without_gpus():
    (job,) = desired_children(kjob(image="busybox"), WORLD)
    c = job["spec"]["template"]["spec"]["containers"][0]
    assert c["resources"] == {"limits": {"cpu": "2", "memory": "16Gi"}, "requests": {"cpu": "2", "memory": "16Gi"}}
    assert [e["value"] for e in c["env"]] == ["0", "1", "0"]


def test_batch_job_16_gpus_on_8_gpu_nodes_is_one_pod_with_8():
    (job,) = desired_children(kjob(gpuVendor="nvidia", gpus=16), WORLD)
    c = job["spec"]["template"]["spec"]["containers"][0]
    assert [e["value"] for e in c["env"]] == ["16", "2", "8"]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert "parallelism" not in job["spec"]


@pytest.mark.parametrize("user_spec,backoff,ttl", [
    ({"backoffLimit": 2}, 0, 3600),
    ({"ttlSecondsAfterFinished": 123}, 0, 123),
    ({}, 0, 3600),
])
def test_user_job_merged_backoff_forced_ttl_defaulted(user_spec, backoff, ttl):
    user = {"metadata": {"name": "ignored", "labels": {"x": "y"}},
            "spec": {**user_spec, "parallelism": 3, "template": {"spec": {"containers": [{"name": "main", "image": "u:1"}]}}}}
    (job,) = desired_children(kjob(job=user), WORLD)
    assert job["metadata"]["name"] == "j" and "x" not in job["metadata"]["labels"]
    spec = job["spec"]
    assert (spec["backoffLimit"], spec["ttlSecondsAfterFinished"], spec["parallelism"], spec["suspend"]) == (backoff, ttl, 3, True)
    assert spec["template"]["spec"]["containers"][0]["image"] == "u:1"


def test_user_job_with_gpus_keeps_its_own_cpu_memory():
    user = {"spec": {"template": {"spec": {"containers": [
        {"name": "m", "resources": {"limits": {"cpu": "1", "memory": "2Gi"}, "requests": {"cpu": "1", "memory": "2Gi"}}}]}}}}
    (job,) = desired_children(kjob(job=user, gpuVendor="nvidia", gpus=2), WORLD)
    res = job["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert res == {"limits": {"cpu": "1", "memory": "2Gi", "nvidia.com/gpu": "2"},
                   "requests": {"cpu": "1", "memory": "2Gi", "nvidia.com/gpu": "2"}}


def test_full_job_queue_priority_and_workload_labels():
    obj = kjob(clusterQueue="team", priorityClass="high", image="i")
    obj["metadata"]["labels"] = {"kaiwo.silogen.ai/managed": "true", "kueue.x-k8s.io/queue-name": "x"}
    (job,) = desired_children(obj, WORLD)
    assert job["metadata"]["labels"] == {**SYS_JOB, "kaiwo.silogen.ai/managed": "true",
                                         "kueue.x-k8s.io/queue-name": "team", "kueue.x-k8s.io/priority-class": "high"}
    assert job["spec"]["template"]["metadata"]["labels"]["kaiwo.silogen.ai/managed"] == "true"


def test_default_queue_from_config():
    w = World.from_dicts(nodes=NVIDIA_NODES, queue_config={"clusterQueues": [{"name": "dq"}]},
                         config={"defaultClusterQueueName": "dq"})
    (job,) = desired_children(kjob(), w)
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "dq"


# --------------------------------------------------------------------------- RayJob and Ray cluster

def test_ray_job_acceptance_shape():
    (rj,) = desired_children(kjob(ray=True, gpus=14, gpuVendor="nvidia", image="rayproject/ray:2.41.0", entrypoint="sleep 1"), WORLD)
    assert (rj["apiVersion"], rj["kind"]) == ("ray.io/v1", "RayJob")
    assert rj["metadata"]["ownerReferences"] == [OWNER_JOB]
    assert rj["metadata"]["labels"] == {**SYS_JOB, "kueue.x-k8s.io/queue-name": "kaiwo"}
    spec = rj["spec"]
    assert (spec["backoffLimit"], spec["entrypoint"], spec["shutdownAfterJobFinishes"]) == (0, "sleep 1", True)
    cluster = spec["rayClusterSpec"]
    assert cluster["enableInTreeAutoscaling"] is False
    head = cluster["headGroupSpec"]
    assert head["rayStartParams"] == {"dashboard-host": "0.0.0.0"}
    assert head["template"]["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "kaiwo"
    hc = head["template"]["spec"]["containers"][0]
    assert hc["name"] == "ray-head"
    assert hc["resources"] == {"limits": {"cpu": "2", "memory": "1Gi"}, "requests": {"cpu": "2", "memory": "1Gi"}}
    assert [e["value"] for e in hc["env"]] == ["14", "2", "7"]
    assert head["template"]["spec"]["volumes"][0]["emptyDir"]["sizeLimit"] == "1Gi"
    (wg,) = cluster["workerGroupSpecs"]
    assert (wg["groupName"], wg["replicas"], wg["minReplicas"], wg["maxReplicas"]) == ("default-worker-group", 2, 2, 2)
    wc = wg["template"]["spec"]["containers"][0]
    res = {"cpu": "28", "memory": "224Gi", "nvidia.com/gpu": "7"}
    assert wc["name"] == "ray-worker" and wc["resources"] == {"limits": res, "requests": res}
    assert wg["template"]["spec"]["volumes"][0]["emptyDir"]["sizeLimit"] == "200Gi"
    assert wg["template"]["spec"]["securityContext"] == {"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000}


def test_ray_job_user_spec_every_worker_group_decorated_and_image_default():
    user = {"spec": {"entrypoint": "python x.py", "backoffLimit": 4, "rayClusterSpec": {
        "headGroupSpec": {"template": {"spec": {"containers": [{"name": "h"}]}}},
        "workerGroupSpecs": [
            {"groupName": "a", "replicas": 5, "template": {"spec": {"containers": [{"name": "w"}]}}},
            {"groupName": "b", "template": {"spec": {"containers": [{"name": "w2", "image": "own"}]}}},
        ]}}}
    w = World.from_dicts(nodes=NVIDIA_NODES, queue_config=QUEUES, config={"ray": {"defaultRayImage": "def:1"}})
    (rj,) = desired_children(kjob(rayJob=user, replicas=3), w)
    spec = rj["spec"]
    assert spec["entrypoint"] == "python x.py" and spec["backoffLimit"] == 0
    groups = spec["rayClusterSpec"]["workerGroupSpecs"]
    assert [(g["replicas"], g["minReplicas"], g["maxReplicas"]) for g in groups] == [(3, 3, 3), (3, 3, 3)]
    assert groups[0]["template"]["spec"]["containers"][0]["image"] == "def:1"
    assert groups[1]["template"]["spec"]["containers"][0]["image"] == "own"
    head = spec["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    assert head["resources"]["limits"]["memory"] == "16Gi"


def test_ray_job_entrypoint_overrides_user_and_is_not_shell_wrapped():
    user = {"spec": {"entrypoint": "python old.py"}}
    (rj,) = desired_children(kjob(rayJob=user, entrypoint=" python new.py \\\n --a 1 "), WORLD)
    assert rj["spec"]["entrypoint"] == "python new.py   --a 1"
    assert "rayClusterSpec" in rj["spec"]


# --------------------------------------------------------------------------- Deployment

def test_deployment_minimal():
    (dep,) = desired_children(ksvc(image="nginx", gpuVendor="nvidia", gpus=16, entrypoint="serve"), WORLD)
    assert (dep["apiVersion"], dep["kind"]) == ("apps/v1", "Deployment")
    spec = dep["spec"]
    assert spec["replicas"] == 2
    assert spec["selector"] == {"matchLabels": {"app": "s"}}
    t = spec["template"]
    assert t["spec"]["restartPolicy"] == "Always"
    tl = {**SYS_SVC, "app": "s", "kueue.x-k8s.io/queue-name": "kaiwo"}
    assert t["metadata"]["labels"] == tl
    assert dep["metadata"]["labels"] == tl
    assert dep["metadata"]["ownerReferences"] == [OWNER_SVC]
    c = t["spec"]["containers"][0]
    assert c["command"] == ["/bin/sh", "-c", "serve"]
    assert c["resources"]["limits"] == {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "8"}


def test_deployment_user_spec_merged_selector_created():
    user = {"spec": {"replicas": 7, "strategy": {"type": "Recreate"},
                     "template": {"metadata": {"labels": {"own": "1"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}}
    (dep,) = desired_children(ksvc(deployment=user, replicas=3, priorityClass="p"), WORLD)
    spec = dep["spec"]
    assert spec["replicas"] == 3 and spec["strategy"] == {"type": "Recreate"}
    assert spec["selector"] == {"matchLabels": {"app": "s"}}
    labels = spec["template"]["metadata"]["labels"]
    assert labels["own"] == "1" and labels["kueue.x-k8s.io/priority-class"] == "p"
    assert spec["template"]["spec"]["restartPolicy"] == "Always"


# --------------------------------------------------------------------------- RayService + AppWrapper

def test_ray_service_in_appwrapper():
    (aw,) = desired_children(ksvc(ray=True, gpus=14, gpuVendor="nvidia", serveConfigV2="applications: []\n", priorityClass="p"), WORLD)
    assert (aw["apiVersion"], aw["kind"]) == ("workload.codeflare.dev/v1beta2", "AppWrapper")
    assert aw["metadata"]["labels"] == {**SYS_SVC, "kueue.x-k8s.io/queue-name": "kaiwo", "kueue.x-k8s.io/priority-class": "p"}
    assert aw["metadata"]["ownerReferences"] == [OWNER_SVC]
    (comp,) = aw["spec"]["components"]
    assert comp["podSets"] == [
        {"replicas": 1, "path": "template.spec.rayClusterConfig.headGroupSpec.template"},
        {"replicas": 2, "path": "template.spec.rayClusterConfig.workerGroupSpecs[0].template"},
    ]
    rs = comp["template"]
    assert (rs["apiVersion"], rs["kind"], rs["metadata"]["name"], rs["metadata"]["namespace"]) == ("ray.io/v1", "RayService", "s", "ns")
    assert "ownerReferences" not in rs["metadata"]
    assert rs["metadata"]["labels"] == SYS_SVC
    assert rs["spec"]["serveConfigV2"] == "applications: []\n"
    cluster = rs["spec"]["rayClusterConfig"]
    assert cluster["workerGroupSpecs"][0]["replicas"] == 2
    assert "kueue.x-k8s.io/queue-name" not in cluster["headGroupSpec"]["template"]["metadata"]["labels"]


def test_ray_service_user_spec_serve_config_kept_when_not_overridden():
    user = {"spec": {"serveConfigV2": "old", "rayClusterConfig": {"headGroupSpec": {"template": {"spec": {"containers": [{"name": "h"}]}}},
                                                                  "workerGroupSpecs": []}}}
    (aw,) = desired_children(ksvc(rayService=user), WORLD)
    rs = aw["spec"]["components"][0]["template"]
    assert rs["spec"]["serveConfigV2"] == "old"
    assert aw["spec"]["components"][0]["podSets"] == [
        {"replicas": 1, "path": "template.spec.rayClusterConfig.headGroupSpec.template"}]


# --------------------------------------------------------------------------- storage

STORAGE = {
    "storageEnabled": True,
    "storageClassName": "fast",
    "accessMode": "ReadWriteOnce",
    "data": {"storageSize": "10Gi", "mountPath": "/data", "download": {
        "s3": [{"endpointUrl": "http://minio", "accessKeyId": {"secretName": "s3", "secretKey": "id"},
                "secretKey": {"secretName": "s3", "secretKey": "key"},
                "buckets": [{"name": "b", "files": [{"path": "a.txt", "targetPath": "x/a.txt"}]}]}],
        "git": [{"repository": "https://g/r.git", "targetPath": "repo", "token": {"secretName": "git", "secretKey": "tok"}}],
    }},
    "huggingFace": {"storageSize": "20Gi", "preCacheRepos": [{"repoId": "org/model", "files": ["config.json"]}]},
}


def test_storage_children_order_and_shapes():
    children = desired_children(kjob(image="i", storage=STORAGE, env=[{"name": "HF_TOKEN", "value": "t"}]), WORLD,
                                download_succeeded=True)
    assert [(c["kind"], c["metadata"]["name"]) for c in children] == [
        ("PersistentVolumeClaim", "j-data"), ("PersistentVolumeClaim", "j-hf"),
        ("ConfigMap", "j-download"), ("Job", "j-download"), ("Job", "j")]
    data_pvc, hf_pvc, cm, dl, _ = children
    assert data_pvc["metadata"] == {"name": "j-data", "namespace": "ns", "ownerReferences": [OWNER_JOB]}
    assert data_pvc["spec"] == {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}},
                                "storageClassName": "fast"}
    assert hf_pvc["spec"]["resources"]["requests"]["storage"] == "20Gi"
    doc = yaml.safe_load(cm["data"]["config.yaml"])
    assert doc["downloadRoot"] == "/data" and doc["hfHome"] == "/hf_cache"
    assert doc["s3"][0]["accessKeyId"] == {"file": "/app/secrets/s3/id", "secretName": "s3", "secretKey": "id"}
    assert doc["s3"][0]["secretKey"]["file"] == "/app/secrets/s3/key"
    assert doc["git"][0]["token"]["file"] == "/app/secrets/git/tok"
    assert doc["hf"] == [{"repoId": "org/model", "files": ["config.json"]}]
    assert "gcs" not in doc
    assert dl["metadata"]["labels"] == {"kaiwo.silogen.ai/type": "downloader"}
    assert dl["metadata"]["ownerReferences"] == [OWNER_JOB]
    spec = dl["spec"]
    assert spec["backoffLimit"] == 0 and "ttlSecondsAfterFinished" not in spec and "suspend" not in spec
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert spec["activeDeadlineSeconds"] == 86400
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"] == {"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000, "runAsNonRoot": True,
                                      "seccompProfile": {"type": "RuntimeDefault"}}
    (c,) = pod["containers"]
    assert c["securityContext"] == {"runAsNonRoot": True, "allowPrivilegeEscalation": False,
                                    "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]},
                                    "seccompProfile": {"type": "RuntimeDefault"}}
    assert c["name"] == "data-downloader"
    assert c["command"] == ["kaiwo-ctrl", "download", "--config", "/config/config.yaml",
                            "--data-dir", "/data", "--hf-dir", "/hf_cache"]
    assert c["resources"] == {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "4Gi"}}
    assert c["env"] == [{"name": "HF_HOME", "value": "/hf_cache"}, {"name": "HF_TOKEN", "value": "t"}]
    assert pod["volumes"] == [
        {"name": "config", "configMap": {"name": "j-download"}},
        {"name": "tmp", "emptyDir": {}},
        {"name": "data", "persistentVolumeClaim": {"claimName": "j-data"}},
        {"name": "hf", "persistentVolumeClaim": {"claimName": "j-hf"}},
        {"name": "secret-s3", "secret": {"secretName": "s3", "items": [{"key": "id", "path": "id"}, {"key": "key", "path": "key"}]}},
        {"name": "secret-git", "secret": {"secretName": "git", "items": [{"key": "tok", "path": "tok"}]}},
    ]
    assert c["volumeMounts"] == [
        {"name": "config", "mountPath": "/config"}, {"name": "data", "mountPath": "/data"},
        {"name": "hf", "mountPath": "/hf_cache"}, {"name": "secret-s3", "mountPath": "/app/secrets/s3"},
        {"name": "secret-git", "mountPath": "/app/secrets/git"}, {"name": "tmp", "mountPath": "/tmp"}]


def test_main_workload_gated_by_download_success():
    children = desired_children(kjob(storage=STORAGE), WORLD)
    assert [c["kind"] for c in children] == ["PersistentVolumeClaim", "PersistentVolumeClaim", "ConfigMap", "Job"]
    assert children[-1]["metadata"]["name"] == "j-download"


def test_storage_without_downloads_and_default_storage_class():
    w = World.from_dicts(nodes=NVIDIA_NODES, queue_config=QUEUES, config={"storage": {"defaultStorageClass": "std"}})
    children = desired_children(ksvc(storage={"storageEnabled": True, "data": {"storageSize": "1Gi"},
                                              "huggingFace": {"preCacheRepos": [{"repoId": "a/b"}]}}), w)
    assert [c["kind"] for c in children] == ["PersistentVolumeClaim", "Deployment"]
    assert children[0]["spec"]["storageClassName"] == "std"
    assert children[0]["spec"]["accessModes"] == ["ReadWriteMany"]


def test_unauthenticated_s3_gets_no_secret_files():
    storage = {"storageEnabled": True, "data": {"storageSize": "1Gi", "download": {"s3": [
        {"endpointUrl": "http://m", "buckets": [{"name": "b", "folders": [{"path": "p/", "targetPath": "t", "glob": "*.jpg"}]}]}]}}}
    children = desired_children(kjob(storage=storage), WORLD)
    doc = yaml.safe_load(children[1]["data"]["config.yaml"])
    assert doc["hfHome"] == "" and "accessKeyId" not in doc["s3"][0]
    assert doc["s3"][0]["buckets"][0]["folders"] == [{"path": "p/", "targetPath": "t", "glob": "*.jpg"}]
    pod = children[2]["spec"]["template"]["spec"]
    assert [v["name"] for v in pod["volumes"]] == ["config", "tmp", "data"]
    assert "--hf-dir" not in pod["containers"][0]["command"]


# --------------------------------------------------------------------------- spec errors

@pytest.mark.parametrize("obj,field,reason", [
    (kjob(gpusPerReplica=2), "spec.gpusPerReplica", "ReplicasRequired"),
    (kjob(gpus=-1), "spec.gpus", "InvalidValue"),
    (kjob(gpus=2, gpuVendor="intel"), "spec.gpuVendor", "UnknownGpuVendor"),
    (kjob(gpus=40, gpuVendor="nvidia"), "spec.gpus", "InsufficientGPUs"),
    (kjob(gpus=1), "spec.gpus", "NoGPUs"),
    (kjob(replicas=1, gpusPerReplica=16, gpuVendor="nvidia"), "spec.gpusPerReplica", "InsufficientGPUsPerNode"),
    (kjob(entrypoint="#!\necho"), "spec.entrypoint", "InvalidEntrypoint"),
    (kjob(ray=True), "spec.entrypoint", "EntrypointRequired"),
    (kjob(job={"spec": {"template": {"spec": {"containers": []}}}}), "spec.job.spec.template.spec.containers", "Required"),
    (ksvc(deployment={"spec": {}}), "spec.deployment.spec.template.spec.containers", "Required"),
    (kjob(resources={"limits": {"cpu": "lots"}}), "spec.resources.limits.cpu", "InvalidQuantity"),
    (kjob(duration="forever"), "spec.duration", "InvalidValue"),
    (kjob(clusterQueue="nope"), "spec.clusterQueue", "ClusterQueueNotFound"),
    (kjob(clusterQueue="team", storage=None) | {"metadata": {"name": "j", "namespace": "other", "uid": "u"}},
     "spec.clusterQueue", "WrongQueueNamespace"),
    (kjob(secretVolumes=[{"name": "a", "secretName": "s"}]), "spec.secretVolumes[0].mountPath", "Required"),
    (kjob(storage={"storageEnabled": True, "data": {"storageSize": "big"}}), "spec.storage.data.storageSize", "InvalidQuantity"),
    (kjob(storage={"storageEnabled": True, "data": {"storageSize": "1Gi", "download": {"s3": [{"buckets": []}]}}}),
     "spec.storage.data.download.s3[0].endpointUrl", "InvalidValue"),
    (kjob(gpus="many"), "spec.gpus", "InvalidValue"),
])
def test_spec_errors_name_the_field(obj, field, reason):
    err = desired_children(obj, WORLD)
    assert isinstance(err, SpecError), err
    assert (err.field, err.reason) == (field, reason), err
    assert err.message


def test_duration_pattern_is_checked_by_the_api_model_or_by_us():
    err = desired_children(kjob(duration="1x"), WORLD)
    assert isinstance(err, SpecError) and err.field == "spec.duration"


def test_invalid_head_pod_memory_is_a_config_error():
    w = World.from_dicts(nodes=NVIDIA_NODES, queue_config=QUEUES, config={"ray": {"headPodMemory": "lots"}})
    err = desired_children(kjob(ray=True, entrypoint="x"), w)
    assert isinstance(err, SpecError) and err.field == "KaiwoConfig.spec.ray.headPodMemory"


def test_unknown_vendor_allowed_when_a_pool_offers_it():
    nodes = [{"metadata": {"name": "i", "labels": {"kaiwo/nodepool": "intel-max-4gpu-1core-1gi"}}, "status": {}}]
    w = World.from_dicts(nodes=nodes, queue_config=QUEUES, config={"nodes": {"defaultGpuResourceKey": "gpu.intel.com/i915"}})
    (job,) = desired_children(kjob(gpus=2, gpuVendor="Intel"), w)
    assert job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["gpu.intel.com/i915"] == "2"


def test_capacity_not_checked_when_nodes_unknown():
    w = World.from_dicts(nodes=None)
    (job,) = desired_children(kjob(gpus=64), w)
    assert job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["amd.com/gpu"] == "64"


def test_builders_do_not_mutate_input_and_are_deterministic():
    obj = kjob(image="i", storage=STORAGE, job={"spec": {"template": {"spec": {"containers": [{"name": "c"}]}}}})
    before = copy.deepcopy(obj)
    a = desired_children(obj, WORLD, download_succeeded=True)
    b = desired_children(obj, WORLD, download_succeeded=True)
    assert obj == before and a == b


def test_typed_model_input_is_accepted():
    from api.kaiwo.v1alpha1 import KaiwoService
    model = KaiwoService.model_validate(ksvc(image="x"))
    assert main_workload(model, WORLD) == main_workload(ksvc(image="x"), WORLD)


def test_ray_gpu_model_affinity_on_head_and_workers_toleration_only_on_workers():
    w = World.from_dicts(nodes=NVIDIA_NODES, queue_config=QUEUES, config={"nodes": {"addTaintsToGpuNodes": True}})
    (rj,) = desired_children(kjob(ray=True, entrypoint="x", gpus=8, gpuVendor="nvidia", gpuModels=["teslak80"]), w)
    cluster = rj["spec"]["rayClusterSpec"]
    head = cluster["headGroupSpec"]["template"]["spec"]
    worker = cluster["workerGroupSpecs"][0]["template"]["spec"]
    for pod in (head, worker):
        terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert terms[0]["matchExpressions"][0]["values"] == ["teslak80"]
    assert "tolerations" not in head
    assert worker["tolerations"] == [{"key": "kaiwo.silogen.ai/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def test_ray_service_ignores_entrypoint():
    (aw,) = desired_children(ksvc(ray=True, entrypoint="#!\nbroken"), WORLD)
    rs = aw["spec"]["components"][0]["template"]
    assert "entrypoint" not in rs["spec"]
    assert all("command" not in c for c in rs["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["containers"])


def test_world_from_whole_objects_and_config_defaults():
    w = World.from_dicts(
        config={"apiVersion": "config.kaiwo.silogen.ai/v1alpha1", "kind": "KaiwoConfig", "metadata": {"name": "kaiwo"},
                "spec": {"ray": {"defaultRayImage": "x:1"}}},
        queue_config={"apiVersion": "kaiwo.silogen.ai/v1alpha1", "kind": "KaiwoQueueConfig", "spec": QUEUES},
    )
    s = w.settings
    assert (s.default_ray_image, s.head_pod_memory, s.kube_scheduler_name, s.default_cluster_queue_name) == (
        "x:1", "16Gi", "kaiwo-scheduler", "kaiwo")
    assert (s.default_data_mount_path, s.default_hf_mount_path, s.default_gpu_resource_key) == (
        "/workload", "/hf_cache", "amd.com/gpu")
    assert w.queue_config == QUEUES


def test_managed_label_copied_to_every_child_with_labels():
    obj = ksvc(image="i")
    obj["metadata"]["labels"] = {"kaiwo.silogen.ai/managed": "true"}
    (dep,) = desired_children(obj, WORLD)
    assert dep["metadata"]["labels"]["kaiwo.silogen.ai/managed"] == "true"
    assert dep["spec"]["template"]["metadata"]["labels"]["kaiwo.silogen.ai/managed"] == "true"


def test_kaiwo_object_never_shares_containers_with_its_input():
    """The reconciler passes cached dicts: nothing derived from them may alias them."""
    from kaiwo_ctrl.workloads.base.kaiwoobject import KaiwoObject

    raw = {
        "apiVersion": "kaiwo.silogen.ai/v1alpha1",
        "kind": "KaiwoJob",
        "metadata": {"name": "a", "namespace": "n", "uid": "u", "labels": {"x": "y"}},
        "spec": {"job": {"spec": {"template": {"spec": {"containers": [{"name": "c"}]}}}}, "futureField": {"k": ["v"]}},
    }
    import copy

    before = copy.deepcopy(raw)
    ko = KaiwoObject.of(raw)
    ko.doc["metadata"]["labels"]["x"] = "changed"
    ko.doc["spec"]["job"]["spec"]["template"]["spec"]["containers"][0]["name"] = "changed"
    ko.doc["spec"]["futureField"]["k"].append("w")
    assert raw == before
