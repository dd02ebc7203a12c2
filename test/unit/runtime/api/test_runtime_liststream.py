"""A list response decoded item by item as it arrives (runtime/api/liststream.py)."""

from __future__ import annotations

import random

import orjson
import pytest

from kaiwo_ctrl.runtime.api.liststream import ListSplitter, MalformedList

MANAGED = [{"manager": "m", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:x]": {}}}}]


def typed_list(items: list[dict], rv: str = "7") -> bytes:
    """The layout of a built-in kind's list: the list's metadata first."""
    return orjson.dumps({"kind": "ConfigMapList", "apiVersion": "v1", "metadata": {"resourceVersion": rv}, "items": items})


def custom_list(items: list[dict], rv: str = "7") -> bytes:
    """The layout of a custom resource's list: keys sorted, so metadata after the items."""
    return orjson.dumps(
        {"apiVersion": "x.io/v1", "items": items, "kind": "ThingList", "metadata": {"continue": "", "resourceVersion": rv}},
        option=orjson.OPT_SORT_KEYS,
    )


def cm(i: int, **extra: object) -> dict:
    return {"metadata": {"name": f"cm-{i}", "managedFields": MANAGED}, "data": {"n": str(i), "s": "},{\"metadata\":{" * (i % 3)}, **extra}


def thing(i: int) -> dict:
    return {"apiVersion": "x.io/v1", "kind": "Thing", "metadata": {"name": f"t-{i}"}, "spec": {"i": i, "text": "]" * (i % 4)}}


def split(body: bytes, sizes: list[int], drop: bool = False) -> tuple[list[dict], dict, int]:
    """Feed ``body`` in chunks of the given sizes (cycled); the items, the list's own fields,
    and how many items came out before the end of the body."""
    s, out, i, k, early = ListSplitter(), [], 0, 0, 0
    while i < len(body):
        n = sizes[k % len(sizes)]
        out += list(s.decode(s.feed(body[i : i + n]), drop))
        i, k = i + n, k + 1
    early = len(out)
    last, envelope = s.finish()
    out += list(s.decode(last, drop))
    s.check_complete()
    return out, envelope, early


@pytest.mark.parametrize("layout", [typed_list, custom_list])
@pytest.mark.parametrize("sizes", [[1], [7, 300], [65536], [10**9]])
def test_items_and_the_lists_own_fields_in_any_chunking(layout, sizes):
    items = [cm(i) for i in range(40)] if layout is typed_list else [thing(i) for i in range(40)]
    out, envelope, early = split(layout(items, rv="123"), sizes)
    assert out == items
    assert envelope["metadata"]["resourceVersion"] == "123" and "items" not in envelope
    if sizes != [10**9]:
        assert early >= 38  # streamed: all but the last came out before the body ended


def test_managed_fields_dropped_when_asked():
    items = [cm(i) for i in range(5)]
    out, _, _ = split(typed_list(items), [100], drop=True)
    assert [o["metadata"] for o in out] == [{"name": f"cm-{i}"} for i in range(5)]
    assert [o["data"] for o in out] == [i["data"] for i in items]


def test_a_separator_inside_an_item_is_joined_back():
    # an item holding an array of objects that open like list items: the cut there is
    # not JSON on its own, so the pieces are joined and decoded again
    inner = [{"metadata": {"name": "inner-a"}}, {"metadata": {"name": "inner-b"}}]
    items = [cm(0), cm(1, nested=inner), cm(2, nested=inner + inner), cm(3)]
    for sizes in ([1], [13], [4096]):
        out, _, _ = split(typed_list(items), sizes)
        assert out == items


def test_empty_lists():
    for body in (typed_list([]), custom_list([])):
        out, envelope, _ = split(body, [3])
        assert out == [] and envelope["metadata"]["resourceVersion"] == "7"


def test_other_layouts_are_decoded_whole():
    items = [cm(i) for i in range(3)]
    indented = orjson.dumps({"kind": "ConfigMapList", "metadata": {"resourceVersion": "9"}, "items": items}, option=orjson.OPT_INDENT_2)
    out, envelope, early = split(indented, [50])
    assert out == items and envelope["metadata"]["resourceVersion"] == "9" and early == 0
    out, envelope, _ = split(b'{"kind":"ConfigMapList","metadata":{"resourceVersion":"4"},"items":null}', [5])
    assert out == [] and envelope["metadata"]["resourceVersion"] == "4"
    # items without metadata near their start
    odd = [{"spec": {"pad": "x" * 2000}, "metadata": {"name": "late"}}]
    out, _, _ = split(typed_list(odd), [64])
    assert out == odd


@pytest.mark.parametrize("cut", [1, 30, 200, -40, -2])
def test_a_truncated_or_broken_body_is_refused(cut):
    body = typed_list([cm(i) for i in range(5)])
    with pytest.raises(MalformedList):
        split(body[:cut], [16])


def test_a_broken_item_is_refused():
    body = typed_list([cm(0), cm(1)]).replace(b'"n":"1"', b'"n":1"')
    with pytest.raises(MalformedList):
        split(body, [16])


def test_random_chunkings_agree_with_a_whole_decode():
    rng = random.Random(5)
    items = [cm(i, nested=[{"metadata": {"name": "x"}}] * (i % 2)) for i in range(60)]
    body = typed_list(items)
    for _ in range(20):
        sizes = [rng.randint(1, 5000) for _ in range(8)]
        assert split(body, sizes)[0] == orjson.loads(body)["items"]


def test_large_items_in_small_chunks():
    # items far larger than the chunks: each is kept as the chunks that came, joined once
    items = [cm(i, big="y" * 300_000) for i in range(3)]
    things = [dict(thing(i), spec={"big": "y" * 300_000}) for i in range(3)]
    for layout, xs in ((typed_list, items), (custom_list, things)):
        out, envelope, early = split(layout(xs), [1024, 4096])
        assert out == xs and early == 2
    indented = orjson.dumps({"kind": "ConfigMapList", "metadata": {"resourceVersion": "3"}, "items": items}, option=orjson.OPT_INDENT_2)
    assert split(indented, [1024])[0] == items
