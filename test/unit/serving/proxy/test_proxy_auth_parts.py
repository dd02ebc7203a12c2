"""The request-head parsing, answer checks and cache of serving/proxy/auth.py (no API calls;
the reviews themselves are tested on the real API server in test/integration/test_proxy_auth.py)."""

from __future__ import annotations

import pytest

from kaiwo_ctrl.serving.proxy.auth import MAX_TOKEN_BYTES, _Cache, _user_spec, bearer, path_model


@pytest.mark.parametrize("headers,want", [
    ([(b"Authorization", b"Bearer abc.def")], "abc.def"),
    ([(b"authorization", b"bearer   abc ")], "abc"),
    ([], None),
    ([(b"Authorization", b"Basic eDp5")], None),
    ([(b"Authorization", b"Bearer ")], None),
    ([(b"Authorization", b"Bearer a"), (b"Authorization", b"Bearer b")], None),  # two: ambiguous, refused
    ([(b"Authorization", b"Bearer " + b"x" * (MAX_TOKEN_BYTES + 1))], None),  # too long: no API call
    ([(b"Authorization", b"Bearer \xff\xfe")], None),
])
def test_bearer(headers, want):
    assert bearer(headers) == want


@pytest.mark.parametrize("path,want", [
    ("/team-a/llm/v1/chat/completions", ("team-a", "llm")),
    ("/team-a/llm/v1/models?x=1", ("team-a", "llm")),
    ("/team%2Da/llm/v1/completions", ("team-a", "llm")),  # decoded as the router decodes it
    ("/openai/v1/chat/completions", None),
    ("/openai/v1/models", None),
    ("/a/b/c", None),
])
def test_path_model(path, want):
    assert path_model(path) == want


def test_user_spec_copies_the_review_fields_and_refuses_oversized_answers():
    assert _user_spec({"username": "system:serviceaccount:a:b", "uid": "u1", "groups": ["g"], "extra": {"k": ["v"]}}) == {
        "user": "system:serviceaccount:a:b", "uid": "u1", "groups": ["g"], "extra": {"k": ["v"]}}
    for bad in (None, {"username": ""}, {"username": "u", "groups": ["g"] * 257}, {"username": "u" * 1025},
                {"username": "u", "groups": [1]}, {"username": "u", "extra": {"k": "v"}},
                {"username": "u", "extra": {f"k{i}": [] for i in range(257)}}):
        with pytest.raises(ValueError):
            _user_spec(bad)


def test_cache_is_bounded_lru_with_expiry():
    c = _Cache(3)
    for i in range(3):
        c.put(i, f"v{i}", 10.0)
    assert c.get(0, 0.0) == (True, "v0")  # 0 is now the most recent
    c.put(3, "v3", 10.0)  # drops the least recently used: 1
    assert len(c) == 3 and c.get(1, 0.0) == (False, None) and c.get(0, 0.0) == (True, "v0")
    assert c.get(3, 10.0) == (False, None), "expired at its time"
