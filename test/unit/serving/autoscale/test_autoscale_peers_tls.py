"""The autoscaler sends the operator's ServiceAccount token to a peer replica
only over TLS it verified: a peer with a certificate from another CA, or of
another name, gets no request with the token; without a CA nothing is sent."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from aiohttp import web

from kaiwo_ctrl.runtime.net.certs import TinyCA
from kaiwo_ctrl.runtime.net.fetch import Fetcher
from kaiwo_ctrl.serving.autoscale.peers import scrape_active

BODY = 'kaiwo_proxy_active_requests{model_namespace="a",model_name="m"} 3\n'


@pytest.fixture
def token(tmp_path: Path) -> str:
    f = tmp_path / "token"
    f.write_text("sa-token\n")
    return str(f)


async def _peer(tmp_path: Path, ca: TinyCA, name: str, seen: list[str]) -> tuple[web.AppRunner, str]:
    pair = ca.issue(name, server=True, dns=(name,), ips=("127.0.0.1",))
    cert, key = tmp_path / f"{name}.crt", tmp_path / f"{name}.key"
    pair.write(cert, key)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)

    async def metrics(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization", ""))
        return web.Response(text=BODY)

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
    await site.start()
    return runner, f"127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]


async def test_token_goes_only_to_verified_peers(tmp_path, token):
    ours, theirs = TinyCA("ours"), TinyCA("theirs")
    ca_file = tmp_path / "ca.crt"
    ca_file.write_bytes(ours.pair.cert_pem)
    seen: list[str] = []
    good, good_addr = await _peer(tmp_path, ours, "metrics.kaiwo-system.svc", seen)
    rogue, rogue_addr = await _peer(tmp_path, theirs, "metrics.kaiwo-system.svc", seen)
    try:
        async with Fetcher() as s:
            got = await scrape_active(s, [good_addr], secure=True, token_file=token, ca_file=str(ca_file),
                                      server_name="metrics.kaiwo-system.svc")
            assert got == {"a/m": 3.0} and seen == ["Bearer sa-token"]
            # another CA: the handshake fails, no request is made
            assert await scrape_active(s, [rogue_addr], secure=True, token_file=token, ca_file=str(ca_file)) is None
            # our CA but not the expected name
            assert await scrape_active(s, [good_addr], secure=True, token_file=token, ca_file=str(ca_file),
                                       server_name="other.example") is None
            # no CA configured: nothing is sent at all
            assert await scrape_active(s, [good_addr, rogue_addr], secure=True, token_file=token) is None
            assert seen == ["Bearer sa-token"]
    finally:
        await good.cleanup()
        await rogue.cleanup()
