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
