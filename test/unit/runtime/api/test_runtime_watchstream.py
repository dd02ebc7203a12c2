"""Watch-stream decoding: line splitting, and managedFields cut from the bytes."""

from __future__ import annotations

import orjson

from kaiwo_ctrl.runtime.api.watchstream import cut_managed_fields, decode_events
from kaiwo_ctrl.runtime.api.wire import LineSplitter

MANAGED = [{"manager": "m", "operation": "Update", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:a": {}}},
                         "f:spec": {"k:{\"name\":\"x]y\"}": {".": {}}, "f:list": {}}}}]


def _event(obj: dict, typ: str = "ADDED") -> bytes:
    return orjson.dumps({"type": typ, "object": obj})


def _decode(*lines: bytes) -> list[dict]:
    return list(decode_events(list(lines), drop_managed_fields=True))


def test_splitter_lines_across_chunks_and_tail():
    s = LineSplitter()
    assert s.feed(b'{"a":1}\n{"b"') == [b'{"a":1}']
    assert s.feed(b":2") == []
    assert s.feed(b"}\n\n  \n{\"c\":3}\n{\"cut") == [b'{"b":2}', b'{"c":3}']
    assert s.feed(b"") == []


def test_managed_fields_are_cut_and_the_rest_is_intact():
    obj = {"kind": "Job", "apiVersion": "batch/v1",
           "metadata": {"name": "a", "labels": {"l": "v]"}, "managedFields": MANAGED, "uid": "u"},
           "spec": {"list": [1, [2]], "s": "]\"["}}
    line = _event(obj)
    assert len(cut_managed_fields(line)) < len(line) - 100
    (ev,) = _decode(line)
    want = {**obj, "metadata": {k: v for k, v in obj["metadata"].items() if k != "managedFields"}}
    assert ev == {"type": "ADDED", "object": want}


def test_custom_resource_key_order_and_last_position():
    # unstructured objects come with sorted keys: managedFields mid-metadata
    cr = {"apiVersion": "x/v1", "kind": "K", "metadata": {"generation": 1, "managedFields": MANAGED, "name": "a"}}
    builtin = {"kind": "Job", "metadata": {"name": "b", "managedFields": MANAGED}, "spec": {}}
    a, b = _decode(_event(cr), _event(builtin))
    assert a["object"]["metadata"] == {"generation": 1, "name": "a"}
    assert b["object"]["metadata"] == {"name": "b"}


def test_an_escaped_backslash_is_not_cut_but_still_dropped():
    managed = [{"manager": "m", "fieldsV1": {"f:spec": {"f:a\\\\": {}}}}]
    line = _event({"metadata": {"name": "a", "managedFields": managed}})
    assert b"\\\\" in line and cut_managed_fields(line) is line
    assert _decode(line)[0]["object"]["metadata"] == {"name": "a"}


def test_a_nested_managed_fields_before_the_own_is_left_alone():
    # a (hypothetical) top-level field sorted before metadata holding a managedFields key
    obj = {"aaa": {"metadata": {"managedFields": [{"manager": "inner"}]}},
           "metadata": {"name": "a", "managedFields": MANAGED}}
    (ev,) = _decode(_event(obj))
    assert ev["object"]["aaa"] == obj["aaa"]
    assert ev["object"]["metadata"] == {"name": "a"}


def test_events_without_objects_and_plain_decoding():
    bookmark = _event({"kind": "Job", "metadata": {"resourceVersion": "5"}}, "BOOKMARK")
    error = orjson.dumps({"type": "ERROR", "object": {"code": 410}})
    odd = orjson.dumps({"type": "ADDED", "object": {"metadata": "not a dict"}})
    assert [e["type"] for e in _decode(bookmark, error, odd)] == ["BOOKMARK", "ERROR", "ADDED"]
    kept = _event({"metadata": {"name": "a", "managedFields": MANAGED}})
    (ev,) = decode_events([kept])
    assert ev["object"]["metadata"]["managedFields"] == MANAGED


def test_a_broken_line_raises_as_before():
    try:
        _decode(b'{"type":"ADDED","object":{"metadata":{"managedFields":[{"a":1}],"name":')
    except orjson.JSONDecodeError:
        pass
    else:
        raise AssertionError("a cut-off line must not decode")


def test_write_answers_lose_only_their_own_managed_fields():
    from kaiwo_ctrl.runtime.api.watchstream import decode_object_without_managed_fields

    obj = {"kind": "Job", "metadata": {"name": "j", "managedFields": MANAGED, "labels": {"a": "b"}}, "spec": {"x": [1, 2]}}
    out = decode_object_without_managed_fields(orjson.dumps(obj))
    assert out == {"kind": "Job", "metadata": {"name": "j", "labels": {"a": "b"}}, "spec": {"x": [1, 2]}}
    # a "managedFields" list elsewhere comes first in the bytes: it is kept, and
    # the object's own is still dropped (decoded whole)
    tricky = {"data": {"managedFields": [1]}, "metadata": {"name": "c", "managedFields": MANAGED}}
    out = decode_object_without_managed_fields(orjson.dumps(tricky))
    assert out == {"data": {"managedFields": [1]}, "metadata": {"name": "c"}}
    plain = {"metadata": {"name": "p"}}
    assert decode_object_without_managed_fields(orjson.dumps(plain)) == plain
