"""Multipart uploads through the live proxy (real apiserver, Models and Pods; a raw
scripted model server on 127.0.0.x): a form is read only until its ``model``
part, then streamed to the endpoint as it arrives, never held whole; one with its
``model`` part after the window (the file first) is held whole under the body
memory, as before streaming.

Every case asserts the exact status and which client received which body; after
every case a normal request through the same proxy gets its own answer.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import uuid

import orjson
import pytest

from kaiwo_ctrl.runtime.net.http1body import STREAM_BUFFER
from kaiwo_ctrl.serving.limits import ProxyLimits
from proxy_support import Proxy, create_model, next_host, server_pod, start_proxy, stop_proxy
from support import eventually
from support.rawupstream import RawUpstream, Seen, json_answer

pytestmark = pytest.mark.integration

WINDOW = 256 << 10
#: the file (16 MiB) is twice the proxy's whole body memory: held whole, it could not be
LIMITS = ProxyLimits(head_timeout=0.5, body_idle_timeout=0.5, max_body_bytes=32 << 20, body_memory=8 << 20,
                     multipart_model_window=WINDOW, endpoint_wait=1.0, request_timeout=None)
FILE_BYTES = 16 << 20
BOUNDARY = "----kaiwo7MA4YWxkTrZu0gW"
MODEL = {"name": ""}


@pytest.fixture
async def proxy(control_plane):
    p = await start_proxy(control_plane, engine_interval=None, limits=LIMITS, scale_from_zero=False)
    yield p
    await stop_proxy(p)


async def digest_answer(seen: Seen, w: asyncio.StreamWriter) -> None:
    """What the model server got: its body's SHA-256 (a JSON body: whose it is)."""
    tag = seen.tag if seen.body[:1] == b"{" else hashlib.sha256(seen.body).hexdigest()
    w.write(json_answer(tag))


@pytest.fixture
async def upstream(proxy, admin, namespace):
    up = await RawUpstream(next_host(), delay=0.01).start()
    up.answer = digest_answer
    name = MODEL["name"] = f"w-{uuid.uuid4().hex[:8]}"
    create_model(admin, namespace, name, autoscalingDisabled=True, features=["SpeechToText"])
    await proxy.wait_model(namespace, name)
    server_pod(admin, namespace, name, up)
    await proxy.wait_endpoints(namespace, name, 1)
    yield up
    await up.stop()


def field(name: str, value: bytes, extra: str = "") -> bytes:
    return f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{name}"{extra}\r\n\r\n'.encode() + value + b"\r\n"


def audio(n: int = FILE_BYTES) -> bytes:
    return hashlib.sha256(b"seed").digest() * (n // 32)


def upload_head(length: int, *extra: bytes) -> bytes:
    lines = [b"POST /openai/v1/audio/transcriptions HTTP/1.1", b"Host: proxy",
             b"Content-Type: multipart/form-data; boundary=" + BOUNDARY.encode(), b"Content-Length: %d" % length, *extra]
    return b"\r\n".join(lines) + b"\r\n\r\n"


def statuses(out: bytes) -> list[int]:
    return [int(s) for s in re.findall(rb"HTTP/1\.1 (\d{3}) ", out)]


def body_of(out: bytes) -> bytes:
    return out.split(b"\r\n\r\n", 1)[1]


async def read_all(reader: asyncio.StreamReader) -> bytes:
    out = b""
    async with asyncio.timeout(30):
        while chunk := await reader.read(65536):
            out += chunk
    return out


async def send(writer: asyncio.StreamWriter, data: bytes | memoryview) -> None:
    try:
        for i in range(0, len(data), 64 << 10):
            writer.write(data[i:i + (64 << 10)])
            await writer.drain()
    except ConnectionError:
        pass  # the proxy answered and closed first


async def own_answer(proxy: Proxy, up: RawUpstream, who: str = "zed") -> None:
    code, _, raw = await proxy.post("/openai/v1/completions", {"model": MODEL["name"], "user": who, "prompt": "hi"})
    assert (code, orjson.loads(raw)) == (200, {"completion_for": who})


def reserved(proxy: Proxy) -> int:
    budget = proxy.server.servers[0].budget
    return budget.total - budget.free


async def test_upload_twice_the_body_memory_streams_through_intact(proxy, upstream):
    model = field("model", MODEL["name"].encode())
    rest = field("language", b"en") + field("file", audio(), '; filename="a.wav"') + f"--{BOUNDARY}--\r\n".encode()
    form = model + rest
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.server.port)
    writer.write(upload_head(len(form), b"Connection: close"))
    await send(writer, memoryview(form)[:10 << 20])
    await eventually(lambda: upstream.received >= 8 << 20, what="the endpoint got 8 MiB while the client holds back the rest")
    assert reserved(proxy) == WINDOW + 3 * STREAM_BUFFER, "only the model window and the unread buffer are counted"
    await send(writer, memoryview(form)[10 << 20:])
    out = await read_all(reader)
    writer.close()
    assert statuses(out) == [200]
    assert orjson.loads(body_of(out)) == {"completion_for": hashlib.sha256(rest).hexdigest()}, "the form less its model part"
    assert upstream.seen[0].header(b"content-length") == b"%d" % len(rest)
    assert reserved(proxy) == 0
    await own_answer(proxy, upstream)


