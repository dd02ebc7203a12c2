"""Generated CRD schemas: structural, and carrying the seed contract's
defaults, enums, patterns, limits, scopes, subresources and columns."""

from __future__ import annotations

import re

import pytest

from api import crdgen
from api.examples import all_examples
from api.registry import KINDS, by_kind
from api.structural import apply_defaults, node_at, prune, structural_errors, walk

CRDS = {info.kind: crdgen.build_crd(info) for info in KINDS}


def schema(kind: str) -> dict:
    return CRDS[kind]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


# ---------------------------------------------------------------- structural


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_schema_is_structural(kind):
    assert structural_errors(schema(kind)) == []


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_no_refs_no_nullable_no_anyof_null(kind):
    for path, node in walk(schema(kind)):
        assert "$ref" not in node, path
        assert "nullable" not in node, path
        for branch in node.get("anyOf", []):
            assert branch.get("type") != "null", path
        if "anyOf" in node:
            assert node.get("x-kubernetes-int-or-string") is True, f"{path}: anyOf only for int-or-string"


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_every_property_is_described(kind):
    missing = [
        path
        for path, node in walk(schema(kind))
        if path.count(".") >= 2 and "[" not in path.rsplit(".", 1)[-1] and not node.get("description")
    ]
    assert missing == []


def test_checker_catches_broken_schemas():
    bad = {
        "type": "object",
        "properties": {
            "a": {"description": "untyped"},
            "b": {"$ref": "#/definitions/x", "type": "object"},
            "c": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "d": {"type": "array"},
            "e": {"nullable": True},
        },
    }
    errors = "\n".join(structural_errors(bad))
    for fragment in (".a: missing type", ".b: $ref", "null type", ".d: array without items", ".e: nullable without type"):
        assert fragment in errors


# ---------------------------------------------------------------- names, scope, subresources


@pytest.mark.parametrize(
    "kind,group,plural,scope,status,short",
    [
        ("KaiwoJob", "kaiwo.silogen.ai", "kaiwojobs", "Namespaced", True, ["kj"]),
        ("KaiwoService", "kaiwo.silogen.ai", "kaiwoservices", "Namespaced", True, ["ks"]),
        ("KaiwoQueueConfig", "kaiwo.silogen.ai", "kaiwoqueueconfigs", "Cluster", True, ["kqc"]),
        ("KaiwoConfig", "config.kaiwo.silogen.ai", "kaiwoconfigs", "Cluster", False, ["kcfg"]),
        ("AIMNamespaceConfig", "config.kaiwo.silogen.ai", "aimnamespaceconfigs", "Namespaced", True, ["aimnsc"]),
        ("Model", "kubeai.org", "models", "Namespaced", True, None),
    ],
)
def test_names_scope_and_subresources(kind, group, plural, scope, status, short):
    crd = CRDS[kind]
    spec = crd["spec"]
    assert crd["metadata"]["name"] == f"{plural}.{group}"
    assert spec["group"] == group
    assert spec["scope"] == scope
    assert spec["names"]["plural"] == plural
    assert spec["names"]["kind"] == kind
    assert spec["names"]["listKind"] == f"{kind}List"
    assert spec["names"].get("shortNames") == short
    version = spec["versions"][0]
    assert version["name"] == by_kind(kind).version
    assert version["served"] and version["storage"]
    assert ("status" in version.get("subresources", {})) is status
    if kind.startswith(("Kaiwo", "AIM")):
        assert spec["names"]["categories"] == ["kaiwo"]


