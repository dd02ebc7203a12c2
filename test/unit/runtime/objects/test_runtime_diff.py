"""The one object diff (runtime/objects/diff.py): list rule and schema-aware quantities."""

import pytest

from kaiwo_ctrl.runtime.objects.diff import QUANTITY_KEYS, contains, differences


def env(*pairs):
    return [{"name": n, "value": v} for n, v in pairs]


@pytest.mark.parametrize(
    "existing,desired,expected",
    [
        # quantities only where the schema says quantity
        ({"env": env(("N", "1000"))}, {"env": env(("N", "1k"))}, ["env[N].value"]),
        ({"resources": {"limits": {"cpu": "1"}}}, {"resources": {"limits": {"cpu": "1000m"}}}, []),
        ({"resources": {"requests": {"amd.com/gpu": "8"}}}, {"resources": {"requests": {"amd.com/gpu": 8}}}, []),
        ({"emptyDir": {"sizeLimit": "1Gi"}}, {"emptyDir": {"sizeLimit": "1024Mi"}}, []),
        ({"labels": {"a": "1000"}}, {"labels": {"a": "1k"}}, ["labels.a"]),
        # named lists: by name, in order, removals are differences
        ({"env": env(("A", "1"), ("B", "2"))}, {"env": env(("B", "2"), ("A", "1"))}, ["env"]),
        ({"env": env(("A", "1"), ("B", "2"))}, {"env": env(("A", "1"))}, ["env[B]"]),
        ({"env": env(("A", "1"))}, {"env": env(("A", "1"), ("C", "3"))}, ["env[C]"]),
        # duplicate names: the last of a name counts on both sides, no permanent difference
        ({"env": env(("A", "1"), ("A", "2"))}, {"env": env(("A", "1"), ("A", "2"))}, []),
        # unnamed mappings: each desired item contained in some existing one
        ({"t": [{"key": "x"}, {"key": "y", "op": "Exists"}]}, {"t": [{"key": "y"}]}, []),
        ({"t": [{"key": "x"}]}, {"t": [{"key": "y"}]}, ["t[0]"]),
        # scalars lists: same length, in order
        ({"command": ["a", "b"]}, {"command": ["b", "a"]}, ["command"]),
        ({"f": True}, {"f": 1}, ["f"]),
    ],
)
def test_differences(existing, desired, expected):
    assert differences(existing, desired) == expected
    assert contains(existing, desired) is (expected == [])


def test_quantity_keys_are_the_callers():
    """The runtime knows the core kinds' quantity keys only; another API's
    (Kueue's quota fields) are compared as quantities when the caller says so."""
    stored, wanted = {"nominalQuota": "1000m", "name": "cpu"}, {"nominalQuota": 1, "name": "cpu"}
    assert differences(stored, wanted) == ["nominalQuota"]
    keys = QUANTITY_KEYS | {"nominalQuota"}
    assert differences(stored, wanted, quantity_keys=keys) == []
    assert contains(stored, wanted, quantity_keys=keys)
    assert not contains({"nominalQuota": "2"}, {"nominalQuota": 1}, quantity_keys=keys)
