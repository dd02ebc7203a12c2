"""Shared plumbing of the read-only views (``monitor``, ``status gpus|queues``): the GPU
exporter's text, ``-o json``, and the watch mode that redraws."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

from kaiwo_ctrl.runtime.api.client import ApiError, Client
from kaiwo_ctrl.runtime.api.resources import SERVICES
from kaiwo_ctrl.runtime.net.fetch import FETCH_ERRORS, AnswerTooLarge, Fetcher, split_url

from .errors import FAILED, USAGE, CliError
from .kube import explain

ENDPOINT_ENV = "KAIWO_METRICS_ENDPOINT"
#: The operator's own setting, honoured when the user's is not set.
OPERATOR_ENDPOINT_ENV = "RESOURCE_MONITORING_METRICS_ENDPOINT"
SCRAPE_TIMEOUT = 10.0
#: Exporter answers larger than this are refused (a cluster's worth of GPUs is far smaller).
MAX_METRICS_BYTES = 32 * 2**20
CLEAR = "\033[H\033[2J"


def endpoint_of(flag: str | None) -> str:
    url = flag or os.environ.get(ENDPOINT_ENV) or os.environ.get(OPERATOR_ENDPOINT_ENV)
    if not url:
        raise CliError(f"no GPU metrics endpoint: pass --metrics-endpoint URL or set ${ENDPOINT_ENV} (the "
                       f"exporter the operator reads, its {OPERATOR_ENDPOINT_ENV})", USAGE)
    try:
        split_url(url)  # the one URL check of the client that will fetch it
    except ValueError:
        raise CliError(f"metrics endpoint {url!r} must be an http:// or https:// URL", USAGE) from None
    return url


def service_proxy_path(url: str) -> str | None:
    """``http://svc.ns.svc[.cluster.local]:port/path`` -> the API server's service proxy path; else None.

    An in-cluster exporter is reached through the API server (the user's credentials), as a
    laptop cannot resolve cluster DNS."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    labels = host.split(".")
    if len(labels) < 3 or labels[2] != "svc" or labels[3:] not in ([], ["cluster", "local"]):
        return None
    name = f"{parts.scheme}:{labels[0]}:{parts.port or (443 if parts.scheme == 'https' else 80)}"
    path = parts.path.lstrip("/") or "metrics"
    return SERVICES.path(labels[1], labels[0]).replace(f"/{labels[0]}", f"/{name}", 1) + f"/proxy/{path}"


async def scrape(client: Client, url: str) -> str:
    """The exporter's exposition text (through the API server for an in-cluster Service)."""
    proxied = service_proxy_path(url)
    if proxied:
        try:
            status, raw, _ = await client.transport.exchange("GET", client.transport.target(proxied, None), b"", None,
                                                             SCRAPE_TIMEOUT)
        except (TimeoutError, OSError) as e:
            raise explain(ApiError.transport_failure(e, "GET", proxied), client) from None
        if status >= 400:
            raise explain(ApiError(status, {"message": raw[:300].decode(errors="replace")}, "GET", proxied), client)
        return raw[:MAX_METRICS_BYTES].decode(errors="replace")
    try:
        async with Fetcher() as http:
            r = await http.get(url, timeout=SCRAPE_TIMEOUT, max_bytes=MAX_METRICS_BYTES)
    except AnswerTooLarge:
        raise CliError(f"the GPU metrics endpoint {url} answered more than {MAX_METRICS_BYTES >> 20} MiB", FAILED) from None
    except FETCH_ERRORS as e:
        raise CliError(f"cannot read GPU metrics from {url}: {e!r}", FAILED) from None
    if r.status != 200:
        raise CliError(f"the GPU metrics endpoint {url} answered {r.status}", FAILED)
    return r.text()


async def show(render: Callable[[], Awaitable[tuple[str, Any]]], *, output: str | None, watch: bool,
               interval: float) -> int:
    """Print one view (text, or its JSON with ``-o json``); with ``watch``, redraw every ``interval`` seconds."""
    while True:
        text, data = await render()
        if output == "json":
            print(json.dumps(data, indent=2), flush=True)
        else:
            if watch and sys.stdout.isatty():
                sys.stdout.write(CLEAR)
            print(text, flush=True)
        if not watch:
            return 0
        if not sys.stdout.isatty() and output != "json":
            print("", flush=True)  # a blank line between frames when not redrawing in place
        await asyncio.sleep(interval)


def add_view_flags(p: Any) -> None:
    p.add_argument("-o", "--output", choices=("json",), help="print JSON instead of a table")
    p.add_argument("-w", "--watch", action="store_true", help="redraw every --interval seconds until Ctrl-C")
    p.add_argument("--interval", type=float, default=2.0, metavar="SECONDS", help="with --watch (default 2)")
