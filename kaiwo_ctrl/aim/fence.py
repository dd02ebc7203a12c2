"""The tenant fence of the proxy's Gateway listener (the proxy and the AIM routes share it).

Traffic from the shared Gateway reaches the proxy on its own listener
(``--proxy-gateway-bind-address``), never on the in-cluster one. There a
request is served only as ``/<namespace>/<model>/v1/<route>`` carrying
``X-Kaiwo-Route-Token: HMAC-SHA256(key, namespace)``; the operator's HTTPRoute
for a Model sets that header (a RequestHeaderModifier filter, core in every
Gateway API implementation), so the route made for namespace A reaches only
A's Models. A tenant's own HTTPRoute can rewrite paths and set headers at will,
but cannot compute another namespace's token without the key.

The key is 32 random bytes in a Secret in the operator's namespace, made by the
first replica that finds none. It is never logged; a token is written only into
the routes of its own namespace.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Sequence

from kaiwo_ctrl.runtime.api.client import ApiError, Client
from kaiwo_ctrl.runtime.api.resources import SECRETS, namespace_exists

TOKEN_HEADER = "X-Kaiwo-Route-Token"
TOKEN_HEADER_KEY = TOKEN_HEADER.lower().encode()
KEY_SECRET = "kaiwo-route-key"
KEY_FIELD = "key"
KEY_BYTES = 32
#: Tokens are bound to this use of the key (a key shared with another use cannot be replayed here).
_DOMAIN = b"kaiwo-ctrl/route-token/v1\x00"


class RouteKeyError(Exception):
    """The key Secret exists but holds no usable key (its content is never part of the message)."""


def route_token(key: bytes, namespace: str) -> str:
    """The token of ``namespace``: hex HMAC-SHA256 over the namespace name."""
    return hmac.new(key, _DOMAIN + namespace.encode(), hashlib.sha256).hexdigest()


def token_ok(key: bytes, namespace: str, values: Sequence[bytes]) -> bool:
    """Exactly one token value, equal (compared in constant time) to ``namespace``'s."""
    if len(values) != 1 or not namespace:
        return False
    return hmac.compare_digest(route_token(key, namespace).encode(), values[0].strip())


def key_of(secret: dict) -> bytes:
    raw = (secret.get("data") or {}).get(KEY_FIELD) or ""
    try:
        key = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        key = b""
    if len(key) < KEY_BYTES:
        meta = secret.get("metadata") or {}
        raise RouteKeyError(f"Secret {meta.get('namespace')}/{meta.get('name')}: data.{KEY_FIELD} must hold at least "
                            f"{KEY_BYTES} bytes (delete the Secret to have a new key made)")
    return key


async def ensure_route_key(client: Client, namespace: str, name: str = KEY_SECRET) -> bytes:
    """The route key from Secret ``namespace/name``, created with a random key if missing."""
    for _ in range(3):
        secret = await client.get_or_none(SECRETS, name, namespace)
        if secret is not None:
            return key_of(secret)
        if not await namespace_exists(client, namespace):
            # read, not a failed create, while the namespace is missing: an idle operator writes nothing
            raise RouteKeyError(f"Secret {namespace}/{name} not made: the namespace {namespace!r} does not exist; "
                                "create it or choose an existing one with --leader-election-namespace (env POD_NAMESPACE)")
        key = secrets.token_bytes(KEY_BYTES)
        body = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                "metadata": {"name": name, "namespace": namespace,
                             "labels": {"app.kubernetes.io/managed-by": "kaiwo-ctrl",
                                        "app.kubernetes.io/component": "proxy-route-key"}},
                "data": {KEY_FIELD: base64.b64encode(key).decode()}}
        try:
            await client.create(SECRETS, body, namespace, decode=False)
            return key
        except ApiError as e:
            if not e.already_exists:
                raise  # another replica made it first: read theirs
    raise RouteKeyError(f"Secret {namespace}/{name}: created and deleted again while being read")
