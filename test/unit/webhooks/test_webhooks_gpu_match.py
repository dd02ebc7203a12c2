"""The enforcement webhooks' match condition names KaiwoConfig's
defaultGpuResourceKey besides the two vendors' keys; a key that is not a
resource name never reaches the CEL text."""

from __future__ import annotations

from kaiwo_ctrl.webhooks.registration import RegistrationOptions, desired_configurations, gpu_keys


def _conditions(opts: RegistrationOptions) -> list[str]:
    mutating, validating = desired_configurations(opts)
    return [c["expression"] for w in mutating["webhooks"] + validating["webhooks"] if w["name"].startswith("enforce-")
            for c in w.get("matchConditions") or ()]


def test_the_configured_gpu_key_is_matched():
    exprs = _conditions(RegistrationOptions(enforce=True, gpu_resource_keys=("intel.com/gpu",)))
    assert len(exprs) == 2
    assert all("'intel.com/gpu' in c.resources.limits" in e and "'intel.com/gpu' in c.resources.requests" in e for e in exprs)
    assert all("'amd.com/gpu' in c.resources.limits" in e and "'nvidia.com/gpu' in c.resources.limits" in e for e in exprs)


def test_default_keys_are_not_repeated_and_bad_keys_are_dropped():
    assert gpu_keys(("amd.com/gpu",)) == ("amd.com/gpu", "nvidia.com/gpu")
    for bad in ("x' in c.resources.limits || true || 'y", "a/b/c", "", "gpu ", "x" * 300):
        assert gpu_keys((bad,)) == ("amd.com/gpu", "nvidia.com/gpu"), bad
    exprs = _conditions(RegistrationOptions(enforce=True, gpu_resource_keys=("x' || true || '",)))
    assert all("true" not in e for e in exprs)
