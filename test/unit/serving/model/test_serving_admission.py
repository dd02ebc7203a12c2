"""Pure parts of Models under Kueue and of their InferencePools."""

from __future__ import annotations

import pytest

from kaiwo_ctrl.serving.model.admission import (
    OPERATOR_GATE,
    requests_gpus,
    ADMISSION_GATE,
    ANNOTATION_CLUSTER_QUEUE,
    LABEL_MANAGED,
    LABEL_PRIORITY_CLASS,
    LABEL_QUEUE_NAME,
    index_owner_pod,
    is_gated,
    model_queue,
    quota,
    queue_labels,
)
from kaiwo_ctrl.serving.model.config import parse_config
from kaiwo_ctrl.serving.model.controller import trim_pod
from kaiwo_ctrl.serving.inferencepool import ANNOTATION_PICKER, PickerError, desired_pool, up_to_date
from kaiwo_ctrl.serving.model.pods import build_pod
from kaiwo_ctrl.serving.model.status import QUOTA_RESERVED, desired_status, replica_counts


def model(labels=None, annotations=None, **spec) -> dict:
    base = {"url": "hf://org/repo", "engine": "VLLM", "features": [], "resourceProfile": "cpu:1", "replicas": 2}
    base.update(spec)
    meta = {"name": "m", "namespace": "ns", "uid": "u-1", "generation": 1, "labels": labels or {}, "annotations": annotations or {}}
    return {"metadata": meta, "spec": base}


