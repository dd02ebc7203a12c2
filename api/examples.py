"""Example manifests for every kind, written the way users write them (only
the fields they care about). The tests use them to check that the typed
models, the generated CRDs and a real apiserver agree; they are also handy
fixtures for reconciler tests (``copy.deepcopy`` before mutating).
"""

from __future__ import annotations

from typing import Any

import yaml

KAIWO_JOB = """
apiVersion: kaiwo.silogen.ai/v1alpha1
kind: KaiwoJob
metadata:
  name: finetune-llama
  namespace: team-a
  labels:
    project: llm
spec:
  user: alice@example.com
  gpus: 8
  gpuVendor: amd
  gpuModels: [mi300x]
  duration: 12h
  clusterQueue: team-a
  priorityClass: high
  image: ghcr.io/silogen/rocm-ray:6.4
  imagePullSecrets:
    - name: regcred
  env:
    - name: HF_TOKEN
      valueFrom:
        secretKeyRef: {name: hf-token, key: token}
    - name: EPOCHS
      value: "3"
  resources:
    requests: {cpu: "4", memory: 32Gi}
    limits: {memory: 64Gi, cpu: 8}
  secretVolumes:
    - name: gcs-key
      secretName: gcs-creds
      key: key.json
      subPath: key.json
      mountPath: /secrets
  podTemplateSpecLabels:
    team: a
  entrypoint: |
    #!/bin/bash
    python train.py --epochs $EPOCHS
  storage:
    storageEnabled: true
    storageClassName: longhorn
    data:
      storageSize: 100Gi
      download:
        s3:
          - endpointUrl: http://minio.minio:9000
            accessKeyId: {secretName: s3-creds, secretKey: access_key_id}
            secretKey: {secretName: s3-creds, secretKey: secret_key}
            buckets:
              - name: datasets
                files:
                  - {path: train/part-0.parquet, targetPath: data/part-0.parquet}
                folders:
                  - {path: images/, targetPath: images, glob: "*.jpg"}
        gcs:
          - applicationCredentials: {secretName: gcs-creds, secretKey: key.json}
            buckets:
              - name: gcs-bucket
                folders:
                  - {path: checkpoints/, targetPath: checkpoints}
        azureBlob:
          - connectionString: {secretName: azure-creds, secretKey: connection}
            containers:
              - name: blobs
                files:
                  - {path: a/b.txt, targetPath: b.txt}
        git:
          - repository: https://github.com/example/repo.git
            branch: main
            path: configs
            targetPath: repo-configs
            token: {secretName: git-creds, secretKey: token}
    huggingFace:
      storageSize: 50Gi
      preCacheRepos:
        - repoId: meta-llama/Llama-3.1-8B
          files: [config.json, model.safetensors]
"""

KAIWO_JOB_BATCH = """
apiVersion: kaiwo.silogen.ai/v1alpha1
kind: KaiwoJob
metadata:
  name: plain-batch
  namespace: default
spec:
  job:
    apiVersion: batch/v1
    kind: Job
    metadata:
      name: plain-batch
    spec:
      backoffLimit: 2
      ttlSecondsAfterFinished: 600
      template:
        spec:
          restartPolicy: Never
          containers:
            - name: main
              image: busybox
              command: [sh, -c, "echo hello"]
              resources:
                limits: {cpu: 500m}
"""

KAIWO_SERVICE = """
apiVersion: kaiwo.silogen.ai/v1alpha1
kind: KaiwoService
metadata:
  name: llm-serve
  namespace: team-a
spec:
  user: bob@example.com
  ray: true
  replicas: 2
  gpusPerReplica: 4
  gpuVendor: nvidia
  preferredTopologyLabel: kaiwo/topology-rack
  serveConfigV2: |
    applications:
      - name: llm
        import_path: serve:app
        route_prefix: /
  rayService:
    spec:
      rayClusterConfig:
        headGroupSpec:
          rayStartParams: {dashboard-host: 0.0.0.0}
          template:
            spec:
              containers:
                - name: ray-head
                  image: rayproject/ray:2.40.0
        workerGroupSpecs:
          - groupName: gpu
            replicas: 2
            rayStartParams: {}
            template:
              spec:
                containers:
                  - name: ray-worker
                    image: rayproject/ray:2.40.0
  storage:
    storageEnabled: true
    accessMode: ReadWriteOnce
    huggingFace:
      mountPath: /models
      storageSize: 200Gi
"""

