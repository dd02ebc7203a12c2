"""The live proxy (real apiserver, Models and Pods) against clients that try to spend its
memory or hold its body budget (issue 38). The proxy serves in this process, so its
memory is read from /proc/self; each case states its bound and asserts who received what,
and that another client is still served meanwhile."""

from __future__ import annotations

import asyncio
import re
import socket
import uuid

import orjson
import pytest

from kaiwo_ctrl.aim import fence
from kaiwo_ctrl.runtime.api.client import Client
from kaiwo_ctrl.runtime.manager.manager import Manager
from kaiwo_ctrl.runtime.observe.metrics import Metrics
from kaiwo_ctrl.serving.limits import ProxyLimits
from kaiwo_ctrl.serving.proxy.server import setup_proxy
from proxy_support import Proxy, create_model, next_host, server_pod, start_proxy, stop_proxy
from support import eventually
from support.rawupstream import RawUpstream, Seen

pytestmark = pytest.mark.integration

MIB = 1 << 20
LIMITS = ProxyLimits(head_timeout=5, body_idle_timeout=5, endpoint_wait=5, request_timeout=None, body_memory_wait=60)
ANSWER = 256 << 10


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


class PeakRss:
    """The process's RSS sampled every 20 ms while the attack runs."""

    def __init__(self) -> None:
        self.start = self.peak = rss_mib()
        self._task = asyncio.create_task(self._sample())

    async def _sample(self) -> None:
        while True:
            self.peak = max(self.peak, rss_mib())
            await asyncio.sleep(0.02)

    def growth(self) -> float:
        self.peak = max(self.peak, rss_mib())
        return self.peak - self.start

    def stop(self) -> None:
        self._task.cancel()


@pytest.fixture
async def proxy(control_plane):
    p = await start_proxy(control_plane, engine_interval=None, limits=LIMITS, scale_from_zero=False)
    yield p
    await stop_proxy(p)


@pytest.fixture
async def upstream(proxy, admin, namespace):
    up = await RawUpstream(next_host(), delay=0.0).start()
    up.model = f"m-{uuid.uuid4().hex[:8]}"  # type: ignore[attr-defined]
    create_model(admin, namespace, up.model, autoscalingDisabled=True)  # type: ignore[attr-defined]
    await proxy.wait_model(namespace, up.model)  # type: ignore[attr-defined]
    server_pod(admin, namespace, up.model, up)  # type: ignore[attr-defined]
    await proxy.wait_endpoints(namespace, up.model, 1)  # type: ignore[attr-defined]
    yield up
    await up.stop()


def body(up: RawUpstream, who: str, size: int = 0) -> bytes:
    doc = orjson.dumps({"model": up.model, "user": who, "prompt": "hello"})  # type: ignore[attr-defined]
    return doc if size <= len(doc) else doc[:-1] + b',"pad":"' + b"x" * (size - len(doc) - 9) + b'"}'


def head(length: int, *extra: bytes, path: bytes = b"/openai/v1/completions") -> bytes:
    lines = [b"POST %b HTTP/1.1" % path, b"Host: proxy", b"Content-Type: application/json", b"Content-Length: %d" % length, *extra]
    return b"\r\n".join(lines) + b"\r\n\r\n"


def statuses(out: bytes) -> list[int]:
    return [int(s) for s in re.findall(rb"HTTP/1\.1 (\d{3}) ", out)]


async def connect(port: int, source: str = "127.0.0.1", rcvbuf: int | None = None):
    s = socket.socket()
    if rcvbuf is not None:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.bind((source, 0))
    s.setblocking(False)
    await asyncio.get_running_loop().sock_connect(s, ("127.0.0.1", port))
    return await asyncio.open_connection(sock=s, limit=1 << 20)


