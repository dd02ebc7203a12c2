"""RFC 1123 normalisation, names with suffix, label sets."""

import pytest

from kaiwo_ctrl.workloads.base.labels import inherited_labels, object_labels, queue_labels, system_labels
from kaiwo_ctrl.workloads.base.naming import name_with_suffix, rfc1123_normalize


@pytest.mark.parametrize(
    "value,expected",
    [
        ("test@amd.com", "test-amd.com"),
        ("Test User", "test-user"),
        ("--a..b--", "a-b"),
        ("a.-b", "a-b"),
        ("", ""),
        (None, ""),
        ("ÄÖÜ@x", "x"),
        ("a" * 63, "a" * 63),
    ],
)
def test_rfc1123_normalize(value, expected):
    assert rfc1123_normalize(value) == expected


@pytest.mark.parametrize("value", ["a" * 70, "a" * 62 + "-bcd", "a" * 62 + ".bcd"])
def test_rfc1123_normalize_cut_values_end_in_a_hash(value):
    out = rfc1123_normalize(value)
    assert len(out) <= 63 and out.startswith("a" * 54) and out != rfc1123_normalize(value + "x")


def test_name_with_suffix():
    assert name_with_suffix("myjob", "data") == "myjob-data"
    long = "x" * 63
    # the reference cut this to the bare name, so the download Job took the main Job's name
    assert name_with_suffix(long, "download") != long
    assert name_with_suffix(long, "download").endswith("-download")


def test_system_labels():
    assert system_labels("KaiwoJob", "j", "test@amd.com", "uid-1") == {
        "kaiwo.silogen.ai/user": "test-amd.com",
        "kaiwo.silogen.ai/name": "j",
        "kaiwo.silogen.ai/type": "job",
        "kaiwo.silogen.ai/run-id": "uid-1",
    }
    assert system_labels("KaiwoService", "s", None, None)["kaiwo.silogen.ai/type"] == "service"
    assert system_labels("KaiwoService", "s", None, None)["kaiwo.silogen.ai/user"] == ""


def test_object_labels_drop_queue_keep_managed_and_system_wins():
    meta = {
        "name": "j",
        "uid": "u",
        "labels": {
            "kueue.x-k8s.io/queue-name": "other",
            "kaiwo.silogen.ai/managed": "true",
            "team": "a",
            "kaiwo.silogen.ai/name": "spoofed",
        },
    }
    labels = object_labels("KaiwoJob", meta, {"user": "u@x"})
    assert "kueue.x-k8s.io/queue-name" not in labels
    assert labels["kaiwo.silogen.ai/managed"] == "true"
    assert labels["team"] == "a"
    assert labels["kaiwo.silogen.ai/name"] == "j"
    assert inherited_labels(None) == {}


def test_queue_labels():
    assert queue_labels("q", None) == {"kueue.x-k8s.io/queue-name": "q"}
    assert queue_labels("q", "high") == {"kueue.x-k8s.io/queue-name": "q", "kueue.x-k8s.io/priority-class": "high"}
