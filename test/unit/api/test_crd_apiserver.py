"""The generated CRDs on a real kube-apiserver (etcd + apiserver from
kaiwo_ctrl.local): accepted (structural, CEL cost within limits), defaults
applied exactly like the Python models, CEL rules reject with our messages,
subresources and printer columns work.

Needs the control-plane binaries (hack/envtest/build.sh; a no-op when cached).
"""

from __future__ import annotations

import copy

import pytest

from api import crdgen
from api.examples import EXAMPLES, INVALID_EXAMPLES, all_examples, load
from api.registry import KINDS, by_kind
from support import wait_until
from support.admin import admin_http
from support import REPO

pytestmark = pytest.mark.integration

ROOT = REPO
SERVER_FIELDS = ("uid", "resourceVersion", "generation", "creationTimestamp", "managedFields")


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    from kaiwo_ctrl.local.controlplane import ControlPlane, locate_assets

    assets = locate_assets(build=True)
    plane = ControlPlane(directory=tmp_path_factory.mktemp("cp"), assets=assets)
    plane.start(install_crds=False)
    try:
        files = sorted((ROOT / crdgen.BASES_DIR).glob("*.yaml"))
        installed = plane.install_crds(files)
        assert sorted(installed) == sorted(k.crd_name for k in KINDS)
        with admin_http(plane) as client:
            # A fresh CRD answers 429 until its storage is initialised; wait for every collection.
            for info in KINDS:
                wait_until(lambda info=info: client.get(collection(info.kind, "default")).status_code == 200,
                           timeout=60, interval=0.2, what=f"{info.crd_name} servable")
            for ns in ("team-a", "kubeai"):
                client.post("/api/v1/namespaces", json={"metadata": {"name": ns}})
            yield client
    finally:
        plane.stop()


def collection(kind: str, namespace: str | None = None) -> str:
    info = by_kind(kind)
    ns = f"/namespaces/{namespace}" if info.namespaced else ""
    return f"/apis/{info.group}/{info.version}{ns}/{info.plural}"


def create(api, obj: dict):
    return api.post(collection(obj["kind"], obj["metadata"].get("namespace")), json=obj)


def strip_server(obj: dict) -> dict:
    obj = copy.deepcopy(obj)
    for key in SERVER_FIELDS:
        obj["metadata"].pop(key, None)
    return obj


def test_every_crd_is_established_and_served(api):
    for info in KINDS:
        r = api.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{info.crd_name}")
        assert r.status_code == 200
        conditions = {c["type"]: c["status"] for c in r.json()["status"]["conditions"]}
        assert conditions.get("Established") == "True"
        assert conditions.get("NonStructuralSchema") is None
        assert api.get(collection(info.kind, "default")).status_code == 200


@pytest.mark.parametrize("kind,manifest", all_examples(), ids=lambda v: v if isinstance(v, str) else "")
def test_examples_are_stored_exactly_as_the_model_dumps_them(api, kind, manifest):
    obj = copy.deepcopy(manifest)
    if kind != "KaiwoConfig" and kind != "KaiwoQueueConfig":
        obj["metadata"]["name"] = obj["metadata"]["name"] + "-stored"
    r = create(api, obj)
    assert r.status_code == 201, r.text
    stored = strip_server(r.json())
    model = by_kind(kind).model
    assert model.model_validate(obj).to_k8s() == stored
    assert model.model_validate(stored).to_k8s() == stored
    api.delete(f"{collection(kind, obj['metadata'].get('namespace'))}/{obj['metadata']['name']}")


def test_empty_kaiwo_config_is_filled_by_the_apiserver(api):
    from api.config.v1alpha1 import KaiwoConfig

    r = create(api, {"apiVersion": "config.kaiwo.silogen.ai/v1alpha1", "kind": "KaiwoConfig",
                     "metadata": {"name": "kaiwo"}})
    assert r.status_code == 201, r.text
    assert r.json()["spec"] == KaiwoConfig(metadata={"name": "kaiwo"}).to_k8s()["spec"]
    assert r.json()["spec"]["resourceMonitoring"]["terminateUnderutilizedAfter"] == "24h"
    api.delete(f"{collection('KaiwoConfig')}/kaiwo")


