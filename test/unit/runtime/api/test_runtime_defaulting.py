"""Structural defaulting from a CRD schema, as the API server applies it."""

from __future__ import annotations

from kaiwo_ctrl.queues.defaults import ensure_default_queue_config
from kaiwo_ctrl.runtime.api.defaulting import apply_defaults, crd_version_schema

CQ_SPEC = {
    "type": "object",
    "properties": {
        "queueingStrategy": {"type": "string", "default": "BestEffortFIFO"},
        "flavorFungibility": {
            "type": "object",
            "default": {},
            "properties": {
                "whenCanBorrow": {"type": "string", "default": "Borrow"},
                "whenCanPreempt": {"type": "string", "default": "TryNextFlavor"},
            },
        },
        "preemption": {
            "type": "object",
            "default": {},
            "properties": {
                "borrowWithinCohort": {"type": "object", "properties": {"policy": {"type": "string", "default": "Never"}}},
                "reclaimWithinCohort": {"type": "string", "default": "Never"},
                "withinClusterQueue": {"type": "string", "default": "Never"},
            },
        },
    },
}
SPEC = {
    "type": "object",
    "properties": {
        "clusterQueues": {
            "type": "array",
            "items": {"type": "object", "properties": {"name": {"type": "string"}, "spec": CQ_SPEC}},
        },
        "labels": {"type": "object", "additionalProperties": {"type": "object", "properties": {"v": {"type": "string", "default": "x"}}}},
    },
}


def test_defaults_fill_missing_fields_and_recurse_into_them():
    got = apply_defaults({"clusterQueues": [{"name": "a", "spec": {"preemption": {"borrowWithinCohort": {}}}}]}, SPEC)
    spec = got["clusterQueues"][0]["spec"]
    assert spec["queueingStrategy"] == "BestEffortFIFO"
    assert spec["flavorFungibility"] == {"whenCanBorrow": "Borrow", "whenCanPreempt": "TryNextFlavor"}
    assert spec["preemption"] == {"borrowWithinCohort": {"policy": "Never"}, "reclaimWithinCohort": "Never", "withinClusterQueue": "Never"}


def test_set_values_win_and_input_is_not_changed():
    value = {"clusterQueues": [{"name": "a", "spec": {"flavorFungibility": {"whenCanBorrow": "TryNextFlavor"}}}]}
    got = apply_defaults(value, SPEC)
    assert got["clusterQueues"][0]["spec"]["flavorFungibility"]["whenCanBorrow"] == "TryNextFlavor"
    assert "queueingStrategy" not in value["clusterQueues"][0]["spec"]


def test_additional_properties_and_null():
    assert apply_defaults({"labels": {"k": {}}}, SPEC)["labels"] == {"k": {"v": "x"}}
    assert apply_defaults({"clusterQueues": [{"spec": {"queueingStrategy": None}}]}, SPEC)["clusterQueues"][0]["spec"]["queueingStrategy"] == "BestEffortFIFO"
    assert apply_defaults({"a": 1}, None) == {"a": 1}


def test_crd_version_schema():
    crd = {"spec": {"versions": [{"name": "v1", "schema": {"openAPIV3Schema": SPEC}}]}}
    assert crd_version_schema(crd, "v1") is SPEC and crd_version_schema(crd, "v2") is None


def test_queue_config_stored_with_schema_defaults_needs_no_write():
    """A queue config the API server defaulted (Go-style CRD) equals what discovery wants."""
    first = ensure_default_queue_config(None, [], {})
    stored = apply_defaults(first.create["spec"], SPEC)  # what the server keeps
    assert ensure_default_queue_config({"spec": stored}, [], {}).spec is not None  # without the schema: a write
    assert ensure_default_queue_config({"spec": stored}, [], {}, spec_schema=SPEC).spec is None
