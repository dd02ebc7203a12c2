"""Objects nested too deeply for orjson (1,024 levels to decode, 254 to
encode) are left out of a list or a watch and reported by name and field;
every other object still arrives. Admission refuses the nesting far below."""

from __future__ import annotations

import random

import orjson
import pytest

from kaiwo_ctrl.runtime.api.deepjson import DECODE_LIMIT, ENCODE_LIMIT, encodable, undecodable
from kaiwo_ctrl.runtime.api.liststream import ListSplitter
from kaiwo_ctrl.runtime.api.watchstream import decode_events
from kaiwo_ctrl.webhooks.server import MAX_OBJECT_DEPTH, depth_verdict


def nested(levels: int, rng: random.Random | None = None) -> str:
    """JSON of ``levels`` nested containers (objects, or with ``rng`` a mix
    of objects and arrays with odd keys and strings beside them)."""
    out = "1"
    for i in range(levels):
        if rng is None or rng.random() < 0.5:
            key = "a" if rng is None else rng.choice(["a", 'q"uote', "\\\\", "{[", "x" * rng.randint(0, 5)])
            out = f'{{"s":"}}]{i}",{orjson.dumps(key).decode()}:{out}}}'
        else:
            out = f'["{{[",{out},{i}]'
    return out


def kaiwojob(name: str, depth: int = 0, **extra) -> bytes:
    job = f'{{"x":{nested(depth)}}}' if depth else '{"spec":{}}'
    return (f'{{"apiVersion":"kaiwo.silogen.ai/v1alpha1","kind":"KaiwoJob","metadata":{{"name":"{name}","namespace":"ns",'
            f'"resourceVersion":"7","uid":"u-{name}"}},"spec":{{"user":"u","job":{job}}},"status":{{"status":"PENDING"}}}}').encode()


@pytest.mark.parametrize("depth", [ENCODE_LIMIT - 10, ENCODE_LIMIT + 1, 300, DECODE_LIMIT - 3, DECODE_LIMIT + 5, 1100, 5000])
def test_a_list_with_deep_items_yields_every_other_item(depth):
    items = [kaiwojob("before"), kaiwojob("deep", depth), kaiwojob("after")]
    body = b'{"kind":"KaiwoJobList","metadata":{"resourceVersion":"9"},"items":[' + b",".join(items) + b"]}"
    for size in (7, 100, 4096, len(body)):
        splitter, got, left_out = ListSplitter(), [], []
        for i in range(0, len(body), size):
            for obj in splitter.decode(splitter.feed(body[i:i + size]), on_undecodable=left_out.append):
                got.append(obj["metadata"]["name"])
        pieces, envelope = splitter.finish()
        got += [o["metadata"]["name"] for o in splitter.decode(pieces, on_undecodable=left_out.append)]
        splitter.check_complete()
        assert envelope["metadata"]["resourceVersion"] == "9"
        deep_ok = depth + 3 <= ENCODE_LIMIT  # the item's own levels: object, spec, job
        assert got == (["before", "deep", "after"] if deep_ok else ["before", "after"]), size
        if not deep_ok:
            [info] = left_out
            assert info.stub["metadata"]["name"] == "deep" and info.stub["status"] == {"status": "PENDING"}
            assert info.path.startswith("spec.job.x.a.a") and info.depth >= depth


def test_without_a_callback_a_deep_item_still_fails_the_list():
    body = b'{"items":[' + kaiwojob("deep", 1100) + b"]}"
    splitter = ListSplitter()
    list(splitter.decode(splitter.feed(body)))
    pieces, _ = splitter.finish()
    with pytest.raises(Exception):
        list(splitter.decode(pieces))
        splitter.check_complete()


@pytest.mark.parametrize("depth", [300, 1100])
def test_watch_events_with_deep_objects_are_left_out(depth):
    lines = [b'{"type":"ADDED","object":' + kaiwojob(n, depth if n == "deep" else 0) + b"}" for n in ("a", "deep", "b")]
    left_out = []
    got = [ev["object"]["metadata"]["name"] for ev in decode_events(lines, True, on_undecodable=left_out.append)]
    assert got == ["a", "b"]
    [info] = left_out
    assert info.stub["type"] == "ADDED" and info.stub["object"]["metadata"]["name"] == "deep"
    assert info.path.startswith("object.spec.job.x")


def test_fuzzed_nesting_never_fails_the_decoder():
    """Random mixes of objects and arrays, keys and strings holding brackets,
    quotes and backslashes: the stub always decodes, keeps the metadata and
    names a path within the object."""
    rng = random.Random(24)
    for _ in range(60):
        depth = rng.choice([rng.randint(0, 250), rng.randint(255, 1100), rng.randint(1100, 3000)])
        raw = (b'{"metadata":{"name":"n","namespace":"ns"},"spec":{"job":' + nested(depth, rng).encode() + b"}}")
        info = undecodable(raw)
        assert info is not None and info.stub["metadata"] == {"name": "n", "namespace": "ns"}
        assert info.depth == depth + 2
        assert (info.path.startswith("spec.job") if depth + 2 > ENCODE_LIMIT else info.path == "")
        if depth + 2 <= DECODE_LIMIT:
            assert encodable(raw, orjson.loads(raw)) == (depth + 2 <= ENCODE_LIMIT)
        for cut in (1, len(raw) // 2, len(raw) - 1):  # a piece of an object is never taken for one
            assert undecodable(raw[:cut]) is None


def review(op: str, obj: str, old: str = "null") -> bytes:
    return (f'{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"r1","operation":"{op}",'
            f'"kind":{{"kind":"KaiwoJob"}},"name":"deep","object":{obj},"oldObject":{old}}}}}').encode()


@pytest.mark.parametrize("depth", [MAX_OBJECT_DEPTH - 3, MAX_OBJECT_DEPTH, 300, 1100])
def test_admission_refuses_deep_nesting_naming_the_field(depth):
    obj = kaiwojob("deep", depth).decode()
    out = depth_verdict(review("CREATE", obj))
    if depth + 3 <= MAX_OBJECT_DEPTH:
        assert out is None
        return
    req, verdict = out
    assert req["uid"] == "r1" and not verdict.allowed
    assert f"spec.job.x.a…: must not nest deeper than {MAX_OBJECT_DEPTH} levels" in verdict.message
    # an object already that deep may still be changed (a finalizer removed) and deleted
    assert depth_verdict(review("UPDATE", obj, obj))[1].allowed
    assert depth_verdict(review("DELETE", "null", obj))[1].allowed


def test_the_field_is_named_not_its_managed_fields_mirror():
    deep = nested(300)
    raw = (f'{{"metadata":{{"name":"n","managedFields":[{{"fieldsV1":{{"f:spec":{deep}}}}}]}},'
           f'"spec":{{"job":{{"x":{deep}}}}}}}').encode()
    info = undecodable(raw)
    assert info.path.startswith("spec.job.x") and info.paths == (info.path,)
    out = depth_verdict(review("CREATE", raw.decode()))
    assert out is not None and "spec.job.x" in out[1].message and "managedFields" not in out[1].message
