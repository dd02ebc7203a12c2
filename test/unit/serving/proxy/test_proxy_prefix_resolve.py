"""Prefix extraction per route, label selectors, model resolution, multipart model parts."""

from __future__ import annotations

import orjson
import pytest

from kaiwo_ctrl.kinds import MODELS
from kaiwo_ctrl.runtime.cache.informer import Informer
from kaiwo_ctrl.serving.proxy.handler import split_multipart_model
from kaiwo_ctrl.serving.proxy.listing import ModelListing
from kaiwo_ctrl.serving.routing.prefix import extract_prefix
from kaiwo_ctrl.serving.routing.resolve import ProxyError, Resolver, request_timeout, selectors_of
from kaiwo_ctrl.runtime.objects.labelselector import SelectorError, matches, parse_selector


@pytest.mark.parametrize(
    ("route", "body", "want"),
    [
        ("chat/completions", {"messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "héllo wörld"}]}, "héllo"),
        ("chat/completions", {"messages": [{"role": "user", "content": [{"type": "text", "text": "ab"}, {"type": "image_url"}, {"text": "cdef"}]}]}, "abcde"),
        ("chat/completions", {"messages": [{"role": "assistant", "content": "x"}]}, ""),
        ("chat/completions", {"messages": "bad"}, ""),
        ("completions", {"prompt": "0123456789"}, "01234"),
        ("completions", {"prompt": ["first prompt", "second"]}, "first"),
        ("completions", {"prompt": [1, 2, 3]}, ""),
        ("embeddings", {"input": "anything"}, ""),
        # responses (KubeAI 0.23): the input string, or the first user item read like a chat message
        ("responses", {"input": "héllo wörld"}, "héllo"),
        ("responses", {"input": ""}, ""),
        ("responses", {"input": [{"role": "system", "content": "sys"}, {"role": "user", "content": "usr-1"},
                                 {"role": "user", "content": "usr-2"}]}, "usr-1"),
        ("responses", {"input": [{"type": "message", "role": "user",
                                  "content": [{"type": "input_text", "text": "ab"}, {"type": "input_image", "image_url": "x"},
                                              {"type": "input_text", "text": "cdef"}]}]}, "abcde"),
        ("responses", {"input": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}, "hi"),  # upstream's shape
        ("responses", {"input": [{"type": "function_call_output", "call_id": "c", "output": "tool says"},
                                 {"role": "user", "content": "after"}]}, "after"),
        ("responses", {"input": [{"role": "system", "content": "sys"}]}, ""),
        ("responses", {"input": []}, ""),
        ("responses", {"input": [1, None, "x", {"role": "user", "content": 7}]}, ""),
        ("responses", {"input": {"role": "user"}}, ""),
        ("responses", {"messages": [{"role": "user", "content": "chat shape"}]}, ""),
        ("responses", {}, ""),
        ("audio/transcriptions", {}, ""),
    ],
)
def test_prefix_extraction(route, body, want):
    assert extract_prefix(route, body, 5) == want


def test_prefix_length_counts_code_points():
    assert extract_prefix("completions", {"prompt": "日本語のテキスト"}, 3) == "日本語"
    assert extract_prefix("responses", {"input": "世界"}, 1) == "世"
    assert extract_prefix("responses", {"input": "hello"}, 0) == ""


@pytest.mark.parametrize(
    ("sel", "labels", "ok"),
    [
        ("tenant=a", {"tenant": "a"}, True),
        ("tenant==a,tier!=gold", {"tenant": "a", "tier": "silver"}, True),
        ("tenant in (a, b)", {"tenant": "b"}, True),
        ("tenant notin (a,b)", {"tenant": "b"}, False),
        ("tenant", {}, False),
        ("!tenant", {}, True),
        ("example.com/team=x", {"example.com/team": "x"}, True),
        ("", {}, True),
    ],
)
def test_label_selectors(sel, labels, ok):
    assert matches(parse_selector(sel), labels) is ok


def test_bad_selector_is_a_400():
    with pytest.raises(SelectorError):
        parse_selector("a in b")
    with pytest.raises(ProxyError) as e:
        selectors_of(["=x"])
    assert e.value.status == 400


def model(ns: str, name: str, *, adapters=(), labels=None, features=("TextGeneration",), annotations=None) -> dict:
    return {
        "metadata": {"name": name, "namespace": ns, "labels": labels or {}, "annotations": annotations or {},
                     "creationTimestamp": "2026-01-02T03:04:05Z"},
        "spec": {"features": list(features), "adapters": [{"name": a} for a in adapters], "owner": "me"},
    }


@pytest.fixture
def resolver() -> Resolver:
    inf = Informer(None, MODELS)  # never started: its store is filled by hand
    r = Resolver(inf)
    for m in (model("a", "llama", adapters=("sql",)), model("a", "dup"), model("b", "dup"),
              model("b", "embed", features=("TextEmbedding",), labels={"tenant": "t1"})):
        inf.store.put(m)
    return r


def test_bare_name_resolves_across_namespaces(resolver):
    t = resolver.resolve("llama", [])
    assert (t.namespace, t.name, t.adapter, t.forward_name) == ("a", "llama", "", "llama")


def test_duplicate_name_is_409_listing_namespaces(resolver):
    with pytest.raises(ProxyError) as e:
        resolver.resolve("dup", [])
    assert e.value.status == 409 and e.value.extra["namespaces"] == ["a", "b"]
    assert resolver.resolve("b/dup", []).namespace == "b"


def test_adapter_forwards_the_adapter_name(resolver):
    t = resolver.resolve("llama_sql", [])
    assert (t.name, t.adapter, t.forward_name) == ("llama", "sql", "sql")
    assert resolver.resolve("a/llama_sql", []).forward_name == "sql"
    with pytest.raises(ProxyError) as e:
        resolver.resolve("llama_nope", [])
    assert e.value.status == 404


def test_unknown_and_selector_hidden_models_are_404(resolver):
    for name, sel in (("nope", ""), ("embed", "tenant=t2"), ("c/llama", "")):
        with pytest.raises(ProxyError) as e:
            resolver.resolve(name, parse_selector(sel))
        assert e.value.status == 404
    assert resolver.resolve("embed", parse_selector("tenant=t1")).name == "embed"


def test_namespaced_route_pins_the_namespace(resolver):
    assert resolver.resolve("dup", [], namespace="a").namespace == "a"
    with pytest.raises(ProxyError):
        resolver.resolve("b/dup", [], namespace="a")


def _ids(body: bytes) -> list[str]:
    return [m["id"] for m in orjson.loads(body)["data"]]


def test_model_list_filters_features_and_lists_adapters(resolver):
    listing = ModelListing(resolver.models)
    items = listing.candidates(["TextGeneration"], [])
    assert _ids(listing.render(items)) == ["a/dup", "b/dup", "llama", "llama_sql"]
    entry = orjson.loads(listing.render(items))["data"][2]
    assert entry["created"] == 1767323045 and entry["owned_by"] == "me" and entry["object"] == "model"
    assert _ids(listing.render(listing.candidates(["TextEmbedding"], parse_selector("tenant=t1")))) == ["embed"]
    # a caller who may use only a/dup sees it by its bare name: nothing tells of b's twin
    assert _ids(listing.render(items, {("a", "dup")}.__contains__)) == ["dup"]
    # on the open proxy one Model's own listing still says its name is not unique in the cluster
    assert _ids(listing.render(listing.candidates(None, [], ("a", "dup")), named=listing.candidates(None, []))) == ["a/dup"]


def test_model_list_is_built_once_per_change_not_per_call():
    """5,000 adapters on one Model: calls join the encoded entries; only a listed change rebuilds."""
    inf = Informer(None, MODELS)
    listing = ModelListing(inf)
    big = model("a", "big", adapters=[f"ad{i}" for i in range(5000)])
    inf.store.put(big)
    listing.on_add(big, True)
    for _ in range(50):
        body = listing.render(listing.candidates(["TextGeneration"], []))
    assert listing.builds == 1 and len(_ids(body)) == 5001
    status_only = {**big, "status": {"replicas": {"ready": 1}}}
    listing.on_update(big, status_only)  # a status update is not listed: no rebuild
    listing.render(listing.candidates(["TextGeneration"], []))
    assert listing.builds == 1
    fewer = model("a", "big", adapters=["only"])
    inf.store.put(fewer)
    listing.on_update(status_only, fewer)
    assert _ids(listing.render(listing.candidates(["TextGeneration"], []))) == ["big", "big_only"]
    assert listing.builds == 2


def test_resolve_among_allowed_hides_the_others(resolver):
    assert sorted(resolver.candidates("dup")) == [("a", "dup"), ("b", "dup")]
    assert resolver.resolve("dup", [], allowed={("b", "dup")}).namespace == "b"  # no 409: a's twin is not the caller's
    with pytest.raises(ProxyError) as e:
        resolver.resolve("llama", [], allowed=set())
    assert e.value.status == 404 and e.value.message == "model not found: 'llama'"  # as for a Model that does not exist


def test_request_timeout_annotation():
    assert request_timeout(model("a", "m", annotations={"kaiwo.silogen.ai/request-timeout": "1m30s"}), None) == 90
    assert request_timeout(model("a", "m", annotations={"kaiwo.silogen.ai/request-timeout": "soon"}), 5.0) == 5.0
    assert request_timeout(model("a", "m"), 0) is None


def test_multipart_model_part_is_taken_out():
    b = "XyZ"
    body = (f"--{b}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n\r\nRIFF..\r\n"
            f"--{b}\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper_x\r\n"
            f"--{b}\r\nContent-Disposition: form-data; name=\"language\"\r\n\r\nen\r\n--{b}--\r\n").encode()
    name, rest = split_multipart_model(body, b)
    assert name == "whisper_x"
    assert b'name="model"' not in rest and b"RIFF.." in rest and b'name="language"' in rest and rest.endswith(f"--{b}--\r\n".encode())
