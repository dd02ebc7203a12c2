"""The tenant fence of the proxy's Gateway listener (the proxy and the AIM routes share it).

Traffic from the shared Gateway reaches the proxy on its own listener
(``--proxy-gateway-bind-address``), never on the in-cluster one. There a
request is served only as ``/<namespace>/<model>/v1/<route>`` carrying
``X-Kaiwo-Route-Token: HMAC-SHA256(key, namespace, namespace UID)``; the operator's HTTPRoute
for a Model sets that header (a RequestHeaderModifier filter, core in every
Gateway API implementation), so the route made for namespace A reaches only
A's Models. A tenant's own HTTPRoute can rewrite paths and set headers at will,
but cannot compute another namespace's token without the key.

The key is 32 random bytes in a Secret in the operator's namespace, made by the
first replica that finds none. It is never logged; a token is written only into
the routes of its own namespace. The token binds the namespace's UID: a namespace
deleted and made again under the same name gets a new token, and the old
routes' token is refused.

Rotation (docs/tenancy-and-security.md): annotate the Secret with
``kaiwo.silogen.ai/rotate-route-key=<overlap seconds, or empty for 600>``. The
operator's leader then writes a new ``key``, keeps the old one as ``previous``
with ``previousUntil`` (Unix seconds) and removes the annotation; the routes
get the new tokens, and every proxy, watching that one Secret, accepts both keys
until ``previousUntil`` and only the new one after, without a restart.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import math
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kaiwo_ctrl.runtime.api.client import ApiError, Client
from kaiwo_ctrl.runtime.api.resources import NAMESPACES, SECRETS, namespace_exists
from kaiwo_ctrl.runtime.cache.cache import Cache

log = logging.getLogger("kaiwo_ctrl.aim.fence")

TOKEN_HEADER = "X-Kaiwo-Route-Token"
TOKEN_HEADER_KEY = TOKEN_HEADER.lower().encode()
KEY_SECRET = "kaiwo-route-key"
KEY_FIELD = "key"
PREVIOUS_FIELD, PREVIOUS_UNTIL_FIELD = "previous", "previousUntil"
KEY_BYTES = 32
#: On the key Secret: asks the operator to rotate the key; the value is the overlap in seconds ("" = default).
ROTATE_ANNOTATION = "kaiwo.silogen.ai/rotate-route-key"
DEFAULT_OVERLAP, MAX_OVERLAP = 600, 86400
#: Tokens are bound to this use of the key (a key shared with another use cannot be replayed here);
#: v2 binds the namespace's UID as well as its name.
_DOMAIN = b"kaiwo-ctrl/route-token/v2\x00"


class RouteKeyError(Exception):
    """The key Secret exists but holds no usable key (its content is never part of the message)."""


@dataclass(frozen=True)
class RouteKeys:
    """The current key, and the one it replaced while the rotation's overlap lasts."""

    current: bytes
    previous: bytes | None = None
    previous_until: float = 0.0

    def accepted(self, now: float) -> tuple[bytes, ...]:
        if self.previous and now < self.previous_until:
            return (self.current, self.previous)
        return (self.current,)


def route_token(key: bytes, namespace: str, uid: str) -> str:
    """The token of ``namespace`` with UID ``uid``: hex HMAC-SHA256 over both (NUL-separated)."""
    return hmac.new(key, _DOMAIN + namespace.encode() + b"\x00" + uid.encode(), hashlib.sha256).hexdigest()


def token_ok(keys: RouteKeys, namespace: str, uid: str | None, values: Sequence[bytes], now: float | None = None) -> bool:
    """Exactly one token value, equal (compared in constant time) to ``namespace``'s under a key
    accepted now; no namespace (or no UID: the namespace is not known) matches nothing."""
    if len(values) != 1 or not namespace or not uid:
        return False
    value = values[0].strip()
    ok = False
    for key in keys.accepted(time.time() if now is None else now):
        ok |= hmac.compare_digest(route_token(key, namespace, uid).encode(), value)
    return ok


def _decode(secret: Mapping[str, Any], field: str) -> bytes:
    try:
        return base64.b64decode((secret.get("data") or {}).get(field) or "", validate=True)
    except (binascii.Error, ValueError):
        return b""


