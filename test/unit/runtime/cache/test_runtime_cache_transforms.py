"""Cache transforms: one per informer, declared once, independent of the order of requests."""

import pytest

from kaiwo_ctrl.runtime.cache.cache import Cache
from kaiwo_ctrl.runtime.cache.informer import strip_managed_fields
from kaiwo_ctrl.runtime.api.resources import CONFIGMAPS, PODS


def keep_name(obj):
    return {"metadata": {"name": obj["metadata"]["name"]}}


def keep_labels(obj):
    return {"metadata": {"labels": obj["metadata"].get("labels")}}


def test_informers_of_one_resource_keep_their_own_transform():
    cache = Cache(client=None)
    a = cache.informer(PODS, label_selector="a", transform=keep_name)
    b = cache.informer(PODS, label_selector="b", transform=keep_labels)
    assert a.transform is keep_name and b.transform is keep_labels
    assert cache.informer(CONFIGMAPS).transform is strip_managed_fields


@pytest.mark.parametrize("declared_first", [True, False])
def test_a_reader_without_a_transform_gets_the_declared_one_whatever_the_order(declared_first):
    cache = Cache(client=None)
    if declared_first:
        cache.informer(PODS, label_selector="app=model", transform=keep_name)
        inf = cache.informer(PODS, label_selector="app=model")
    else:
        inf = cache.informer(PODS, label_selector="app=model")
        cache.informer(PODS, label_selector="app=model", transform=keep_name)
    assert inf.transform is keep_name


def test_resource_default_applies_to_informers_without_their_own():
    cache = Cache(client=None)
    own = cache.informer(PODS, label_selector="x", transform=keep_labels)
    plain = cache.informer(PODS, namespace="ns")
    cache.declare_transform(PODS, keep_name)
    assert plain.transform is keep_name and own.transform is keep_labels
    assert cache.informer(PODS, namespace="other").transform is keep_name


def test_a_second_different_transform_for_one_informer_is_refused():
    cache = Cache(client=None)
    cache.informer(PODS, label_selector="x", transform=keep_name)
    cache.informer(PODS, label_selector="x", transform=keep_name)  # the same one again is fine
    with pytest.raises(ValueError, match="a different transform"):
        cache.informer(PODS, label_selector="x", transform=keep_labels)
    cache.declare_transform(CONFIGMAPS, keep_name)
    with pytest.raises(ValueError, match="a different transform"):
        cache.declare_transform(CONFIGMAPS, keep_labels)
