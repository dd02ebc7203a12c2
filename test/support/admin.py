"""The tests' synchronous admin client for a local control plane (httpx: a test
tool; the product's own HTTP client is kaiwo_ctrl.runtime.net)."""

from __future__ import annotations

from typing import Any

import httpx


def admin_http(plane: Any) -> httpx.Client:
    """An httpx client as the plane's admin (system:masters), paths relative to its API server."""
    return httpx.Client(base_url=plane.url, verify=plane.admin_ssl_context(), timeout=30)
