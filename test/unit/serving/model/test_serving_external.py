"""KubeAI 0.23 ``proxy.mode``: the config key, the headless Service and the ScaleFromZero condition."""

import pytest

from kaiwo_ctrl.serving.model.config import ConfigError, parse_config
from kaiwo_ctrl.serving.model.external import (
    SCALE_FROM_ZERO,
    desired_service,
    relies_on_scale_from_zero,
    scale_from_zero_status,
    service_name,
)


@pytest.mark.parametrize("data,mode", [
    (None, "internal"),
    ({}, "internal"),
    ({"proxy": {}}, "internal"),
    ({"proxy": {"mode": ""}}, "internal"),
    ({"proxy": {"mode": "internal"}}, "internal"),
    ({"proxy": {"mode": "external"}}, "external"),
])
def test_proxy_mode_parsed_with_kubeais_default(data, mode):
    assert parse_config(data).proxy_mode == mode


@pytest.mark.parametrize("data,detail", [
    ({"proxy": {"mode": "External"}}, "must be internal or external"),
    ({"proxy": {"mode": "none"}}, "must be internal or external"),
    ({"proxy": {"mode": 1}}, "must be a string"),
    ({"proxy": "external"}, "must be a mapping"),
])
def test_bad_proxy_mode_names_the_key(data, detail):
    with pytest.raises(ConfigError) as e:
        parse_config(data)
    assert e.value.key in ("proxy.mode", "proxy") and detail in str(e.value)


def model(name="m", uid="12345678-1234-1234-1234-123456789012", **spec):
    return {"metadata": {"name": name, "namespace": "ns", "uid": uid, "generation": 3}, "spec": spec}


def test_headless_service_named_and_shaped_as_kubeai():
    svc = desired_service(model("test-model"))
    assert service_name(model("test-model")) == "test-model-123456"
    assert svc["metadata"] == {"name": "test-model-123456", "namespace": "ns", "labels": {"app": "model", "model": "test-model"}}
    assert svc["spec"] == {
        "clusterIP": "None",
        "selector": {"app": "model", "model": "test-model"},  # the labels our server Pods carry
        "ports": [{"name": "http", "port": 8000, "targetPort": 8000, "protocol": "TCP"}],
    }


@pytest.mark.parametrize("spec,relies", [
    ({}, True),
    ({"minReplicas": 0}, True),
    ({"minReplicas": 0, "maxReplicas": 3}, True),
    ({"minReplicas": 1}, False),
    ({"minReplicas": 0, "autoscalingDisabled": True}, False),
    ({"autoscalingDisabled": True, "replicas": 0}, False),
])
def test_relies_on_scale_from_zero(spec, relies):
    assert relies_on_scale_from_zero(model(**spec)) is relies


def conds(status):
    return {c["type"]: (c["status"], c["reason"]) for c in status.get("conditions") or ()}


def test_scale_from_zero_condition_only_in_external_mode_and_only_while_relied_on():
    m = model(minReplicas=0)
    out = scale_from_zero_status(m, {"conditions": [{"type": "Ready", "status": "True", "reason": "ScaledToZero"}]}, True)
    assert conds(out)[SCALE_FROM_ZERO] == ("False", "NoProxy")
    assert "minReplicas" in next(c for c in out["conditions"] if c["type"] == SCALE_FROM_ZERO)["message"]
    assert conds(out)["Ready"] == ("True", "ScaledToZero")  # other conditions untouched
    # internal mode, or a Model that keeps a replica, loses it
    assert SCALE_FROM_ZERO not in conds(scale_from_zero_status(m, {"conditions": list(out["conditions"])}, False))
    assert SCALE_FROM_ZERO not in conds(scale_from_zero_status(model(minReplicas=1), {"conditions": list(out["conditions"])}, True))
    # internal mode adds nothing to a status without conditions
    assert scale_from_zero_status(m, {}, False) == {}


def test_scale_from_zero_condition_is_stable():
    """Recomputed on an unchanged Model it is the same (no status write per reconcile)."""
    m = model(minReplicas=0)
    first = scale_from_zero_status(m, {}, True)
    import copy

    again = scale_from_zero_status(m, copy.deepcopy(first), True)
    assert again == first