def test_model_has_scale_subresource():
    sub = CRDS["Model"]["spec"]["versions"][0]["subresources"]
    assert sub["scale"] == {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas.all"}


def test_short_names_do_not_collide():
    builtin = {"po", "svc", "deploy", "ds", "rs", "sts", "cm", "ns", "no", "pv", "pvc", "sa", "ep", "ing", "pc", "sc",
               "hpa", "pdb", "cj", "csr", "crd", "ev", "limits", "quota", "rc", "netpol", "cs", "psp"}
    seen: list[str] = []
    for crd in CRDS.values():
        seen += crd["spec"]["names"].get("shortNames", [])
    assert len(seen) == len(set(seen))
    assert not set(seen) & builtin


@pytest.mark.parametrize(
    "kind,columns",
    [
        ("KaiwoJob", [("Status", "string", ".status.status"), ("StartTime", "date", ".status.startTime"),
                      ("CompletionTime", "date", ".status.completionTime"),
                      ("Duration(s)", "integer", ".status.duration"), ("Age", "date", ".metadata.creationTimestamp")]),
        ("KaiwoService", [("Status", "string", ".status.status"), ("StartTime", "date", ".status.startTime"),
                          ("Duration(s)", "integer", ".status.duration"),
                          ("Age", "date", ".metadata.creationTimestamp")]),
        ("KaiwoQueueConfig", [("WorkloadStatus", "string", ".status.status"),
                              ("Age", "date", ".metadata.creationTimestamp")]),
    ],
)
def test_printer_columns(kind, columns):
    got = [(c["name"], c["type"], c["jsonPath"]) for c in CRDS[kind]["spec"]["versions"][0]["additionalPrinterColumns"]]
    assert got == columns


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_printer_column_paths_exist_in_schema(kind):
    s = schema(kind)
    for col in CRDS[kind]["spec"]["versions"][0].get("additionalPrinterColumns", []):
        if col["jsonPath"].startswith(".metadata."):
            continue
        # a filter such as conditions[?(@.type=="Ready")] selects list items
        node = node_at(s, re.sub(r"\[\?\(.*?\)\]", "[]", col["jsonPath"]))
        expected = {"string": "string", "date": "string", "integer": "integer", "number": "number"}[col["type"]]
        assert node["type"] == expected, col


# ---------------------------------------------------------------- the contract, field by field

DEFAULTS = [
    ("KaiwoJob", ".spec.gpus", 0),
    ("KaiwoJob", ".spec.gpuVendor", "amd"),
    ("KaiwoJob", ".spec.replicas", 1),
    ("KaiwoJob", ".spec.ray", False),
    ("KaiwoJob", ".spec.dangerous", False),
    ("KaiwoJob", ".spec.storage.accessMode", "ReadWriteMany"),
    ("KaiwoJob", ".spec.storage.data.mountPath", "/workload"),
    ("KaiwoJob", ".spec.storage.huggingFace.mountPath", "/hf_cache"),
    ("KaiwoService", ".spec.gpus", 0),
    ("KaiwoService", ".spec.gpuVendor", "amd"),
    ("KaiwoService", ".spec.replicas", 1),
    ("KaiwoService", ".spec.ray", False),
    ("KaiwoService", ".spec.dangerous", False),
    ("KaiwoService", ".spec.storage.accessMode", "ReadWriteMany"),
    ("KaiwoConfig", ".spec", {}),
    ("KaiwoConfig", ".spec.ray", {}),
    ("KaiwoConfig", ".spec.storage", {}),
    ("KaiwoConfig", ".spec.nodes", {}),
    ("KaiwoConfig", ".spec.scheduling", {}),
    ("KaiwoConfig", ".spec.resourceMonitoring", {}),
    ("KaiwoConfig", ".spec.ray.defaultRayImage", "ghcr.io/silogen/rocm-ray:6.4"),
    ("KaiwoConfig", ".spec.ray.headPodMemory", "16Gi"),
    ("KaiwoConfig", ".spec.storage.defaultDataMountPath", "/workload"),
    ("KaiwoConfig", ".spec.storage.defaultHfMountPath", "/hf_cache"),
    ("KaiwoConfig", ".spec.nodes.defaultGpuResourceKey", "amd.com/gpu"),
    ("KaiwoConfig", ".spec.nodes.defaultGpuTaintKey", "kaiwo.silogen.ai/gpu"),
    ("KaiwoConfig", ".spec.nodes.excludeMasterNodesFromNodePools", False),
    ("KaiwoConfig", ".spec.nodes.addTaintsToGpuNodes", False),
    ("KaiwoConfig", ".spec.scheduling.kubeSchedulerName", "kaiwo-scheduler"),
    ("KaiwoConfig", ".spec.scheduling.pendingThresholdForPreemption", "5m"),
    ("KaiwoConfig", ".spec.resourceMonitoring.lowUtilizationThreshold", 1),
    ("KaiwoConfig", ".spec.resourceMonitoring.profile", "gpu"),
    ("KaiwoConfig", ".spec.resourceMonitoring.terminateUnderutilized", False),
    ("KaiwoConfig", ".spec.resourceMonitoring.terminateUnderutilizedAfter", "24h"),
    ("KaiwoConfig", ".spec.defaultClusterQueueName", "kaiwo"),
    ("KaiwoConfig", ".spec.defaultClusterQueueCohortName", "kaiwo"),
    ("KaiwoConfig", ".spec.dynamicallyUpdateDefaultClusterQueue", False),
    ("Model", ".spec.targetRequests", 100),
    ("Model", ".spec.scaleDownDelaySeconds", 30),
    ("Model", ".spec.loadBalancing", {}),
    ("Model", ".spec.loadBalancing.strategy", "LeastLoad"),
    ("Model", ".spec.loadBalancing.prefixHash", {}),
    ("Model", ".spec.loadBalancing.prefixHash.meanLoadFactor", 125),
    ("Model", ".spec.loadBalancing.prefixHash.replication", 256),
    ("Model", ".spec.loadBalancing.prefixHash.prefixCharLength", 100),
]


@pytest.mark.parametrize("kind,path,value", DEFAULTS)
def test_defaults(kind, path, value):
    node = node_at(schema(kind), path)
    assert node["default"] == value
    assert type(node["default"]) is type(value) or isinstance(value, int) and isinstance(node["default"], float)


NO_DEFAULT = [
    ("KaiwoJob", ".spec.gpusPerReplica"),
    ("KaiwoJob", ".spec.storage.storageEnabled"),
    ("KaiwoJob", ".spec.clusterQueue"),
    ("KaiwoJob", ".status"),
    ("KaiwoConfig", ".spec.storage.defaultStorageClass"),
    ("Model", ".spec.minReplicas"),
    ("Model", ".spec.replicas"),
    ("Model", ".spec"),
]


@pytest.mark.parametrize("kind,path", NO_DEFAULT)
def test_fields_without_default(kind, path):
    assert "default" not in node_at(schema(kind), path)


ENUMS = [
    ("KaiwoConfig", ".spec.resourceMonitoring.profile", ["gpu"]),
    ("Model", ".spec.engine", ["OLlama", "VLLM", "FasterWhisper", "Infinity"]),
    ("Model", ".spec.features[]", ["TextGeneration", "TextEmbedding", "Reranking", "SpeechToText"]),
    ("Model", ".spec.loadBalancing.strategy", ["LeastLoad", "PrefixHash"]),
    ("KaiwoJob", ".status.conditions[].status", ["True", "False", "Unknown"]),
]


@pytest.mark.parametrize("kind,path,values", ENUMS)
def test_enums(kind, path, values):
    assert node_at(schema(kind), path)["enum"] == values


def test_status_phase_is_not_an_enum():
    # The operator writes values beyond the reference list (DOWNLOADING, TERMINATED, ...).
    for kind in ("KaiwoJob", "KaiwoService", "KaiwoQueueConfig"):
        node = node_at(schema(kind), ".status.status")
        assert node["type"] == "string" and "enum" not in node


PATTERNS = [
    ("KaiwoConfig", ".spec.resourceMonitoring.terminateUnderutilizedAfter", ["24h", "1h30m", "90s", "2h3m4s"],
     ["", "1d", "1.5h", "h", "24"]),
    ("KaiwoJob", ".spec.duration", ["1h30m", "45s", "1.5h", "0", "100ms"], ["", "1d", "forever", "1h 30m", "-1h"]),
    ("KaiwoService", ".spec.duration", ["24h"], ["tomorrow"]),
    ("Model", ".spec.adapters[].name", ["colorist", "a-1"], ["Colorist", "a_b", "a b"]),
    ("KaiwoQueueConfig", ".spec.topologies[].spec.levels[].nodeLabel",
     ["kubernetes.io/hostname", "kaiwo/topology-rack", "rack"], ["/rack", "a/b/c", "-x"]),
    ("KaiwoJob", ".status.conditions[].reason", ["JobCompleted", "A", "a_b:c"], ["", "1abc", "has space"]),
]


@pytest.mark.parametrize("kind,path,good,bad", PATTERNS)
def test_patterns(kind, path, good, bad):
    pattern = re.compile(node_at(schema(kind), path)["pattern"])
    for value in good:
        assert pattern.search(value), value
    for value in bad:
        assert not pattern.search(value), value


LIMITS = [
    ("KaiwoQueueConfig", ".spec.clusterQueues", "maxItems", 10),
    ("KaiwoQueueConfig", ".spec.workloadPriorityClasses", "maxItems", 5),
    ("KaiwoQueueConfig", ".spec.resourceFlavors", "maxItems", 20),
    ("KaiwoQueueConfig", ".spec.topologies", "maxItems", 10),
    ("KaiwoQueueConfig", ".spec.resourceFlavors[].nodeLabels", "maxProperties", 10),
    ("KaiwoQueueConfig", ".spec.resourceFlavors[].taints", "maxItems", 5),
    ("KaiwoQueueConfig", ".spec.resourceFlavors[].tolerations", "maxItems", 5),
    ("KaiwoQueueConfig", ".spec.topologies[].spec.levels", "minItems", 1),
    ("KaiwoQueueConfig", ".spec.topologies[].spec.levels", "maxItems", 8),
    ("KaiwoConfig", ".spec.resourceMonitoring.lowUtilizationThreshold", "minimum", 0),
    ("Model", ".spec.minReplicas", "minimum", 0),
    ("Model", ".spec.maxReplicas", "minimum", 1),
    ("Model", ".spec.targetRequests", "minimum", 1),
    ("Model", ".spec.loadBalancing.prefixHash.meanLoadFactor", "minimum", 100),
    ("Model", ".spec.files", "maxItems", 10),
    ("Model", ".spec.files[].path", "maxLength", 1024),
    ("Model", ".spec.files[].content", "maxLength", 100000),
    ("Model", ".spec.adapters[].name", "maxLength", 63),
    ("KaiwoJob", ".status.conditions[].message", "maxLength", 32768),
]


@pytest.mark.parametrize("kind,path,key,value", LIMITS)
def test_limits(kind, path, key, value):
    assert node_at(schema(kind), path)[key] == value


REQUIRED = [
    ("Model", ".spec", ["engine", "features", "url"]),
    ("Model", ".spec.adapters[]", ["name"]),
    ("Model", ".spec.files[]", ["content", "path"]),
    ("KaiwoQueueConfig", ".spec.clusterQueues[]", ["name"]),
    ("KaiwoQueueConfig", ".spec.resourceFlavors[]", ["name"]),
    ("KaiwoQueueConfig", ".spec.workloadPriorityClasses[]", ["metadata", "value"]),
    ("KaiwoQueueConfig", ".spec.topologies[]", ["metadata", "spec"]),
    ("KaiwoQueueConfig", ".spec.topologies[].spec", ["levels"]),
    ("KaiwoJob", ".spec.storage.data.download.s3[].buckets[].files[]", ["path", "targetPath"]),
    ("KaiwoJob", ".spec.storage.data.download.gcs[].buckets[].folders[]", ["path", "targetPath"]),
    ("KaiwoJob", ".status.conditions[]", ["lastTransitionTime", "message", "reason", "status", "type"]),
    ("KaiwoJob", ".spec.env[]", ["name"]),
]


@pytest.mark.parametrize("kind,path,required", REQUIRED)
def test_required(kind, path, required):
    assert node_at(schema(kind), path)["required"] == required


@pytest.mark.parametrize("kind", ["KaiwoJob", "KaiwoService", "KaiwoConfig", "KaiwoQueueConfig", "AIMNamespaceConfig"])
def test_nothing_required_at_the_top_of_kaiwo_specs(kind):
    # A user's minimal manifest keeps working: no field of the kaiwo specs is mandatory.
    assert "required" not in node_at(schema(kind), ".spec")


@pytest.mark.parametrize(
    "kind,path",
    [
        ("KaiwoJob", ".spec.job"),
        ("KaiwoJob", ".spec.rayJob"),
        ("KaiwoService", ".spec.deployment"),
        ("KaiwoService", ".spec.rayService"),
        ("KaiwoJob", ".spec.env[].valueFrom"),
        ("KaiwoQueueConfig", ".spec.clusterQueues[].spec.preemption"),
        ("Model", ".spec.envFrom[]"),
    ],
)
def test_embedded_objects_preserve_unknown_fields(kind, path):
    node = node_at(schema(kind), path)
    assert node["type"] == "object"
    assert node["x-kubernetes-preserve-unknown-fields"] is True
    assert "properties" not in node


def test_cluster_queue_spec_is_kept_as_written():
    # Typed where Kaiwo copies fields, but no defaults: the stored spec equals what was written,
    # so comparing it with a freshly built default queue spec stays meaningful.
    node = node_at(schema("KaiwoQueueConfig"), ".spec.clusterQueues[].spec")
    assert node["x-kubernetes-preserve-unknown-fields"] is True
    assert node["properties"]["queueingStrategy"]["enum"] == ["StrictFIFO", "BestEffortFIFO"]
    assert node["properties"]["stopPolicy"]["enum"] == ["None", "Hold", "HoldAndDrain"]
    assert node["properties"]["resourceGroups"]["maxItems"] == 16
    assert not [p for p, n in walk(node) if "default" in n]
    written = {"cohort": "kaiwo", "namespaceSelector": {}, "futureField": {"a": 1}}
    assert apply_defaults(node, prune(node, written)) == written


def test_resource_quantities_are_int_or_string():
    for side in ("limits", "requests"):
        node = node_at(schema("KaiwoJob"), f".spec.resources.{side}[*]")
        assert node["x-kubernetes-int-or-string"] is True
        assert "type" not in node


def test_time_and_int64_formats():
    s = schema("KaiwoJob")
    assert node_at(s, ".status.startTime")["format"] == "date-time"
    assert node_at(s, ".status.completionTime")["format"] == "date-time"
    assert node_at(s, ".status.duration") == {**node_at(s, ".status.duration"), "type": "integer", "format": "int64"}


CEL = [
    ("KaiwoConfig", "", "metadata.name must be 'kaiwo'"),
    ("KaiwoQueueConfig", "", "metadata.name must be 'kaiwo'"),
    ("Model", "", "metadata.name must be at most 40 characters"),
    ("KaiwoQueueConfig", ".spec.clusterQueues", "clusterQueues: name must be unique"),
    ("KaiwoQueueConfig", ".spec.resourceFlavors", "resourceFlavors: name must be unique"),
    ("KaiwoQueueConfig", ".spec.workloadPriorityClasses", "workloadPriorityClasses: metadata.name must be unique"),
    ("KaiwoQueueConfig", ".spec.topologies", "topologies: metadata.name must be unique"),
    ("KaiwoQueueConfig", ".spec.topologies[].spec.levels", "levels[].nodeLabel must be unique"),
    ("KaiwoQueueConfig", ".spec.topologies[].spec.levels", "kubernetes.io/hostname label can only be used as the last"),
    ("Model", ".spec.url", "url must start with"),
    ("Model", ".spec", "gs:// urls require a cacheProfile"),
    ("Model", ".spec", "adapters are only supported with engine VLLM"),
    ("Model", ".spec", "minReplicas must be less than or equal to maxReplicas"),
    ("Model", ".spec.cacheProfile", "cacheProfile is immutable"),
    ("Model", ".spec.files", "files[].path must be unique"),
]


@pytest.mark.parametrize("kind,path,message", CEL)
def test_cel_rules_present(kind, path, message):
    rules = node_at(schema(kind), path).get("x-kubernetes-validations", [])
    assert any(message in r["message"] for r in rules), rules


def test_cel_lists_and_strings_are_bounded():
    # CEL cost estimation needs bounded lists wherever a rule iterates.
    for kind in CRDS:
        for path, node in walk(schema(kind)):
            for rule in node.get("x-kubernetes-validations", []):
                if node.get("type") == "array" and (".all(" in rule["rule"] or ".exists" in rule["rule"]):
                    assert "maxItems" in node, f"{kind}{path}: unbounded list in CEL rule"


# ---------------------------------------------------------------- Python defaults == CRD defaults


@pytest.mark.parametrize("kind,manifest", all_examples(), ids=lambda v: v if isinstance(v, str) else "")
def test_python_defaults_equal_apiserver_defaults(kind, manifest):
    """What the apiserver would store (prune + default) is what the model dumps."""
    info = by_kind(kind)
    s = schema(kind)
    stored = apply_defaults(s, prune(s, manifest))
    assert info.model.model_validate(manifest).to_k8s() == stored
    # and the stored form survives another model round trip unchanged
    assert info.model.model_validate(stored).to_k8s() == stored


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_minimal_object_defaults_match(kind):
    info = by_kind(kind)
    minimal = {"apiVersion": info.api_version, "kind": kind, "metadata": {"name": "kaiwo"}}
    if kind == "Model":
        minimal["spec"] = {"url": "hf://org/model", "engine": "VLLM", "features": []}
    s = schema(kind)
    assert info.model.model_validate(minimal).to_k8s() == apply_defaults(s, minimal)