async def test_client_stalling_mid_file_is_408_and_the_upstream_connection_is_closed(proxy, upstream):
    form = field("model", MODEL["name"].encode()) + field("file", audio(), '; filename="a.wav"') + f"--{BOUNDARY}--\r\n".encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.server.port)
    writer.write(upload_head(len(form)))
    await send(writer, memoryview(form)[:2 << 20])  # then nothing
    out = await read_all(reader)
    writer.close()
    assert statuses(out) == [408] and body_of(out) == b"request timeout"
    await eventually(lambda: upstream.closed_by_peer == 1, what="the half-sent upstream request aborted")
    assert upstream.seen == [] and upstream.received <= 2 << 20
    await own_answer(proxy, upstream)
    assert upstream.seen[0].conn == 2, "the cut connection was not reused"


async def test_client_gone_mid_file_aborts_the_upstream_request(proxy, upstream):
    form = field("model", MODEL["name"].encode()) + field("file", audio(), '; filename="a.wav"') + f"--{BOUNDARY}--\r\n".encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.server.port)
    writer.write(upload_head(len(form)))
    await send(writer, memoryview(form)[:2 << 20])
    await eventually(lambda: upstream.received >= 1 << 20, what="the upload under way upstream")
    writer.transport.abort()
    await eventually(lambda: upstream.closed_by_peer == 1, what="the upstream request aborted")
    assert upstream.seen == []
    await eventually(lambda: reserved(proxy) == 0, what="the body memory given back")
    await own_answer(proxy, upstream)
    assert upstream.seen[0].conn == 2


async def test_upstream_gone_mid_file_is_one_502_without_a_retry(proxy, upstream):
    upstream.cut_body_at = 1 << 20
    form = field("model", MODEL["name"].encode()) + field("file", audio(), '; filename="a.wav"') + f"--{BOUNDARY}--\r\n".encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.server.port)
    writer.write(upload_head(len(form)))
    sender = asyncio.create_task(send(writer, form))
    out = await read_all(reader)
    await sender
    writer.close()
    assert statuses(out) == [502] and b"Connection: close\r\n" in out
    assert orjson.loads(body_of(out)) == {"error": {"message": "Bad Gateway", "type": "server_error", "code": 502}}
    assert upstream.connections == 1, "a body that went out in part is never sent again"
    upstream.cut_body_at = None
    await own_answer(proxy, upstream)
    assert upstream.seen[0].conn == 2


async def test_model_part_after_a_file_larger_than_the_window_is_held_whole_and_answered(proxy, upstream):
    """OpenAI's own curl example sends ``-F file=@...`` before ``-F model=...``: such a form works as it
    always did, held whole under the body memory (all of it counted while it is read), then forwarded."""
    file = field("file", audio(2 << 20), '; filename="a.wav"')
    end = f"--{BOUNDARY}--\r\n".encode()
    form = file + field("model", MODEL["name"].encode()) + end
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.server.port)
    writer.write(upload_head(len(form), b"Expect: 100-continue", b"Connection: close"))
    async with asyncio.timeout(10):
        assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 100 Continue\r\n\r\n"
    await send(writer, memoryview(form)[:1 << 20])
    await eventually(lambda: reserved(proxy) == len(form), what="the whole form counted once the window passed")
    assert upstream.received == 0, "nothing goes upstream before the model is known"
    await send(writer, memoryview(form)[1 << 20:])
    out = await read_all(reader)
    writer.close()
    assert statuses(out) == [200]
    assert orjson.loads(body_of(out)) == {"completion_for": hashlib.sha256(file + end).hexdigest()}, "the form less its model part"
    assert upstream.seen[0].header(b"content-length") == b"%d" % len(file + end)
    assert reserved(proxy) == 0
    await own_answer(proxy, upstream)


@pytest.mark.parametrize("file_bytes", [64 << 10, 1 << 20], ids=["within-the-window", "past-the-window"])
async def test_form_without_a_model_part_is_400_naming_the_field(proxy, upstream, file_bytes):
    form = field("file", audio(file_bytes), '; filename="a.wav"') + f"--{BOUNDARY}--\r\n".encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.server.port)
    writer.write(upload_head(len(form), b"Connection: close"))
    sender = asyncio.create_task(send(writer, form))
    out = await read_all(reader)
    await sender
    writer.close()
    assert statuses(out) == [400]
    err = orjson.loads(body_of(out))["error"]
    assert err["type"] == "invalid_request_error" and err["code"] == 400 and "'model' form field" in err["message"]
    assert upstream.connections == 0 and upstream.received == 0
    assert reserved(proxy) == 0
    await own_answer(proxy, upstream)
