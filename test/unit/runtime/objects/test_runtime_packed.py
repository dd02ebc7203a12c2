"""Packed values (runtime/objects/packed.py): lossless, read through get_path and the
object diff, and the packing transform keeps everything else as it was."""

import copy

import pytest

from kaiwo_ctrl.runtime.objects.diff import contains, differences
from kaiwo_ctrl.runtime.cache.informer import strip_managed_fields
from kaiwo_ctrl.runtime.objects.objpath import get_path
from kaiwo_ctrl.runtime.objects.packed import Packed, Packer, packing, unpack, unpacked

TEMPLATE = {"metadata": {"labels": {"a": "1"}}, "spec": {"containers": [{"name": "m", "image": "x", "env": [
    {"name": "A", "value": "1"}]}], "restartPolicy": "Never"}}
OBJ = {"apiVersion": "batch/v1", "kind": "Job",
       "metadata": {"name": "j", "namespace": "ns", "managedFields": [{"manager": "m"}]},
       "spec": {"backoffLimit": 0, "template": TEMPLATE}, "status": {"active": 1}}


@pytest.mark.parametrize("sample", [None, TEMPLATE, {"unrelated": [1, 2, 3]}])
def test_pack_unpack_roundtrip(sample):
    p = Packer(sample)
    for value in (TEMPLATE, {}, [1, "two", None, 3.5, True], "text", None):
        packed = p.pack(value)
        assert type(packed) is Packed
        assert unpack(packed) == value


def test_a_good_dictionary_makes_it_smaller():
    big = {**TEMPLATE, "spec": {**TEMPLATE["spec"], "volumes": [{"name": f"v{i}", "emptyDir": {}} for i in range(3)]}}
    assert len(Packer(big).pack(big)) < len(Packer().pack(big))


def test_unpack_passes_other_values_through():
    assert unpack(TEMPLATE) is TEMPLATE and unpack(b"raw") == b"raw" and unpack(None) is None


def test_transform_packs_the_paths_and_trims_the_rest():
    tf = packing(Packer(TEMPLATE), ("spec.template", "spec.absent", "nothing.here"), strip_managed_fields)
    out = tf(copy.deepcopy(OBJ))
    assert type(out["spec"]["template"]) is Packed
    assert "managedFields" not in out["metadata"]
    assert "absent" not in out["spec"] and "nothing" not in out
    assert unpacked(out) == {**OBJ, "metadata": {"name": "j", "namespace": "ns"}}
    assert tf(copy.deepcopy(OBJ)) == out  # deterministic: equal objects stay equal


def test_a_path_whose_parent_the_trim_drops_is_dropped():
    tf = packing(Packer(), ("spec.template",), lambda o: {"metadata": o["metadata"]})
    assert tf(copy.deepcopy(OBJ)) == {"metadata": OBJ["metadata"]}


def test_readers_see_through_packed_values():
    out = packing(Packer(), ("spec.template",), strip_managed_fields)(copy.deepcopy(OBJ))
    assert get_path(out, "spec.template") == TEMPLATE
    assert get_path(out, "spec.template.spec.restartPolicy") == "Never"
    assert get_path(out, "spec.template.spec.nothing") is None
    want = {"spec": {"template": {"spec": {"containers": [{"name": "m", "image": "y"}]}}}}
    assert contains(out, {"spec": {"template": TEMPLATE}})
    assert differences(out, want) == differences(OBJ, want) == ["spec.template.spec.containers[m].image"]
    assert differences(out["spec"]["template"], want["spec"]["template"], "spec.template") == [
        "spec.template.spec.containers[m].image"]
