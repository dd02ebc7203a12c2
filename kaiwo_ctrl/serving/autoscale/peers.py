"""Where the proxy replicas are, and what they report.

Peers are either a fixed list of ``host:port`` metrics addresses, or the Ready
Pods matching a label selector in the operator's namespace (their
``status.podIP`` with the metrics port). :func:`scrape_active` sums
``kaiwo_proxy_active_requests`` over all peers per ``<namespace>/<name>``.
"""

from __future__ import annotations

import asyncio
import re
import ssl
from collections.abc import Mapping, Sequence
from typing import Any

from kaiwo_ctrl.runtime.net.fetch import Fetcher
from kaiwo_ctrl.serving.routing.metrics import ACTIVE

_LINE = re.compile(rf'^{ACTIVE}\{{([^}}]*)\}} ([0-9.eE+-]+|NaN)$', re.M)
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def peer_addresses(pods: Sequence[Mapping[str, Any]], port: int) -> list[str]:
    out = []
    for p in pods:
        st = p.get("status") or {}
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in st.get("conditions") or ())
        ip = st.get("podIP")
        if ready and ip and not (p.get("metadata") or {}).get("deletionTimestamp"):
            out.append(f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}")
    return sorted(out)


def parse_active(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for m in _LINE.finditer(text):
        labels = dict(_LABEL.findall(m.group(1)))
        key = f"{labels.get('model_namespace', '')}/{labels.get('model_name', '')}"
        value = float(m.group(2))
        if value == value:  # not NaN
            out[key] = out.get(key, 0.0) + value
    return out


def peer_ssl_context(ca_file: str, server_name: str = "") -> ssl.SSLContext:
    """Verifies a peer's certificate chain against ``ca_file``; its name too
    when ``server_name`` is given (peers are addressed by Pod IP)."""
    ctx = ssl.create_default_context(cafile=ca_file)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = bool(server_name)
    return ctx


#: The Pod's ServiceAccount token: what a replica with ``--metrics-secure`` accepts.
TOKEN_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/token"
#: Largest /metrics answer read from a peer (a replica's exposition is a few KiB per Model).
MAX_METRICS_BYTES = 16 << 20


async def scrape_active(
    http: Fetcher,
    peers: list[str],
    timeout: float = 5.0,
    *,
    secure: bool = False,
    token_file: str = TOKEN_FILE,
    ca_file: str = "",
    server_name: str = "",
) -> dict[str, float] | None:
    """Summed active requests per Model, or None when any peer could not be read.

    ``http`` serves the plain-HTTP scrapes. ``secure``: the replicas serve
    ``/metrics`` over TLS to authorised bearer tokens only
    (``--metrics-secure``), so the scrape sends this Pod's token (re-read
    every time: the kubelet rotates it) - but only to a peer whose
    certificate verifies against ``ca_file`` (re-read every time too) and,
    if given, names ``server_name``: a token is the operator's
    ServiceAccount, never sent to whoever answers at a Pod IP. Without
    ``ca_file`` nothing is sent (None). Each peer's answer is bounded in time
    (``timeout``) and size.
    """
    if not secure:
        return await _scrape(http, "http", peers, {}, timeout)
    if not ca_file:
        return None
    try:
        with open(token_file) as f:
            headers = {"Authorization": f"Bearer {f.read().strip()}"}
        ctx = peer_ssl_context(ca_file, server_name)
    except (OSError, ssl.SSLError):
        return None
    async with Fetcher(ssl=ctx, server_hostname=server_name or None) as tls:
        return await _scrape(tls, "https", peers, headers, timeout)


async def _scrape(http: Fetcher, scheme: str, peers: list[str], headers: dict[str, str], timeout: float) -> dict[str, float] | None:
    async def one(addr: str) -> dict[str, float]:
        answer = await http.get(f"{scheme}://{addr}/metrics", headers=headers, timeout=timeout, max_bytes=MAX_METRICS_BYTES)
        if answer.status != 200:
            raise ValueError(f"{addr} answered {answer.status}")
        return parse_active(answer.text())

    results = await asyncio.gather(*(one(a) for a in peers), return_exceptions=True)
    total: dict[str, float] = {}
    for r in results:
        if isinstance(r, BaseException):  # refused, timed out, too large, not 200, unparseable
            return None
        for k, v in r.items():
            total[k] = total.get(k, 0.0) + v
    return total