def pod(name: str, *, gated: bool = False, ready: bool = False, deleting: bool = False, managed: bool = True) -> dict:
    meta: dict = {"name": name, "namespace": "ns", "labels": {"model": "m", **({LABEL_MANAGED: "true"} if managed else {})}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    spec = {"schedulingGates": [{"name": ADMISSION_GATE}]} if gated else {"nodeName": "n1"}
    status = {"phase": "Running" if not gated else "Pending",
              "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    return {"metadata": meta, "spec": spec, "status": status}


def workload(pod_name: str, uid: str = "w1", **conds) -> dict:
    return {
        "metadata": {"name": f"pod-{pod_name}-abcde", "namespace": "ns", "uid": uid,
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": pod_name, "uid": "p"}]},
        "status": {"conditions": [{"type": t, **c} for t, c in conds.items()]},
    }


# ------------------------------------------------------------- which queue
def test_queue_label_wins_then_annotation_then_config_default():
    assert model_queue(model({LABEL_QUEUE_NAME: "team-a"}, {ANNOTATION_CLUSTER_QUEUE: "team-b"}), "kaiwo") == "team-a"
    assert model_queue(model(annotations={ANNOTATION_CLUSTER_QUEUE: "team-b"}), "kaiwo") == "team-b"
    assert model_queue(model(), "kaiwo") == "kaiwo"
    assert model_queue(model(), None) is None
    assert model_queue(model({LABEL_QUEUE_NAME: ""}), "") is None


def test_priority_label_is_copied_to_pods():
    m = model({LABEL_QUEUE_NAME: "team-a", LABEL_PRIORITY_CLASS: "serving-high"})
    assert queue_labels(m, "team-a") == {LABEL_QUEUE_NAME: "team-a", LABEL_PRIORITY_CLASS: "serving-high"}
    assert queue_labels(model(), "q") == {LABEL_QUEUE_NAME: "q"}


def test_pod_under_kueue_carries_the_queue_and_its_hash_changes_with_it():
    cfg = parse_config(None)
    plain = build_pod(model(), cfg)
    assert LABEL_QUEUE_NAME not in plain.pod["metadata"]["labels"]
    a = build_pod(model(), cfg, kueue={LABEL_QUEUE_NAME: "team-a"})
    b = build_pod(model(), cfg, kueue={LABEL_QUEUE_NAME: "team-b"})
    assert a.pod["metadata"]["labels"][LABEL_QUEUE_NAME] == "team-a"
    # the operator's own gate holds a Pod under Kueue until Kueue admits it; nothing else differs
    assert a.pod["spec"].pop("schedulingGates") == [{"name": OPERATOR_GATE}]
    assert a.pod["spec"] == plain.pod["spec"] and "schedulingGates" not in plain.pod["spec"]
    # a Model outside Kueue keeps its hash (no roll on upgrade); moving queues rolls the Pods
    assert len({plain.hash, a.hash, b.hash}) == 3
    assert build_pod(model(), cfg).hash == plain.hash


def test_trimmed_pod_keeps_the_admission_gate():
    raw = {"metadata": {"name": "p"}, "spec": {"schedulingGates": [{"name": ADMISSION_GATE}], "containers": [{}]}, "status": {}}
    trimmed = trim_pod(raw)
    assert is_gated(trimmed) and "containers" not in trimmed["spec"]
    assert not is_gated(trim_pod({"metadata": {"name": "p"}, "spec": {"nodeName": "n"}, "status": {}}))


def test_workload_index_names_its_pod():
    assert index_owner_pod(workload("p1")) == ["ns/p1"]
    assert index_owner_pod({"metadata": {"namespace": "ns", "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j"}]}}) == []


# ------------------------------------------------------------------- status
def test_waiting_replica_gives_kueues_message():
    msg = "couldn't assign flavors to pod set main: insufficient unused quota for amd.com/gpu in flavor f, 1 more needed"
    pods = [pod("a", ready=True), pod("b", gated=True)]
    wls = {"b": workload("b", QuotaReserved={"status": "False", "reason": "Pending", "message": msg})}
    q = quota(pods, lambda p: wls.get(p["metadata"]["name"]))
    assert (q.status, q.reason, q.waiting) == ("False", "Pending", 1)
    assert msg in q.message
    # no Workload yet: still waiting, and says so
    q = quota([pod("c", gated=True)], lambda p: None)
    assert q.status == "False" and "Workload" in q.message


def test_all_admitted_is_true_and_preemption_is_reported():
    evicted = {"status": "True", "reason": "Preempted", "message": "Preempted to accommodate a workload (UID: x)"}
    pods = [pod("a", ready=True), pod("b", deleting=True)]
    wls = {"b": workload("b", uid="wb", Evicted=evicted)}
    q = quota(pods, lambda p: wls.get(p["metadata"]["name"]))
    assert (q.status, q.reason) == ("True", "QuotaReserved")
    assert q.preempted == (("wb", evicted["message"]),)


def test_pod_kueue_did_not_take_is_reported_not_called_admitted():
    q = quota([pod("a", ready=True), pod("b", ready=True, managed=False)], lambda p: None)
    assert (q.status, q.reason) == ("Unknown", "NotManagedByKueue")
    assert "integrations.frameworks" in q.message
    assert OPERATOR_GATE in q.message  # it stays gated, not running outside quota
    # a Pod Kueue does not take never runs (the operator's gate holds it): that is what users need to know first
    assert quota([pod("a", managed=False), pod("b", gated=True)], lambda p: None).status == "Unknown"
    assert quota([pod("a"), pod("b", gated=True)], lambda p: None).status == "False"


def test_gpu_pods_are_told_apart():
    def p(res: dict) -> dict:
        return {"spec": {"containers": [{"name": "c", "resources": res}]}}

    assert requests_gpus(p({"limits": {"amd.com/gpu": "1"}})) and requests_gpus(p({"requests": {"nvidia.com/gpu": 2}}))
    assert not requests_gpus(p({"limits": {"cpu": "1", "nvidia.com/gpu": "0"}})) and not requests_gpus(p({}))


def test_replicas_count_only_admitted_ready_pods():
    gated_but_ready = pod("g", gated=True, ready=True)  # cannot happen in a cluster; never counted
    counts = replica_counts([pod("a", ready=True), gated_but_ready, pod("c")])
    assert counts == {"all": 3, "ready": 1}


def test_quota_condition_set_and_removed():
    m = model()
    q = quota([pod("a", ready=True), pod("b", gated=True)], lambda p: None)
    st = desired_status(m, pods=[pod("a", ready=True), pod("b", gated=True)], config_error=None, cache_loaded=None, quota=q)
    conds = {c["type"]: c for c in st["conditions"]}
    assert conds[QUOTA_RESERVED]["status"] == "False" and conds[QUOTA_RESERVED]["reason"] == "Pending"
    assert conds["Ready"]["reason"] == "QuotaPending" and st["replicas"] == {"all": 2, "ready": 1}
    m["status"] = st
    st2 = desired_status(m, pods=[pod("a", ready=True), pod("b", ready=True)], config_error=None, cache_loaded=None, quota=None)
    assert QUOTA_RESERVED not in {c["type"] for c in st2["conditions"]}
    assert {c["type"]: c for c in st2["conditions"]}["Ready"]["status"] == "True"


# ------------------------------------------------------------ InferencePool
def test_pool_selects_the_model_pods_on_the_server_port_and_is_owned():
    m = model()
    m["apiVersion"], m["kind"] = "kubeai.org/v1", "Model"
    p = desired_pool(m)
    assert p["apiVersion"] == "inference.networking.k8s.io/v1" and p["kind"] == "InferencePool"
    assert (p["metadata"]["name"], p["metadata"]["namespace"]) == ("m", "ns")
    assert p["spec"]["selector"] == {"matchLabels": {"app": "model", "model": "m"}}
    assert p["spec"]["targetPorts"] == [{"number": 8000}]
    assert p["spec"]["endpointPickerRef"]["name"] == "m-epp" and p["spec"]["endpointPickerRef"]["port"] == {"number": 9002}
    ref = p["metadata"]["ownerReferences"][0]
    assert ref["uid"] == "u-1" and ref["controller"] is True and ref["kind"] == "Model"
    # the selector matches what the server Pods carry
    labels = build_pod(m, parse_config(None)).pod["metadata"]["labels"]
    assert all(labels[k] == v for k, v in p["spec"]["selector"]["matchLabels"].items())


def test_picker_annotation_and_its_errors():
    m = model(annotations={ANNOTATION_PICKER: "shared-epp:9100"})
    m["apiVersion"], m["kind"] = "kubeai.org/v1", "Model"
    assert desired_pool(m)["spec"]["endpointPickerRef"]["name"] == "shared-epp"
    assert desired_pool(m)["spec"]["endpointPickerRef"]["port"] == {"number": 9100}
    for bad in ("Bad_Name", "epp:0", "epp:70000", "epp:", "a" * 64):
        m["metadata"]["annotations"][ANNOTATION_PICKER] = bad
        with pytest.raises(PickerError, match=ANNOTATION_PICKER):
            desired_pool(m)


def test_pool_drift_is_detected():
    m = model()
    m["apiVersion"], m["kind"] = "kubeai.org/v1", "Model"
    want = desired_pool(m)
    have = {**want, "spec": {**want["spec"], "endpointPickerRef": {**want["spec"]["endpointPickerRef"], "failureMode": "FailClose"}}}
    assert up_to_date(have, want)
    wider = {**want, "spec": {**want["spec"], "selector": {"matchLabels": {"app": "model"}}}}
    assert not up_to_date(wider, want)
    assert not up_to_date({**want, "spec": {**want["spec"], "targetPorts": [{"number": 9000}]}}, want)


def test_pending_means_kueue_found_no_quota():
    from kaiwo_ctrl.serving.model.admission import pending

    assert pending(workload("p", QuotaReserved={"status": "False", "reason": "Pending", "message": "no quota"}))
    assert not pending(workload("p", QuotaReserved={"status": "True", "reason": "QuotaReserved"}))
    assert not pending(workload("p")) and not pending(None)


def test_render_shows_the_queue_a_model_names():
    import io

    from kaiwo_ctrl.serving.model.render import render

    doc = {"apiVersion": "kubeai.org/v1", "kind": "Model",
           "metadata": {"name": "m", "labels": {LABEL_QUEUE_NAME: "team-a", LABEL_PRIORITY_CLASS: "low"}},
           "spec": {"url": "hf://org/repo", "engine": "VLLM", "features": [], "resourceProfile": "cpu:1", "replicas": 1}}
    pods = [o for o in render([doc], parse_config(None), note=io.StringIO()) if o["kind"] == "Pod"]
    assert pods and pods[0]["metadata"]["labels"][LABEL_QUEUE_NAME] == "team-a"
    assert pods[0]["metadata"]["labels"][LABEL_PRIORITY_CLASS] == "low"