def key_of(secret: Mapping[str, Any]) -> bytes:
    key = _decode(secret, KEY_FIELD)
    if len(key) < KEY_BYTES:
        meta = secret.get("metadata") or {}
        raise RouteKeyError(f"Secret {meta.get('namespace')}/{meta.get('name')}: data.{KEY_FIELD} must hold at least "
                            f"{KEY_BYTES} bytes (delete the Secret to have a new key made)")
    return key


def keys_of(secret: Mapping[str, Any]) -> RouteKeys:
    """The keys of the Secret: a short or unreadable ``previous`` (or its time) is no key."""
    current, previous = key_of(secret), _decode(secret, PREVIOUS_FIELD)
    try:
        until = float(_decode(secret, PREVIOUS_UNTIL_FIELD).decode("ascii") or 0)
    except (UnicodeDecodeError, ValueError):
        until = 0.0
    if len(previous) < KEY_BYTES or not math.isfinite(until) or until <= 0:
        return RouteKeys(current)
    return RouteKeys(current, previous, until)


def _overlap(value: str) -> int:
    try:
        return min(max(int(value.strip() or DEFAULT_OVERLAP), 0), MAX_OVERLAP)
    except ValueError:
        return DEFAULT_OVERLAP


def rotated(secret: Mapping[str, Any], now: float) -> dict[str, Any] | None:
    """The Secret after the rotation it asks for (:data:`ROTATE_ANNOTATION`), or None when it asks for none:
    a new key, the old one kept as ``previous`` until now + overlap, the annotation removed."""
    meta = dict(secret.get("metadata") or {})
    annotations = dict(meta.get("annotations") or {})
    if ROTATE_ANNOTATION not in annotations:
        return None
    old = key_of(secret)
    until = int(now) + _overlap(str(annotations.pop(ROTATE_ANNOTATION) or ""))
    meta["annotations"] = annotations
    enc = lambda b: base64.b64encode(b).decode()  # noqa: E731
    data = {KEY_FIELD: enc(secrets.token_bytes(KEY_BYTES)), PREVIOUS_FIELD: enc(old),
            PREVIOUS_UNTIL_FIELD: enc(str(until).encode())}
    return {**secret, "metadata": meta, "data": data}


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


def key_secret_informer(cache: Cache, namespace: str, name: str = KEY_SECRET) -> Any:
    """The informer of the key Secret alone (a field selector: no other Secret is read)."""
    return cache.informer(SECRETS, namespace=namespace, field_selector=f"metadata.name={name}")


class RouteFence:
    """What the proxy's Gateway listener checks tokens against: the keys of the key Secret, kept
    current by its informer (a rotation is picked up without a restart), and each namespace's UID
    from the Namespace informer. A Secret that goes away or turns unreadable leaves the last keys
    in force (the operator makes a new one; an error is logged without the content)."""

    def __init__(self, cache: Cache, client: Client, namespace: str, name: str = KEY_SECRET) -> None:
        self.client, self.namespace, self.name = client, namespace, name
        self.namespaces = cache.informer(NAMESPACES)
        self.keys: RouteKeys | None = None
        key_secret_informer(cache, namespace, name).add_handler(self)

    def on_add(self, obj: Mapping[str, Any], initial: bool) -> None:
        self._load(obj)

    def on_update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        self._load(new)

    def on_delete(self, obj: Mapping[str, Any], tombstone: bool) -> None:
        return None

    def _load(self, secret: Mapping[str, Any]) -> None:
        try:
            self.keys = keys_of(secret)
        except RouteKeyError as e:
            log.error("route key Secret unusable; the last keys stay in force", extra={"error": str(e)})

    async def ready(self) -> RouteKeys:
        """The keys; read (or made) through the API server until the informer has them."""
        if self.keys is None:
            self.keys = RouteKeys(await ensure_route_key(self.client, self.namespace, self.name))
        return self.keys

    def ok(self, namespace: str, values: Sequence[bytes]) -> bool:
        keys, ns = self.keys, self.namespaces.get(namespace) if namespace else None
        if keys is None or ns is None:
            return False
        return token_ok(keys, namespace, (ns.get("metadata") or {}).get("uid"), values)
