"""Header hygiene of the proxy's upstream hop (pure functions on raw header bytes)."""

from __future__ import annotations

from kaiwo_ctrl.serving.proxy.forward import request_headers, response_headers


def test_request_headers_drop_hop_by_hop_named_and_forwarded_keep_host_and_order():
    raw = [(b"Host", b"models.example"), (b"Connection", b"keep-alive, X-Hop"), (b"X-Hop", b"secret"),
           (b"Content-Length", b"12"), (b"Transfer-Encoding", b"chunked"), (b"X-Forwarded-For", b"1.2.3.4"),
           (b"Forwarded", b"for=1.2.3.4"), (b"Authorization", b"Bearer t"), (b"x-hop", b"again"), (b"TE", b"trailers")]
    assert request_headers(raw) == [(b"Host", b"models.example"), (b"Authorization", b"Bearer t")]


def test_response_headers_drop_hop_by_hop_and_add_x_proxy():
    raw = [(b"Content-Type", b"text/event-stream"), (b"Connection", b"keep-alive, X-Secret-Hop"), (b"X-Secret-Hop", b"1"),
           (b"Keep-Alive", b"timeout=5"), (b"Content-Length", b"3"), (b"X-Forwarded-For", b"kept on the way back")]
    assert response_headers(raw) == [(b"Content-Type", b"text/event-stream"), (b"X-Forwarded-For", b"kept on the way back"),
                                     (b"X-Proxy", b"kaiwo-ctrl")]


def test_the_name_memo_is_bounded_and_never_changes_a_verdict():
    from kaiwo_ctrl.aim.fence import TOKEN_HEADER
    from kaiwo_ctrl.serving.proxy import forward

    # a client sending thousands of made-up names, long ones too, fills the memo only to its bound
    for i in range(3000):
        request_headers([(b"X-Junk-%d" % i, b"1"), (b"X-Long-" + b"a" * 200 + b"%d" % i, b"1")])
    assert len(forward._memo_in) <= forward._MEMO_NAMES
    assert all(len(k) <= forward._MEMO_NAME_BYTES for k in forward._memo_in)
    # names the memo holds no more room for are judged the same way (mixed case, long, Connection-named)
    raw = [(b"X-FORWARDED-Host", b"evil"), (b"Proxy-Authorization", b"Basic x"), (b"CONNECTION", b"X-Late-" + b"b" * 100),
           (b"X-Late-" + b"B" * 100, b"hop"), (b"Accept", b"*/*"), (TOKEN_HEADER.upper().encode(), b"t")]
    twice = [request_headers(raw), request_headers(raw)]
    assert twice[0] == twice[1] == [(b"Accept", b"*/*")]
