"""The one priority-class rule of Models, KaiwoJobs and KaiwoServices: system-*
only in system namespaces; else the namespace's annotation, else KaiwoConfig's
list, else any class."""

from __future__ import annotations

from kaiwo_ctrl.settings.priority import ANNOTATION, PriorityRules, allowed_list, named_classes, refusal

SYSTEM = frozenset({"kube-system", "kaiwo-system"})


def test_system_classes_only_in_system_namespaces_whatever_the_lists_say():
    assert refusal("system-node-critical", "team-a", frozenset({"*"}), SYSTEM) is not None
    assert refusal("system-node-critical", "team-a", frozenset({"system-node-critical"}), SYSTEM) is not None
    assert refusal("system-cluster-critical", "kube-system", None, SYSTEM) is None


def test_the_annotation_wins_over_kaiwoconfig_and_unset_allows_any():
    assert allowed_list("low, normal", ("high",)) == {"low", "normal"}
    assert allowed_list(None, ("high",)) == {"high"}
    assert allowed_list(None, None) is None
    assert allowed_list("", ("high",)) == frozenset()  # empty annotation: none
    assert refusal("high", "a", None, SYSTEM) is None
    assert refusal("high", "a", frozenset({"*"}), SYSTEM) is None
    why = refusal("high", "a", frozenset({"low"}), SYSTEM)
    assert why is not None and "'high'" in why and "low" in why


def test_every_place_a_class_is_named_is_found():
    model = {"metadata": {"namespace": "a", "labels": {"kueue.x-k8s.io/priority-class": "wpc"}},
             "spec": {"priorityClassName": "pc"}}
    assert list(named_classes(model)) == [("metadata.labels[kueue.x-k8s.io/priority-class]", "wpc"),
                                          ("spec.priorityClassName", "pc")]
    job = {"metadata": {"namespace": "a"}, "spec": {"priorityClass": "p", "job": {"spec": {"template": {
        "metadata": {"labels": {"kueue.x-k8s.io/priority-class": "q"}},
        "spec": {"priorityClassName": "system-node-critical", "containers": [{"name": "c"}]}}}}}}
    assert list(named_classes(job)) == [
        ("spec.priorityClass", "p"),
        ("spec.job.spec.template.metadata.labels[kueue.x-k8s.io/priority-class]", "q"),
        ("spec.job.spec.template.spec.priorityClassName", "system-node-critical"),
    ]
    rules = PriorityRules(annotations={"a": "p,q"}, system=SYSTEM)
    assert rules.check(job) == ("spec.job.spec.template.spec.priorityClassName",
                                "priority class 'system-node-critical' is reserved for system namespaces")
    assert rules.check({"metadata": {"namespace": "b"}, "spec": {"priorityClass": "x"}}) is None
    assert ANNOTATION == "kaiwo.silogen.ai/priority-classes"
