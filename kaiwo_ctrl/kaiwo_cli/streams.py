"""exec and port-forward through the API server over WebSockets.

The WebSockets are opened on an aiohttp session with the client's TLS
context and credentials (:func:`ws_session`); the framing is
:mod:`.channels`. The I/O ends are parameters (async iterators of
stdin chunks and terminal sizes, an output callback), so the terminal
(:mod:`.terminal`), the TUI and the tests drive the same code.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import weakref
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import urlencode

import aiohttp

from kaiwo_ctrl.runtime.api.client import ApiError, Client, Resource
from kaiwo_ctrl.runtime.api.transport import Transport
from kaiwo_ctrl.runtime.api.resources import PODS

from .sanitize import inert
from . import channels as ch
from .errors import FAILED, FORBIDDEN, NO_CLUSTER, NOT_FOUND, CliError

ACCESS_REVIEWS = Resource("authorization.k8s.io", "v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview",
                          namespaced=False)
#: Largest message accepted from the server (aiohttp's default is 4 MiB).
MAX_MESSAGE = 4 * 2**20
#: How long the WebSocket handshake may take.
CONNECT_TIMEOUT = 30.0
#: A port-forward's local read size.
CHUNK = 64 * 1024


_SESSIONS: weakref.WeakKeyDictionary[Transport, aiohttp.ClientSession] = weakref.WeakKeyDictionary()


def ws_session(client: Client) -> aiohttp.ClientSession:
    """The aiohttp session for ``client``'s WebSockets, closed with the client.

    The one aiohttp client session in kaiwo_ctrl, and the one exception to its
    single HTTP client (the runtime's HTTP/1.1 pool, kaiwo_ctrl.runtime.net):
    that client does not speak WebSocket, which exec and port-forward need.
    It lives in the CLI's process only, never in the operator's
    (test/unit/repo/test_one_http_client.py holds both)."""
    t = client.transport
    s = _SESSIONS.get(t)
    if s is None or s.closed:
        s = _SESSIONS[t] = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client.config.ssl_context()))
        t.on_close(s.close)
    return s


async def check_access(client: Client, namespace: str, subresource: str) -> None:
    """Exit 5 naming the verb and resource unless the user may ``create pods/<subresource>``.

    The API server authorizes a WebSocket upgrade as ``create`` (and, on
    older servers, as ``get``), so this asks before opening anything.
    """
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
              "spec": {"resourceAttributes": {"namespace": namespace, "verb": "create", "resource": "pods",
                                              "subresource": subresource}}}
    try:
        answer = await client.create(ACCESS_REVIEWS, review)
    except ApiError:
        return  # cannot ask: the handshake's own 403 is explained instead
    if not (answer.get("status") or {}).get("allowed"):
        raise forbidden(namespace, subresource)


def forbidden(namespace: str, subresource: str, detail: str = "") -> CliError:
    return CliError(f"permission denied: you may not create pods/{subresource} in namespace {namespace!r}. "
                    "Ask your cluster administrator for a Role that allows it." + (f" (server: {detail})" if detail else ""),
                    FORBIDDEN)


async def connect(client: Client, path: str, query: list[tuple[str, str]], protocol: str,
                  namespace: str, subresource: str) -> aiohttp.ClientWebSocketResponse:
    """Open the WebSocket for ``path``?``query`` speaking ``protocol``; API failures become clear exits."""
    url = client.transport.url(f"{path}?{urlencode(query)}", None)
    headers = await client.transport.headers(None)
    # the kubelet's routes answer 406 to "Accept: application/json" (port-forward is proxied to it as is)
    headers["Accept"] = "*/*"
    try:
        async with asyncio.timeout(CONNECT_TIMEOUT):
            ws = await ws_session(client).ws_connect(url, protocols=(protocol,), headers=headers,
                                                             max_msg_size=MAX_MESSAGE)
    except aiohttp.WSServerHandshakeError as e:
        if e.status in (401, 403):
            raise forbidden(namespace, subresource, e.message) from None
        if e.status == 404:
            raise CliError(f"{path} not found ({e.message})", NOT_FOUND) from None
        raise CliError(f"the API server refused the {subresource} stream: {e.status} {e.message}. "
                       f"It must speak {protocol} (Kubernetes >= 1.30 for exec).", FAILED) from None
    except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as e:
        raise CliError(f"cannot reach the cluster at {client.config.host}: {e}", NO_CLUSTER) from None
    if ws.protocol != protocol:
        await ws.close()
        raise CliError(f"the API server did not agree to {protocol} (answered {ws.protocol!r})", FAILED)
    return ws


def exec_query(container: str, command: list[str], *, stdin: bool, tty: bool) -> list[tuple[str, str]]:
    """The exec request's query; with a terminal, stderr is merged into stdout as kubectl does."""
    q = [("container", container), *(("command", c) for c in command), ("stdout", "true")]
    if stdin:
        q.append(("stdin", "true"))
    q.append(("tty", "true") if tty else ("stderr", "true"))
    return q


async def run_exec(ws: aiohttp.ClientWebSocketResponse, output: Callable[[int, bytes], None],
                   stdin: AsyncIterator[bytes] | None = None,
                   sizes: AsyncIterator[tuple[int, int]] | None = None) -> int:
    """Pump one exec session until the server closes it; the remote exit code."""
    code: int | None = None
    failure: str | None = None

    async def send_stdin() -> None:
        assert stdin is not None
        async for chunk in stdin:
            if chunk:
                await ws.send_bytes(ch.frame(ch.STDIN, chunk))
        await ws.send_bytes(ch.close_stdin())

    async def send_sizes() -> None:
        assert sizes is not None
        async for w, h in sizes:
            await ws.send_bytes(ch.resize(w, h))

    pumps = [asyncio.ensure_future(p()) for p, src in ((send_stdin, stdin), (send_sizes, sizes)) if src is not None]
    try:
        async for msg in ws:
            if msg.type != aiohttp.WSMsgType.BINARY:
                continue
            channel, payload = ch.parse(msg.data)
            if channel in (ch.STDOUT, ch.STDERR):
                output(channel, payload)
            elif channel == ch.ERROR:
                try:
                    code = ch.exit_code(payload)
                except ch.ExecFailure as e:
                    failure = str(e)
    finally:
        for p in pumps:
            p.cancel()
        for p in pumps:
            with contextlib.suppress(asyncio.CancelledError, ConnectionError, aiohttp.ClientError):
                await p
        await ws.close()
    if failure is not None:
        raise CliError(f"exec failed: {failure}", FAILED)
    return 0 if code is None else code


# ---------------------------------------------------------------- port-forward


async def tunnel(ws: aiohttp.ClientWebSocketResponse, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 port: int) -> str | None:
    """Copy one local TCP connection through a v4 port-forward WebSocket; the kubelet's error, if any."""
    seen: set[int] = set()
    error = b""

    async def upstream() -> None:
        while data := await reader.read(CHUNK):
            await ws.send_bytes(ch.frame(ch.PF_DATA, data))

    up = asyncio.ensure_future(upstream())
    try:
        async for msg in ws:
            if msg.type != aiohttp.WSMsgType.BINARY:
                continue
            channel, payload = ch.parse(msg.data, frozenset((ch.PF_DATA, ch.PF_ERROR)))
            if channel not in seen:  # each channel's first message is its port
                seen.add(channel)
                got, payload = ch.port_prefix(payload)
                if got != port:
                    return f"the server opened port {got}, not {port}"
            if channel == ch.PF_DATA and payload:
                writer.write(payload)
                await writer.drain()
            elif channel == ch.PF_ERROR and len(error) < 4096:
                error += payload
    finally:
        up.cancel()
        with contextlib.suppress(asyncio.CancelledError, ConnectionError, aiohttp.ClientError):
            await up
        await ws.close()
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    return error.decode(errors="replace") or None


async def forward(client: Client, namespace: str, pod: str, mappings: list[tuple[int, int]], address: str,
                  ready: Callable[[list[tuple[str, int, int]]], None] | None = None) -> None:
    """Listen on ``address`` for each (local, remote) and tunnel every connection to the pod's port; forever."""
    path = PODS.path(namespace, pod, "portforward")

    def handler(remote: int) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Any]:
        async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                ws = await connect(client, path, [("ports", str(remote))], ch.PORT_FORWARD_PROTOCOL, namespace,
                                   "portforward")
                problem = await tunnel(ws, reader, writer, remote)
            except (CliError, ch.ChannelError) as e:
                problem = getattr(e, "message", str(e))
                writer.close()
            if problem:
                print(inert(f"kaiwo: port-forward to {pod}:{remote}: {problem.strip()}"), file=sys.stderr)
        return on_connect

    servers = []
    bound = []
    try:
        for local, remote in mappings:
            try:
                server = await asyncio.start_server(handler(remote), address, local)
            except OSError as e:
                raise CliError(f"cannot listen on {address}:{local}: {e.strerror or e}", FAILED) from None
            servers.append(server)
            bound.append((address, server.sockets[0].getsockname()[1], remote))
        if ready:
            ready(bound)
        await asyncio.gather(*(s.serve_forever() for s in servers))
    finally:
        for s in servers:
            s.close()
