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

import aiohttp

from kaiwo_ctrl.serving.proxy.metrics import ACTIVE

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


async def scrape_active(
    session: aiohttp.ClientSession,
    peers: list[str],
    timeout: float = 5.0,
    *,
    secure: bool = False,
    token_file: str = TOKEN_FILE,
    ca_file: str = "",
    server_name: str = "",
) -> dict[str, float] | None:
    """Summed active requests per Model, or None when any peer could not be read.

    ``secure``: the replicas serve ``/metrics`` over TLS to authorised bearer
    tokens only (``--metrics-secure``), so the scrape sends this Pod's token
    (re-read every time: the kubelet rotates it) - but only to a peer whose
    certificate verifies against ``ca_file`` (and, if given, names
    ``server_name``): a token is the operator's ServiceAccount, never sent to
    whoever answers at a Pod IP. Without ``ca_file`` nothing is sent (None).
    """
    scheme, headers, ssl_ctx, hostname = "http", {}, None, None
    if secure:
        if not ca_file:
            return None
        scheme, ssl_ctx = "https", peer_ssl_context(ca_file, server_name)
        hostname = server_name or None
        try:
            with open(token_file) as f:
                headers["Authorization"] = f"Bearer {f.read().strip()}"
        except OSError:
            return None

    async def one(addr: str) -> dict[str, float]:
        async with session.get(
            f"{scheme}://{addr}/metrics", headers=headers, ssl=ssl_ctx if ssl_ctx is not None else True,
            server_hostname=hostname, timeout=aiohttp.ClientTimeout(total=timeout),
        ) as r:
            r.raise_for_status()
            return parse_active(await r.text())

    results = await asyncio.gather(*(one(a) for a in peers), return_exceptions=True)
    total: dict[str, float] = {}
    for r in results:
        if isinstance(r, BaseException):
            return None
        for k, v in r.items():
            total[k] = total.get(k, 0.0) + v
    return total
