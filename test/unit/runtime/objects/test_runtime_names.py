"""The one name-derivation rule: every suffix at every base length 1..253."""

import itertools

import pytest

from kaiwo_ctrl.runtime.objects.names import (
    HASH_LENGTH,
    derived_name,
    is_dns1123_label,
    is_dns1123_subdomain,
    is_label_value,
    label_value,
)
from kaiwo_ctrl.workloads.base.naming import name_label, name_with_suffix, volume_name

CHILD_SUFFIXES = ("data", "hf", "download")
LENGTHS = range(1, 254)


def _base(n: int, fill: str = "a") -> str:
    # a valid DNS subdomain of length n, with a dot in it when long enough
    if n >= 5:
        return (fill * (n - 3)) + ".b" + fill
    return fill * n


@pytest.mark.parametrize("suffix", CHILD_SUFFIXES)
def test_child_names_are_valid_distinct_and_keep_the_suffix(suffix):
    for n in LENGTHS:
        base = _base(n)
        name = name_with_suffix(base, suffix)
        assert is_dns1123_subdomain(name) and len(name) <= 63, (n, name)
        assert name.endswith(f"-{suffix}"), (n, name)
        assert name != base
        assert name == name_with_suffix(base, suffix)  # deterministic
        if len(base) + 1 + len(suffix) <= 63:
            assert name == f"{base}-{suffix}"  # short names read exactly as before
    # all three children of one object differ, at every length
    for n in LENGTHS:
        names = {name_with_suffix(_base(n), s) for s in CHILD_SUFFIXES}
        assert len(names) == len(CHILD_SUFFIXES), n


def test_long_names_sharing_a_prefix_do_not_collide():
    seen = {}
    for n in range(55, 254):
        for fill in "ab":
            base = _base(n, fill)
            for suffix in CHILD_SUFFIXES:
                name = name_with_suffix(base, suffix)
                assert seen.setdefault(name, (base, suffix)) == (base, suffix)
    # same first 200 characters, different tails
    a, b = "x" * 200 + "a", "x" * 200 + "b"
    assert name_with_suffix(a, "data") != name_with_suffix(b, "data")


@pytest.mark.parametrize("n", LENGTHS)
def test_secret_volume_names_for_every_length(n):
    for secret in (_base(n), "s" * n, ("a." * n)[:n].strip(".") or "a"):
        vol = volume_name("secret", secret)
        assert is_dns1123_label(vol), (secret, vol)
        assert vol.startswith("secret-")
        if is_dns1123_label(f"secret-{secret}"):
            assert vol == f"secret-{secret}"


def test_secret_volume_names_with_dots_differ_from_their_dashed_twin():
    assert volume_name("secret", "a.b") != volume_name("secret", "a-b")
    assert volume_name("secret", "a-b") == "secret-a-b"


@pytest.mark.parametrize("n", LENGTHS)
def test_label_values_for_every_length(n):
    value = _base(n)
    out = name_label(value)
    assert is_label_value(out), (n, out)
    if n <= 63:
        assert out == value
    else:
        assert len(out) == 63 and out[-HASH_LENGTH - 1] == "-"
        assert out != name_label(value[:-1] + "z")


@pytest.mark.parametrize(
    "value", ["", "ok", "Has Space", "ümlaut", "-lead", "trail.", "a" * 64, "x" * 300, "..", "_x_"]
)
def test_label_value_is_always_valid(value):
    assert is_label_value(label_value(value))


@pytest.mark.parametrize(
    "base,suffix,prefix,dots",
    list(itertools.product(["A", "a_b", "a..b", "-a-", "a" * 300, "é" * 70, "x.-y"], ["", "data"], ["", "secret"], [False, True])),
)
def test_derived_name_normalises_anything(base, suffix, prefix, dots):
    name = derived_name(base, suffix, prefix=prefix, dots=dots)
    assert (is_dns1123_subdomain if dots else is_dns1123_label)(name) and len(name) <= 63, name
    if suffix:
        assert name.endswith("-" + suffix)
    if prefix:
        assert name.startswith(prefix + "-")


def test_derived_name_with_a_subdomain_limit():
    name = derived_name("a" * 300, "svc", max_length=253, dots=True)
    assert len(name) == 253 and name.endswith("-svc") and is_dns1123_subdomain(name)
