import pytest

from kaiwo_ctrl.runtime.objects.apply import contains, differing_paths


@pytest.mark.parametrize(
    "actual,desired,expected",
    [
        ({"a": 1, "b": 2}, {"a": 1}, True),  # server-added fields are ignored
        ({"a": 1}, {"a": 2}, False),
        ({"r": {"cpu": "1"}}, {"r": {"cpu": "1000m"}}, True),  # quantities by value
        ({"r": {"memory": "1Gi"}}, {"r": {"memory": "1073741824"}}, True),
        ({"r": {"memory": "1Gi"}}, {"r": {"memory": "1G"}}, False),
        ({"l": [1, 2]}, {"l": [1, 2]}, True),
        ({"l": [1, 2]}, {"l": [1]}, False),  # lists must match in length
        ({"l": [{"a": 1, "x": 0}]}, {"l": [{"a": 1}]}, True),
        ({}, {"a": {}}, True),  # an empty desired map needs nothing
        ({}, {"a": None}, True),
        ({"f": True}, {"f": 1}, False),  # booleans are not numbers
        ({"s": "abc"}, {"s": "abd"}, False),
    ],
)
def test_contains(actual, desired, expected):
    assert contains(actual, desired) is expected


def test_differing_paths_names_fields():
    actual = {"spec": {"template": {"spec": {"containers": [{"image": "a", "name": "m"}]}}, "replicas": 1}}
    desired = {"spec": {"template": {"spec": {"containers": [{"image": "b", "name": "m"}]}}, "replicas": 1, "x": 1}}
    # one diff, one list rule: named items are matched (and named) by name
    assert differing_paths(actual, desired) == ["spec.template.spec.containers[m].image", "spec.x"]


@pytest.mark.parametrize(
    "path,expected",
    [
        ("/api/v1/nodes", "nodes"),
        ("/api/v1/nodes/n1", "nodes"),
        ("/api/v1/nodes/n1/status", "nodes/status"),
        ("/api/v1/namespaces/ns/configmaps/x", "configmaps"),
        ("/api/v1/namespaces/ns", "namespaces"),
        ("/api/v1/namespaces", "namespaces"),
        ("/apis/batch/v1/namespaces/ns/jobs", "jobs"),
        ("/apis/kaiwo.silogen.ai/v1alpha1/namespaces/ns/kaiwojobs/a/status", "kaiwojobs/status"),
        ("/apis/coordination.k8s.io/v1/namespaces/ns/leases/l?x=1", "leases"),
        ("/apis/kueue.x-k8s.io/v1beta2/clusterqueues/kaiwo", "clusterqueues"),
        ("/version", ""),
    ],
)
def test_resource_of(path, expected):
    from kaiwo_ctrl.runtime.api.apitypes import resource_of

    assert resource_of(path) == expected