KAIWO_SERVICE_DEPLOYMENT = """
apiVersion: kaiwo.silogen.ai/v1alpha1
kind: KaiwoService
metadata:
  name: web
  namespace: default
spec:
  entrypoint: python -m http.server 8080
  deployment:
    spec:
      strategy: {type: Recreate}
      template:
        spec:
          containers:
            - name: web
              image: python:3.12
              ports: [{containerPort: 8080}]
"""

KAIWO_QUEUE_CONFIG = """
apiVersion: kaiwo.silogen.ai/v1alpha1
kind: KaiwoQueueConfig
metadata:
  name: kaiwo
spec:
  resourceFlavors:
    - name: amd-mi300x-8gpu
      nodeLabels:
        kaiwo/nodepool: amd-mi300x-8gpu
      taints:
        - {key: kaiwo.silogen.ai/gpu, value: "true", effect: NoSchedule}
      tolerations:
        - {key: kaiwo.silogen.ai/gpu, operator: Exists, effect: NoSchedule}
      topologyName: default-topology
    - name: cpu-only-0gpu-7core-14gi
      nodeLabels:
        kaiwo/nodepool: cpu-only-0gpu-7core-14gi
  clusterQueues:
    - name: kaiwo
      namespaces: [team-a, team-b]
      spec:
        cohort: kaiwo
        namespaceSelector: {}
        queueingStrategy: BestEffortFIFO
        preemption:
          reclaimWithinCohort: Any
          withinClusterQueue: LowerPriority
        resourceGroups:
          - coveredResources: [cpu, memory, amd.com/gpu]
            flavors:
              - name: amd-mi300x-8gpu
                resources:
                  - {name: cpu, nominalQuota: 200}
                  - {name: memory, nominalQuota: 1800Gi}
                  - {name: amd.com/gpu, nominalQuota: 8}
  workloadPriorityClasses:
    - metadata:
        name: high
      value: 1000
      description: urgent work
    - metadata:
        name: low
      value: 10
  topologies:
    - metadata:
        name: default-topology
      spec:
        levels:
          - nodeLabel: kaiwo/topology-block
          - nodeLabel: kaiwo/topology-rack
          - nodeLabel: kubernetes.io/hostname
"""

KAIWO_CONFIG = """
apiVersion: config.kaiwo.silogen.ai/v1alpha1
kind: KaiwoConfig
metadata:
  name: kaiwo
spec: {}
"""

KAIWO_CONFIG_CUSTOM = """
apiVersion: config.kaiwo.silogen.ai/v1alpha1
kind: KaiwoConfig
metadata:
  name: kaiwo
spec:
  ray:
    headPodMemory: 32Gi
  storage:
    defaultStorageClass: longhorn
  nodes:
    addTaintsToGpuNodes: true
  scheduling:
    pendingThresholdForPreemption: 10m
  resourceMonitoring:
    lowUtilizationThreshold: 20.5
    targetNamespaces: [team-a]
    terminateUnderutilized: true
    terminateUnderutilizedAfter: 1h30m
  defaultClusterQueueName: shared
  dynamicallyUpdateDefaultClusterQueue: true
"""

AIM_NAMESPACE_CONFIG = """
apiVersion: config.kaiwo.silogen.ai/v1alpha1
kind: AIMNamespaceConfig
metadata:
  name: aim
  namespace: team-a
spec:
  gateway:
    name: kgw-default
    namespace: gateway-system
  credentials:
    huggingFaceToken:
      secretName: hf-creds
      secretKey: token
    s3:
      - endpointUrl: https://s3.us-east-1.amazonaws.com
        accessKeyId: {secretName: s3-creds, secretKey: accessKeyId}
        secretAccessKey: {secretName: s3-creds, secretKey: secretAccessKey}
    gcs:
      - applicationCredentials: {secretName: gcs-creds, secretKey: key.json}
    azureBlob:
      - connectionString: {secretName: az-creds, secretKey: conn}
  images:
    imagePullSecrets: [my-regcred, another-secret]
"""

