"""Pods of a KaiwoService map back to it, also when its name is too long for a label value."""

from kaiwo_ctrl.runtime.control.handler import Request
from kaiwo_ctrl.runtime.objects.names import label_value
from kaiwo_ctrl.workloads.kinds.mapping import service_pod_owner
from kaiwo_ctrl.workloads.base.labels import LABEL_NAME, LABEL_RUN_ID, LABEL_TYPE, TYPE_SERVICE


class Services:
    def __init__(self, *objs):
        self.objs = objs

    def get(self, name, namespace):
        return next((o for o in self.objs if o["metadata"]["name"] == name and o["metadata"]["namespace"] == namespace), None)

    def list(self, namespace):
        return [o for o in self.objs if o["metadata"]["namespace"] == namespace]


def svc(name, uid, ns="ns"):
    return {"metadata": {"name": name, "namespace": ns, "uid": uid}}


def pod(name_label, uid, ns="ns"):
    return {"metadata": {"namespace": ns, "labels": {LABEL_TYPE: TYPE_SERVICE, LABEL_NAME: name_label, LABEL_RUN_ID: uid}}}


def test_short_name_maps_by_label():
    fn = service_pod_owner(Services(svc("web", "u1")))
    assert list(fn(pod("web", "u1"))) == [Request("ns", "web")]


def test_long_name_maps_by_run_id():
    long = "a" * 80
    assert label_value(long) != long  # the label holds a cut, hashed value
    fn = service_pod_owner(Services(svc("other", "u0"), svc(long, "u2")))
    assert list(fn(pod(label_value(long), "u2"))) == [Request("ns", long)]


def test_other_pods_map_to_nothing():
    fn = service_pod_owner(Services(svc("web", "u1")))
    assert list(fn({"metadata": {"namespace": "ns", "labels": {}}})) == []
    assert list(fn(pod("gone", "u9"))) == []