async def answer_of(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    h = await reader.readuntil(b"\r\n\r\n")
    n = int(re.search(rb"(?i)content-length: (\d+)", h).group(1))  # type: ignore[union-attr]
    return int(h[9:12]), await reader.readexactly(n)


async def ask(port: int, up: RawUpstream, who: str, *, source: str = "127.0.0.1", size: int = 0) -> tuple[int, str]:
    r, w = await connect(port, source)
    try:
        b = body(up, who, size)
        w.write(head(len(b), b"Connection: close") + b)
        status, raw = await asyncio.wait_for(answer_of(r), 60)
        return status, orjson.loads(raw).get("completion_for", raw[:200])
    finally:
        w.close()


async def test_pipelined_answers_never_read_stay_bounded_and_others_are_served(proxy, upstream):
    """1,000 pipelined completions whose answers are 256 KiB each, from a client with a 4 KiB
    receive buffer that reads nothing: before, every answer was queued (RSS 62 -> 311 MiB)."""
    async def big(seen: Seen, w: asyncio.StreamWriter) -> None:
        doc = b'{"completion_for":"%b","pad":"' % seen.tag.encode()
        doc += b"x" * (ANSWER - len(doc) - 2) + b'"}'
        w.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%b" % (len(doc), doc))

    upstream.answer = big
    port = proxy.server.port
    rss = PeakRss()
    r, w = await connect(port, rcvbuf=4096)
    try:
        w.write(b"".join(head(len(b := body(upstream, f"p{i}"))) + b for i in range(1000)))
        conns = proxy.server.servers[0]._conns
        await eventually(lambda: any(c._after is not None for c in conns), what="the proxy waits for the client to read")
        parked = len(upstream.seen)
        assert await ask(port, upstream, "other") == (200, "other"), "another client gets its own answer meanwhile"
        assert len(upstream.seen) == parked + 1, "the slow client's requests stay parked"
        assert parked < 100, f"{parked} answers made for a client that reads nothing (kernel buffers hold a few)"
        growth = rss.growth()
        assert growth < 48, f"RSS grew {growth:.0f} MiB (bound: 48 MiB; 1,000 answers are 250 MiB)"
        for i in range(5):  # the slow client's answers are its own, in order
            status, raw = await asyncio.wait_for(answer_of(r), 30)
            assert status == 200 and raw.startswith(b'{"completion_for":"p%d"' % i)
    finally:
        rss.stop()
        w.close()


async def test_endless_heads_of_tiny_headers_are_431_and_bounded(proxy, upstream):
    """50 connections each sending 65,000 empty headers (260 KB) and never ending the head:
    before, only names and values counted, and RSS rose by about 200 MiB."""
    port = proxy.server.port
    rss = PeakRss()

    async def attack() -> list[int]:
        r, w = await connect(port)
        try:
            w.write(b"POST /openai/v1/completions HTTP/1.1\r\nHost: p\r\n" + b"a:\r\n" * 65000)
            out = b""
            async with asyncio.timeout(30):
                while chunk := await r.read(65536):
                    out += chunk
            return statuses(out)
        except ConnectionResetError:
            return []
        finally:
            w.close()

    try:
        got = await asyncio.gather(*(attack() for _ in range(50)))
        assert all(s in ([431], []) for s in got) and got.count([431]) >= 1, got
        growth = rss.growth()
        assert growth < 32, f"RSS grew {growth:.0f} MiB (bound: 32 MiB)"
    finally:
        rss.stop()
    assert upstream.seen == []
    assert await ask(port, upstream, "zed") == (200, "zed")


async def test_the_body_budget_is_returned_exactly(proxy, upstream):
    """Hold the whole budget with 16 declared 32 MiB uploads (one address each), queue 40 requests whose
    head and body come in one write, release: every one is answered, and then 16 concurrent 32 MiB
    uploads are all admitted at once (so not a byte of any reservation leaked)."""
    port = proxy.server.port
    budget = proxy.server.servers[0].budget
    holders = [await connect(port, f"127.0.1.{i + 1}") for i in range(16)]
    for _, w in holders:
        w.write(head(32 * MIB))
    await eventually(lambda: budget.free == 0, what="the budget held")
    queued = [asyncio.create_task(ask(port, upstream, f"q{i}", source="127.0.2.1")) for i in range(40)]
    await eventually(lambda: len(budget._waiting) == 40, what="40 requests queued for the budget")
    assert upstream.seen == [] and not any(t.done() for t in queued), "none was read or answered before its grant"
    for _, w in holders:
        w.close()
    assert sorted(await asyncio.gather(*queued)) == sorted((200, f"q{i}") for i in range(40))
    await eventually(lambda: budget.free == budget.total and not budget.held, what="every reservation given back")

    all_in = asyncio.Event()

    async def held_answer(seen: Seen, w: asyncio.StreamWriter) -> None:
        if len(upstream.seen) >= 56:
            all_in.set()
        await asyncio.wait_for(all_in.wait(), 60)
        doc = orjson.dumps({"completion_for": seen.tag})
        w.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%b" % (len(doc), doc))

    upstream.answer = held_answer
    uploads = [asyncio.create_task(ask(port, upstream, f"u{i}", source=f"127.0.3.{i + 1}", size=32 * MIB)) for i in range(16)]
    await asyncio.wait_for(all_in.wait(), 120)  # all 16 bodies reached the model server before any was answered
    assert sorted(await asyncio.gather(*uploads)) == sorted((200, f"u{i}") for i in range(16))
    await eventually(lambda: budget.free == budget.total, what="every reservation given back")


async def test_slow_uploads_from_one_address_do_not_delay_another(proxy, upstream):
    """16 uploads declaring 32 MiB from one address, a byte a second: they hold at most that address's
    share (128 MiB), and a 4 MiB request from another address is answered while they are all still open."""
    port = proxy.server.port
    budget = proxy.server.servers[0].budget
    slow = [await connect(port) for _ in range(16)]
    for _, w in slow:
        w.write(head(32 * MIB) + b"{")

    async def trickle() -> None:
        while True:
            await asyncio.sleep(1)
            for _, w in slow:
                if not w.is_closing():
                    w.write(b" ")

    dripping = asyncio.create_task(trickle())
    try:
        await eventually(lambda: budget.held.get("127.0.0.1") == 128 * MIB and len(budget._waiting) == 12,
                         what="4 uploads hold the address's share, 12 wait")
        assert await ask(port, upstream, "other", source="127.0.0.2", size=4 * MIB) == (200, "other")
        assert all(not r.at_eof() and not r._buffer for r, _ in slow), "the slow uploads are all still open, unanswered"  # type: ignore[attr-defined]
        assert [s.tag for s in upstream.seen] == ["other"]
        # and they cannot hold even their share for long: under the minimum rate, 408 once the body idle time passed
        first = await asyncio.gather(*(asyncio.wait_for(r.read(200), 30) for r, _ in slow[:4]))
        assert all(statuses(out) == [408] for out in first), first
    finally:
        dripping.cancel()
        for _, w in slow:
            w.close()
    await eventually(lambda: budget.free == budget.total, what="every reservation given back")


@pytest.fixture
async def gateway(control_plane, admin):
    op_ns = f"op-{uuid.uuid4().hex[:8]}"
    assert admin.post("/api/v1/namespaces", json={"metadata": {"name": op_ns}}).status_code == 201
    client = await Client.from_kubeconfig(str(control_plane.kubeconfig))
    mgr = Manager(client, metrics=Metrics(), metrics_addr="127.0.0.1:0", health_addr="127.0.0.1:0")
    server = setup_proxy(mgr, "127.0.0.1:0", gateway_bind="127.0.0.1:0", operator_ns=op_ns, limits=LIMITS, scale_from_zero=False,
                         auth=None)  # the open proxy: these tests are about the listeners' bounds
    stop = asyncio.Event()
    task = asyncio.create_task(mgr.run(stop))
    await asyncio.wait_for(server.gateway_started.wait(), 60)
    p = Proxy(mgr, server, f"http://127.0.0.1:{server.gateway_port}")
    r = admin.get(f"/api/v1/namespaces/{op_ns}/secrets/{fence.KEY_SECRET}")
    p.key = fence.key_of(r.json())  # type: ignore[attr-defined]
    yield p
    await p.http.close()
    stop.set()
    await asyncio.wait_for(task, 60)


async def test_the_gateway_listener_refuses_a_tokenless_request_before_reading_its_body(gateway, admin, namespace):
    up = await RawUpstream(next_host(), delay=0.0).start()
    try:
        create_model(admin, namespace, "gw-m", autoscalingDisabled=True)
        await gateway.wait_model(namespace, "gw-m")
        server_pod(admin, namespace, "gw-m", up)
        await gateway.wait_endpoints(namespace, "gw-m", 1)
        port, budget = gateway.server.gateway_port, gateway.server.servers[1].budget
        path = f"/{namespace}/gw-m/v1/completions".encode()
        r, w = await connect(port)
        w.write(head(32 * MIB, path=path))  # the head only: the 32 MiB body is never sent
        status, raw = await asyncio.wait_for(answer_of(r), 10)
        assert status == 404 and orjson.loads(raw)["error"]["code"] == 404, "refused from the head alone"
        assert await asyncio.wait_for(r.read(), 10) == b"", "then closed"
        w.close()
        assert budget.free == budget.total and not budget.held and up.seen == [] and up.received == 0
        uid = admin.get(f"/api/v1/namespaces/{namespace}").json()["metadata"]["uid"]
        token = fence.route_token(gateway.key, namespace, uid).encode()
        doc = orjson.dumps({"model": "gw-m", "user": "alice", "prompt": "hi"})
        r, w = await connect(port)
        w.write(head(len(doc), b"X-Kaiwo-Route-Token: " + token, b"Connection: close", path=path) + doc)
        status, raw = await asyncio.wait_for(answer_of(r), 30)
        w.close()
        assert (status, orjson.loads(raw)) == (200, {"completion_for": "alice"}) and [s.tag for s in up.seen] == ["alice"]
    finally:
        await up.stop()