MODEL = """
apiVersion: kubeai.org/v1
kind: Model
metadata:
  name: llama-3-8b
  namespace: kubeai
spec:
  url: hf://meta-llama/Llama-3.1-8B-Instruct
  engine: VLLM
  features: [TextGeneration]
  resourceProfile: nvidia-gpu-l4:1
  cacheProfile: standard
  args: [--max-model-len=8192]
  env:
    VLLM_LOGGING_LEVEL: INFO
  envFrom:
    - secretRef: {name: hf-token}
  minReplicas: 0
  maxReplicas: 3
  adapters:
    - name: colorist
      url: hf://example/colorist-lora
  files:
    - path: /config/chat-template.jinja
      content: "{{ messages }}"
  loadBalancing:
    strategy: PrefixHash
    prefixHash:
      meanLoadFactor: 150
  priorityClassName: high
"""

#: kind -> list of example manifests (YAML text)
EXAMPLES: dict[str, list[str]] = {
    "KaiwoJob": [KAIWO_JOB, KAIWO_JOB_BATCH],
    "KaiwoService": [KAIWO_SERVICE, KAIWO_SERVICE_DEPLOYMENT],
    "KaiwoQueueConfig": [KAIWO_QUEUE_CONFIG],
    "KaiwoConfig": [KAIWO_CONFIG, KAIWO_CONFIG_CUSTOM],
    "AIMNamespaceConfig": [AIM_NAMESPACE_CONFIG],
    "Model": [MODEL],
}


def _qc(spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "kaiwo.silogen.ai/v1alpha1", "kind": "KaiwoQueueConfig",
            "metadata": {"name": "kaiwo"}, "spec": spec}


def _model(name: str = "m", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "kubeai.org/v1", "kind": "Model", "metadata": {"name": name, "namespace": "kubeai"},
            "spec": {"url": "hf://org/model", "engine": "VLLM", "features": ["TextGeneration"], **spec}}


def _job(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "kaiwo.silogen.ai/v1alpha1", "kind": "KaiwoJob",
            "metadata": {"name": "bad", "namespace": "default"}, "spec": spec}


def _cfg(name: str = "kaiwo", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "config.kaiwo.silogen.ai/v1alpha1", "kind": "KaiwoConfig",
            "metadata": {"name": name}, "spec": spec}


def _levels(*labels: str) -> list[dict[str, str]]:
    return [{"nodeLabel": label} for label in labels]


def _topology(name: str, *labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"levels": _levels(*labels)}}


