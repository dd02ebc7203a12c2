import pytest

from kaiwo_ctrl.runtime.apply import contains, differing_paths


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
    assert differing_paths(actual, desired) == ["spec.template.spec.containers[0].image", "spec.x"]
