"""render() (golden file) and immutable_drift()."""

import copy

import pytest
import yaml

from kaiwo_ctrl.workloads.observe.drift import immutable_drift, is_controlled_by
from kaiwo_ctrl.workloads.reconcile.render import RenderError, render
from support import UNIT_FIXTURES

FIXTURES = UNIT_FIXTURES / "workloads"


def load_all(name):
    return [d for d in yaml.safe_load_all((FIXTURES / name).read_text()) if d is not None]


def test_render_matches_golden_file():
    docs = load_all("render_input.yaml")
    nodes = yaml.safe_load((FIXTURES / "nodes.yaml").read_text())
    out = render(docs, nodes=nodes, config={"ray": {"headPodMemory": "1Gi"}})
    assert out == load_all("render_expected.yaml")


def test_render_fake_uid_default_namespace_and_skips_other_kinds():
    out = render(load_all("render_input.yaml"), nodes=None)
    kinds = [(c["kind"], c["metadata"]["name"], c["metadata"]["namespace"]) for c in out]
    assert kinds == [
        ("Job", "kaiwojob-job-resource-scheduling", "kaiwo-test"),
        ("RayJob", "ray-job", "kaiwo-test"),
        ("PersistentVolumeClaim", "svc-data", "default"),
        ("ConfigMap", "svc-download", "default"),
        ("Job", "svc-download", "default"),
        ("Deployment", "svc", "default"),
    ]
    assert all(c["metadata"]["ownerReferences"][0]["uid"] == "00000000-0000-0000-0000-000000000000" for c in out)
    # nodes unknown: GPUs are not split across replicas
    rj = out[1]["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    assert rj["replicas"] == 1
    assert rj["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "14"


def test_render_keeps_uid_when_given_and_reports_spec_errors():
    doc = {"kind": "KaiwoJob", "metadata": {"name": "x", "uid": "real"}, "spec": {"gpusPerReplica": 1}}
    with pytest.raises(RenderError) as err:
        render([doc])
    assert err.value.error.field == "spec.gpusPerReplica" and "KaiwoJob/x" in str(err.value)
    doc["spec"] = {}
    assert render([doc])[0]["metadata"]["ownerReferences"][0]["uid"] == "real"


# --------------------------------------------------------------------------- immutable drift

JOB = render([{"kind": "KaiwoJob", "metadata": {"name": "j", "namespace": "n"}, "spec": {"image": "a", "entrypoint": "x"}}])[0]


def server_view(obj):
    """What the API server returns: defaults and other controllers' additions on top."""
    live = copy.deepcopy(obj)
    live["metadata"]["resourceVersion"] = "7"
    tmpl = live["spec"]["template"]
    tmpl["spec"]["terminationGracePeriodSeconds"] = 30
    tmpl["spec"]["nodeSelector"] = {"kaiwo/nodepool": "x"}  # Kueue injects the flavor on admission
    tmpl["spec"]["containers"][0]["terminationMessagePath"] = "/dev/termination-log"
    tmpl["spec"]["containers"][0]["resources"]["limits"]["memory"] = "16384Mi"
    live["spec"]["suspend"] = False
    live["spec"]["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": "u"}}
    return live


def test_no_drift_against_server_defaults_and_equal_quantities():
    assert immutable_drift("Job", server_view(JOB), JOB) == []


def test_job_template_changes_are_reported():
    desired = copy.deepcopy(JOB)
    desired["spec"]["template"]["spec"]["containers"][0]["image"] = "b"
    desired["spec"]["template"]["spec"]["containers"][0]["env"].append({"name": "X", "value": "1"})
    desired["spec"]["ttlSecondsAfterFinished"] = 10  # mutable: not reported
    assert immutable_drift("Job", server_view(JOB), desired) == [
        "spec.template.spec.containers[workload].image",
        "spec.template.spec.containers[workload].env[X]",
    ]


def test_pvc_drift():
    pvc = {"spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "a", "resources": {"requests": {"storage": "10Gi"}}}}
    grow = copy.deepcopy(pvc)
    grow["spec"]["resources"]["requests"]["storage"] = "20Gi"
    assert immutable_drift("PersistentVolumeClaim", pvc, grow) == []
    shrink = copy.deepcopy(pvc)
    shrink["spec"]["resources"]["requests"]["storage"] = "5Gi"
    shrink["spec"]["storageClassName"] = "b"
    assert immutable_drift("PersistentVolumeClaim", pvc, shrink) == [
        "spec.storageClassName", "spec.resources.requests.storage"]


def test_deployment_only_selector_is_immutable_and_unknown_kinds_have_none():
    dep = {"spec": {"selector": {"matchLabels": {"app": "a"}}, "replicas": 1}}
    changed = {"spec": {"selector": {"matchLabels": {"app": "b"}}, "replicas": 5}}
    assert immutable_drift("Deployment", dep, changed) == ["spec.selector.matchLabels.app"]
    assert immutable_drift("ConfigMap", {"data": {"a": "1"}}, {"data": {"a": "2"}}) == []


def test_appwrapper_components_and_rayjob_entrypoint():
    assert immutable_drift("AppWrapper", {"spec": {"components": [{"template": {"a": 1}}]}},
                           {"spec": {"components": [{"template": {"a": 2}}]}}) == ["spec.components[0]"]
    assert immutable_drift("RayJob", {"spec": {"entrypoint": "a"}}, {"spec": {"entrypoint": "b"}}) == ["spec.entrypoint"]


def test_tolerations_added_by_kueue_are_not_drift_but_removed_ones_are():
    tol = {"key": "kaiwo.silogen.ai/gpu", "operator": "Exists", "effect": "NoSchedule"}
    desired = copy.deepcopy(JOB)
    desired["spec"]["template"]["spec"]["tolerations"] = [tol]
    live = server_view(desired)
    live["spec"]["template"]["spec"]["tolerations"] = [{"key": "flavor", "operator": "Exists"}, tol]
    assert immutable_drift("Job", live, desired) == []
    live["spec"]["template"]["spec"]["tolerations"] = [{"key": "flavor", "operator": "Exists"}]
    assert immutable_drift("Job", live, desired) == ["spec.template.spec.tolerations[0]"]


def test_command_order_matters():
    desired = copy.deepcopy(JOB)
    desired["spec"]["template"]["spec"]["containers"][0]["command"] = ["/bin/sh", "-c", "y"]
    assert immutable_drift("Job", server_view(JOB), desired) == ["spec.template.spec.containers[workload].command"]


def test_is_controlled_by():
    assert is_controlled_by(JOB, JOB["metadata"]["ownerReferences"][0]["uid"])
    assert not is_controlled_by(JOB, "other")
    assert not is_controlled_by({"metadata": {"ownerReferences": [{"uid": "u", "controller": False}]}}, "u")