def _model(name: str = "m", **spec) -> dict:
    return {"apiVersion": "kubeai.org/v1", "kind": "Model", "metadata": {"name": name, "namespace": "kubeai"},
            "spec": {"url": "hf://org/model", "engine": "VLLM", "features": [], **spec}}


@pytest.mark.parametrize("obj,message", [(o, m) for o, m, _ in INVALID_EXAMPLES])
def test_invalid_objects_are_rejected_with_a_clear_message(api, obj, message):
    r = create(api, obj)
    assert r.status_code == 422, r.text
    assert message in r.json()["message"], r.json()["message"]


def test_model_transition_rules(api):
    base = collection("Model", "kubeai")
    r = create(api, _model("immut", cacheProfile="fast", url="s3://bucket/m"))
    assert r.status_code == 201, r.text
    obj = r.json()

    def update(mutate) -> dict:
        o = copy.deepcopy(obj)
        mutate(o["spec"])
        return api.put(f"{base}/immut", json=o).json()

    assert "cacheProfile is immutable" in update(lambda s: s.update(cacheProfile="slow"))["message"]
    assert "url cannot be changed" in update(lambda s: s.update(url="s3://bucket/other"))["message"]
    assert "replication is immutable" in update(
        lambda s: s["loadBalancing"]["prefixHash"].update(replication=7))["message"]
    ok = update(lambda s: s.update(minReplicas=1))
    assert ok["spec"]["minReplicas"] == 1


def test_status_and_scale_subresources(api):
    job = load(EXAMPLES["KaiwoJob"][1])
    r = create(api, job)
    assert r.status_code == 201, r.text
    url = f"{collection('KaiwoJob', 'default')}/{job['metadata']['name']}"
    obj = r.json()
    # status is ignored on the main resource ...
    obj["status"] = {"status": "RUNNING", "startTime": "2026-01-01T00:00:00Z", "duration": 5}
    assert "status" not in api.put(url, json=obj).json()
    # ... and written through /status
    obj = api.get(url).json()
    obj["status"] = {"status": "RUNNING", "startTime": "2026-01-01T00:00:00Z", "duration": 5,
                     "conditions": [{"type": "KaiwoJobRunning", "status": "True", "reason": "Started",
                                     "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    r = api.put(f"{url}/status", json=obj)
    assert r.status_code == 200, r.text
    assert r.json()["status"]["duration"] == 5

    table = api.get(url, headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"}).json()
    names = [c["name"] for c in table["columnDefinitions"]]
    assert names == ["Name", "Status", "StartTime", "CompletionTime", "Duration(s)", "Age"]
    assert table["rows"][0]["cells"][1] == "RUNNING"
    assert table["rows"][0]["cells"][4] == 5

    r = create(api, _model("scaled", replicas=2))
    assert r.status_code == 201, r.text
    scale = api.get(f"{collection('Model', 'kubeai')}/scaled/scale")
    assert scale.status_code == 200 and scale.json()["spec"]["replicas"] == 2


def test_kaiwo_config_has_no_status_subresource(api):
    r = api.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{by_kind('KaiwoConfig').crd_name}")
    assert "subresources" not in r.json()["spec"]["versions"][0]


def test_legacy_data_section_of_kaiwo_config_is_kept_and_honoured(api):
    from api.config.v1alpha1 import KaiwoConfig

    r = create(api, {"apiVersion": "config.kaiwo.silogen.ai/v1alpha1", "kind": "KaiwoConfig",
                     "metadata": {"name": "kaiwo"}, "spec": {"data": {"defaultStorageClass": "longhorn"}}})
    assert r.status_code == 201, r.text
    spec = r.json()["spec"]
    assert spec["data"] == {"defaultStorageClass": "longhorn"}  # no defaults materialise under data
    assert spec["storage"] == {"defaultDataMountPath": "/workload", "defaultHfMountPath": "/hf_cache"}
    assert KaiwoConfig.model_validate(r.json()).spec.storage.default_storage_class == "longhorn"
    api.delete(f"{collection('KaiwoConfig')}/kaiwo")