#: Objects the apiserver (with the generated CRDs) rejects:
#: ``(manifest, apiserver message fragment, Python error fragment)``. The Python models reject
#: them too, except the metadata.name rules (Python fragment ``None``), which only the apiserver
#: enforces.
INVALID_EXAMPLES: list[tuple[dict[str, Any], str, str | None]] = [
    (_cfg("other"), "metadata.name must be 'kaiwo'", None),
    ({**_qc({}), "metadata": {"name": "queues"}}, "metadata.name must be 'kaiwo'", None),
    (_cfg(resourceMonitoring={"terminateUnderutilizedAfter": "1d"}),
     "spec.resourceMonitoring.terminateUnderutilizedAfter", "terminateUnderutilizedAfter"),
    (_cfg(resourceMonitoring={"profile": "cpu"}), 'Unsupported value: "cpu"', "profile"),
    (_cfg(resourceMonitoring={"lowUtilizationThreshold": -1}), "should be greater than or equal to 0",
     "lowUtilizationThreshold"),
    (_job(duration="forever"), "spec.duration", "spec.duration"),
    # bounded user strings and quantities that parse (hostile-input limits)
    (_job(clusterQueue="q" * 64), "spec.clusterQueue", "clusterQueue"),
    (_job(clusterQueue="Team Queue"), "spec.clusterQueue", "clusterQueue"),
    (_job(priorityClass="p" * 64), "spec.priorityClass", "priorityClass"),
    (_job(gpuVendor="v" * 64), "spec.gpuVendor", "gpuVendor"),
    (_job(user="u" * 254), "spec.user", "user"),
    (_job(resources={"limits": {"cpu": "1e9999999"}}), "spec.resources.limits.cpu", None),
    (_qc({"clusterQueues": [{"name": "q", "namespaces": ["Bad_NS"]}]}), "spec.clusterQueues[0].namespaces[0]", None),
    (_job(storage={"data": {"download": {"s3": [{"endpointUrl": "x", "buckets": [{"name": "b", "files": [{"path": "a"}]}]}]}}}),
     "targetPath: Required value", "targetPath"),
    (_qc({"resourceFlavors": [{"name": "a"}, {"name": "a"}]}), "resourceFlavors: name must be unique",
     "resourceFlavors: name must be unique"),
    (_qc({"clusterQueues": [{"name": "q"}, {"name": "q"}]}), "clusterQueues: name must be unique",
     "clusterQueues: name must be unique"),
    (_qc({"clusterQueues": [{"name": f"q{i}"} for i in range(11)]}), "must have at most 10 items", "clusterQueues"),
    (_qc({"workloadPriorityClasses": [{"metadata": {"name": "p"}, "value": 1}] * 2}),
     "workloadPriorityClasses: metadata.name must be unique", "workloadPriorityClasses: metadata.name must be unique"),
    (_qc({"workloadPriorityClasses": [{"metadata": {"name": f"p{i}"}, "value": i} for i in range(6)]}),
     "must have at most 5 items", "workloadPriorityClasses"),
    (_qc({"resourceFlavors": [{"name": "f", "nodeLabels": {f"k{i}": "v" for i in range(11)}}]}),
     "must have at most 10 items", "nodeLabels"),
    (_qc({"topologies": [_topology("t", "kubernetes.io/hostname", "rack")]}),
     "kubernetes.io/hostname label can only be used as the last",
     "kubernetes.io/hostname label can only be used as the last"),
    (_qc({"topologies": [_topology("t", "rack", "rack")]}), "levels[].nodeLabel must be unique",
     "levels[].nodeLabel must be unique"),
    (_qc({"topologies": [_topology("t")]}), "should have at least 1 items", "levels"),
    (_qc({"topologies": [_topology("t", "a"), _topology("t", "b")]}), "topologies: metadata.name must be unique",
     "topologies: metadata.name must be unique"),
    (_model("x" * 41), "metadata.name must be at most 40 characters", None),
    (_model(url="http://example.com/m"), "url must start with", "url must start with"),
    (_model(url="gs://bucket/m"), "gs:// urls require a cacheProfile", "gs:// urls require a cacheProfile"),
    (_model(url="oss://bucket/m"), "oss:// urls require a cacheProfile", "oss:// urls require a cacheProfile"),
    (_model(url="pvc://vol", cacheProfile="fast"), "cacheProfile is only supported with",
     "cacheProfile is only supported with"),
    (_model(engine="OLlama", url="ollama://qwen", adapters=[{"name": "a", "url": "hf://x/y"}]),
     "adapters are only supported with engine VLLM", "adapters are only supported with engine VLLM"),
    (_model(adapters=[{"name": "a", "url": "pvc://x"}]), "adapters[].url must start with",
     "adapters[].url must start with"),
    (_model(minReplicas=3, maxReplicas=2), "minReplicas must be less than or equal to maxReplicas",
     "minReplicas must be less than or equal to maxReplicas"),
    (_model(files=[{"path": "/a", "content": ""}, {"path": "/a", "content": "x"}]), "files[].path must be unique",
     "files[].path must be unique"),
    (_model(files=[{"path": "rel/a", "content": ""}]), "files[].path must be absolute", "files[].path must be absolute"),
    (_model(engine="TGI"), 'Unsupported value: "TGI"', "engine"),
    (_model(features=["Chat"]), 'Unsupported value: "Chat"', "features"),
    ({**_model(), "spec": {"url": "hf://org/model", "engine": "VLLM"}}, "spec.features: Required value", "features"),
    (_model(targetRequests=0), "should be greater than or equal to 1", "targetRequests"),
    (_model(loadBalancing={"prefixHash": {"meanLoadFactor": 99}}), "should be greater than or equal to 100",
     "meanLoadFactor"),
]


def load(text: str) -> dict[str, Any]:
    return yaml.safe_load(text)


def all_examples() -> list[tuple[str, dict[str, Any]]]:
    """``(kind, manifest)`` for every example."""
    return [(kind, load(text)) for kind, texts in EXAMPLES.items() for text in texts]
