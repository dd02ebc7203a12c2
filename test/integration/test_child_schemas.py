"""Every child object the builders produce, checked field by field against the
schema the API server really serves.

The API server prunes a field a CRD's structural schema does not define, and
says nothing: an AppWrapper's pod sets written under the Go field name
(``declaredPodSets``) instead of the JSON one (``podSets``) simply vanished, and
Kueue then refused the AppWrapper. Here each object is sent as a server-side
dry-run create with ``fieldValidation=Strict``, which turns every unknown or
duplicate field into an error naming it, for CRDs (the third-party ones
hack/envtest/build.sh extracts from the projects' modules) and built-in kinds
alike. Embedded templates the CRD keeps opaque (the RayService inside an
AppWrapper) are checked as objects of their own.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from kaiwo_ctrl.aim.routes import desired_grant, desired_route
from kaiwo_ctrl.queues.defaults import default_queue_config
from kaiwo_ctrl.queues.kueue import desired_kueue_objects
from kaiwo_ctrl.queues.localqueue import desired_local_queue
from kaiwo_ctrl.queues.nodepools import discover
from kaiwo_ctrl.serving.model.cache import evict_job
from kaiwo_ctrl.serving.model.config import parse_config
from kaiwo_ctrl.serving.model.render import render as render_models
from kaiwo_ctrl.workloads.reconcile.desired import desired_children
from kaiwo_ctrl.runtime.objects.ownership import RENDER_UID
from kaiwo_ctrl.workloads.reconcile.render import as_discovered, render
from kaiwo_ctrl.workloads.base.world import World

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "config" / "samples"
EXAMPLES = ROOT / "test" / "unit" / "fixtures" / "examples"
WORKLOAD_FIXTURES = ROOT / "test" / "unit" / "fixtures" / "workloads"
OPERATOR_NS = "kaiwo-system"


def load(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def sample_nodes() -> list[dict]:
    return load(SAMPLES / "nodes_kwok.yaml")


def _children(docs: list[dict], nodes: list[dict], config: dict | None = None) -> list[dict]:
    """As render gives them (downloads done), plus, before the downloads succeeded,
    the download Job and what it needs instead of the main workload."""
    out = render(docs, nodes=nodes, config=config)
    world = World.from_dicts(nodes=as_discovered(nodes, config), config=config)
    for doc in docs:
        if doc.get("kind") in ("KaiwoJob", "KaiwoService"):
            item = copy.deepcopy(doc)
            item["metadata"].setdefault("uid", RENDER_UID)
            item["metadata"].setdefault("namespace", "default")
            children = desired_children(item, world, download_succeeded=False)
            assert isinstance(children, list), children
            out += children
    return out


def workload_children() -> list[dict]:
    docs = load(SAMPLES / "kaiwo_v1alpha1_kaiwojob.yaml") + load(SAMPLES / "kaiwo_v1alpha1_kaiwoservice.yaml")
    for example in sorted(EXAMPLES.glob("*.yaml")):
        docs += load(example)
    fixture_nodes = yaml.safe_load((WORKLOAD_FIXTURES / "nodes.yaml").read_text())
    return _children(docs, sample_nodes()) + _children(
        load(WORKLOAD_FIXTURES / "render_input.yaml"), fixture_nodes, {"ray": {"headPodMemory": "1Gi"}})


def queue_children() -> list[dict]:
    qc = default_queue_config(discover(as_discovered(sample_nodes(), None)))
    qc["metadata"]["uid"] = RENDER_UID
    spec = qc["spec"]
    spec["clusterQueues"][0]["namespaces"] = ["team-a"]
    spec["clusterQueues"][0]["spec"]["preemption"] = {"withinClusterQueue": "LowerPriority"}
    spec["workloadPriorityClasses"] = [{"metadata": {"name": "high"}, "value": 1000, "description": "urgent"}]
    state = desired_kueue_objects(qc, {"kaiwo": RENDER_UID})
    assert not state.problems, state.problems
    return state.objects + [desired_local_queue("team-b", "kaiwo")]


def serving_children() -> list[dict]:
    config = parse_config({"cacheProfiles": {"fast": {"sharedFilesystem": {"storageClassName": "standard"}}}})
    cached = {
        "apiVersion": "kubeai.org/v1", "kind": "Model",
        "metadata": {"name": "cached", "namespace": "team-a"},
        "spec": {"features": ["TextGeneration"], "url": "hf://example-org/tiny-model", "engine": "VLLM",
                 "resourceProfile": "cpu:1", "minReplicas": 1, "cacheProfile": "fast",
                 "files": [{"path": "/config/chat.jinja", "content": "{{ messages }}"}]},
    }
    docs = load(SAMPLES / "kubeai_v1_model.yaml") + [cached]
    out = render_models(docs, config)
    model = copy.deepcopy(cached)
    model["metadata"]["uid"] = RENDER_UID
    out.append(evict_job(model, config))
    aim_config = {"metadata": {"name": "default", "namespace": "team-a"},
                  "spec": {"gateway": {"name": "inference", "namespace": "gateways"}}}
    out.append(desired_route(model, aim_config, OPERATOR_NS, "0" * 64))
    out.append(desired_grant("team-a", OPERATOR_NS))
    return out


def plural(kind: str) -> str:
    lower = kind.lower()
    if lower.endswith("y"):
        return lower[:-1] + "ies"
    return lower + ("es" if lower.endswith("s") else "s")


def url(obj: dict, namespace: str | None) -> str:
    api = obj["apiVersion"]
    base = "/api/v1" if api == "v1" else f"/apis/{api}"
    ns = f"/namespaces/{namespace}" if namespace else ""
    return f"{base}{ns}/{plural(obj['kind'])}?dryRun=All&fieldValidation=Strict"


def embedded(obj: dict) -> list[dict]:
    """Objects a CRD carries as opaque templates (checked as objects of their own)."""
    if obj["kind"] == "AppWrapper":
        return [c["template"] for c in obj["spec"]["components"]]
    return []


def every_child() -> list[dict]:
    objs = workload_children() + queue_children() + serving_children()
    return objs + [e for o in objs for e in embedded(o)]


@pytest.fixture(scope="module")
def namespaces(admin) -> None:
    for ns in {"default", "kaiwo-test", "kaiwo-samples", "team-a", "team-b", OPERATOR_NS,
               *(o["metadata"].get("namespace") for o in every_child())}:
        if ns:
            r = admin.post("/api/v1/namespaces", json={"metadata": {"name": ns}})
            assert r.status_code in (201, 409), r.text


def test_the_walk_covers_every_kind_we_build():
    kinds = {o["kind"] for o in every_child()}
    assert kinds >= {
        "Job", "RayJob", "RayService", "AppWrapper", "Deployment", "PersistentVolumeClaim",
        "ConfigMap", "Pod", "LocalQueue", "ClusterQueue", "ResourceFlavor", "Topology",
        "WorkloadPriorityClass", "HTTPRoute", "ReferenceGrant",
    }, kinds


def test_every_field_of_every_child_is_in_its_schema(admin, namespaces):
    rejected: list[str] = []
    for obj in every_child():
        body: dict[str, Any] = copy.deepcopy(obj)
        body.pop("status", None)
        meta = body.setdefault("metadata", {})
        ns = meta.get("namespace")
        if obj["kind"] not in ("ClusterQueue", "ResourceFlavor", "Topology", "WorkloadPriorityClass"):
            ns = ns or "default"
            meta["namespace"] = ns
        # the shared plane may already hold an object of that name (another test's
        # queue config): a generated name keeps the dry run a real create
        name = meta.pop("name", None) or meta.get("generateName", "")
        meta["generateName"] = f"{name.rstrip('-')[:40]}-"
        r = admin.post(url(body, ns), json=body)
        if r.status_code != 201:
            rejected.append(f"{obj['kind']} {ns}/{name}: {r.status_code} {r.json().get('message')}")
        else:
            warnings = r.headers.get_list("warning") if hasattr(r.headers, "get_list") else []
            rejected += [f"{obj['kind']} {name}: warning {w}" for w in warnings if "unknown field" in w]
    assert not rejected, "\n".join(rejected)
