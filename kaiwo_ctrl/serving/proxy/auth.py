"""Who calls the proxy, and may they use this Model (``--proxy-auth kubernetes``).

A caller presents ``Authorization: Bearer <Kubernetes token>`` (what an OpenAI
SDK sends as its API key). The token is checked with a TokenReview; the caller
may use Model ``M`` in namespace ``N`` when a SubjectAccessReview allows verb
``create`` on ``models/proxy`` of API group ``kubeai.org``, in ``N``, name ``M``
(the ``kaiwo-model-user`` ClusterRole grants it and aggregates into ``edit`` and
``admin``). :meth:`Authorizer.authorize` needs only the request head, so it can
run before any body byte is read: it authenticates, and for a path that names
the Model (``/<ns>/<model>/v1/...``) also authorizes; a route that names the
Model in the body (``/openai/v1/...``) is authorized by the handler once it has
resolved the name (:meth:`Authorizer.allowed_keys`), before any side effect
(scale from zero, counts, forwarding).

Bounds (the attacks: a flood of random tokens or of made-up Model names must not
flood the API server nor slow callers whose decisions are known):

* decisions are cached by SHA-256 of the token (never the token itself) in one
  LRU of ``max_entries``: an allow for ``ttl`` (default 30 s), a deny or an
  invalid token for ``deny_ttl`` (default 5 s). A revoked RoleBinding or an
  expired token is honoured within ``ttl``;
* one review per distinct question at a time (callers asking the same one wait
  for its answer), at most ``max_reviews`` reviews in flight and as many again
  waiting; a question beyond that is answered 503 at once, without an API call;
* each review has ``review_timeout`` (503 after it: fail closed), and its answer
  is checked for shape and size (a user of more than 256 groups or extra values
  is refused);
* a token longer than 16 KiB, or a name that is no Kubernetes name, is refused
  without an API call.

Tokens never appear in logs, metrics or answers (only counts by outcome).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from kaiwo_ctrl.runtime.api.client import ApiError, Client
from kaiwo_ctrl.runtime.observe.metricsauth import SUBJECT_ACCESS_REVIEWS, TOKEN_REVIEWS

log = logging.getLogger("kaiwo_ctrl.serving.proxy.auth")

MODES = ("kubernetes", "none")
MAX_TOKEN_BYTES = 16 << 10
MAX_LIST = 256  # groups, extra keys, values per extra key, in a TokenReview's answer
MAX_STRING = 1024
_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")  # DNS-1123 subdomain (Model and namespace names)
OPENAI_PREFIX = "/openai/v1/"


@dataclass(frozen=True, slots=True)
class AuthConfig:
    ttl: float = 30.0
    deny_ttl: float = 5.0
    max_entries: int = 10_000
    max_reviews: int = 16
    review_timeout: float = 5.0


@dataclass(frozen=True, slots=True)
class Caller:
    key: str  # SHA-256 of the token, hex
    user: Mapping[str, Any]  # the SubjectAccessReview spec's user fields


@dataclass(frozen=True, slots=True)
class Decision:
    status: int  # 200 (go on), 401, 404 (not allowed: told as "not found") or 503
    message: str = ""
    caller: Caller | None = None


class Busy(Exception):
    """Too many reviews in flight and waiting, or the API server did not answer: 503."""


class _Cache:
    """A bounded LRU of values with per-entry expiry."""

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self._d: OrderedDict[Any, tuple[float, Any]] = OrderedDict()

    def get(self, key: Any, now: float) -> tuple[bool, Any]:
        hit = self._d.get(key)
        if hit is None or hit[0] <= now:
            return False, None
        self._d.move_to_end(key)
        return True, hit[1]

    def put(self, key: Any, value: Any, expires: float) -> None:
        self._d[key] = (expires, value)
        self._d.move_to_end(key)
        while len(self._d) > self.max_entries:
            self._d.popitem(last=False)

    def __len__(self) -> int:
        return len(self._d)


def bearer(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """The bearer token of the (only) Authorization header, else None."""
    values = [v for k, v in headers if len(k) == 13 and k.lower() == b"authorization"]
    if len(values) != 1:
        return None  # none, or several (ambiguous: refused)
    scheme, _, token = values[0].strip().partition(b" ")
    token = token.strip()
    if scheme.lower() != b"bearer" or not token or len(token) > MAX_TOKEN_BYTES:
        return None
    try:
        return token.decode("ascii")
    except UnicodeDecodeError:
        return None


def path_model(path: str) -> tuple[str, str] | None:
    """(namespace, model) a ``/<ns>/<model>/v1/...`` path names (percent-decoded as the router does)."""
    path = path.partition("?")[0]
    path = unquote(path) if "%" in path else path
    if path.startswith(OPENAI_PREFIX):
        return None
    parts = path.split("/", 4)
    if len(parts) != 5 or parts[3] != "v1" or not parts[1] or not parts[2]:
        return None
    return parts[1], parts[2]


class Authorizer:
    """The caller checks of ``--proxy-auth kubernetes`` (see the module docstring)."""

    def __init__(self, client: Client, config: AuthConfig | None = None,
                 on_review: Callable[[str, str], None] | None = None) -> None:
        self.client, self.config = client, config or AuthConfig()
        self._cache = _Cache(self.config.max_entries)
        self._inflight: dict[Any, asyncio.Future[Any]] = {}
        self._slots = asyncio.Semaphore(self.config.max_reviews)
        self.on_review = on_review  # (kind, outcome): counted by the proxy's metrics
        self.reviews = 0  # API calls made (tests and benches read it)

    async def authorize(self, method: str, path: str, headers: Iterable[tuple[bytes, bytes]]) -> Decision:
        """From the request head alone: 200 with the caller, or the refusal to answer."""
        del method  # every method of a route needs the same permission
        try:
            caller = await self.authenticate(bearer(headers))
            if caller is None:
                return Decision(401, "Unauthorized: a valid Kubernetes bearer token is required (Authorization: Bearer <token>)")
            named = path_model(path)
            if named is not None and not await self.may_use(caller, *named):
                return Decision(404, f"model not found: {named[1]!r}", caller)
            return Decision(200, "", caller)
        except Busy:
            return Decision(503, "Service Unavailable: authorization is busy, retry")

    async def authenticate(self, token: str | None) -> Caller | None:
        """The caller a token stands for (TokenReview, cached), None when it is missing or invalid."""
        if token is None:
            return None
        key = hashlib.sha256(token.encode()).hexdigest()
        user = await self._decide(("token", key), lambda: self._token_review(token))
        return Caller(key, user) if user is not None else None

    async def may_use(self, caller: Caller, namespace: str, name: str) -> bool:
        """May ``caller`` use Model ``namespace/name`` (``name`` empty: every Model of the namespace;
        SubjectAccessReview, cached)."""
        if not (_NAME.fullmatch(namespace) and (not name or _NAME.fullmatch(name))):
            return False  # no Model has such a name: no API call for it
        return bool(await self._decide(("sar", caller.key, namespace, name), lambda: self._access_review(caller, namespace, name)))

    async def allowed_keys(self, caller: Caller, keys: Iterable[tuple[str, str]]) -> set[tuple[str, str]]:
        """Which (namespace, name) of ``keys`` the caller may use (may fail with :class:`Busy`).

        One review per namespace for all its Models (what ``edit`` grants); by name only in a namespace
        the caller may not use as a whole (a grant with ``resourceNames``), at most
        ``4 * max_reviews`` names per call: the others are left out (bounds a listing's API calls)."""
        keys = list(keys)
        if len(keys) == 1:  # one Model (a request): its own review, as the head check asks
            return set(keys) if await self.may_use(caller, *keys[0]) else set()
        spaces = sorted({ns for ns, _ in keys})
        whole = {ns for ns, ok in zip(spaces, await self._each([(ns, "") for ns in spaces], caller)) if ok}
        by_name = [k for k in keys if k[0] not in whole][: 4 * self.config.max_reviews]
        named = {k for k, ok in zip(by_name, await self._each(by_name, caller)) if ok}
        return {k for k in keys if k[0] in whole or k in named}

    async def _each(self, keys: list[tuple[str, str]], caller: Caller) -> list[bool]:
        """``may_use`` of each key, at most ``max_reviews`` at a time (stays under the busy bound)."""
        out: list[bool] = []
        step = self.config.max_reviews
        for i in range(0, len(keys), step):
            out += await asyncio.gather(*(self.may_use(caller, ns, n) for ns, n in keys[i:i + step]))
        return out

    async def _decide(self, key: Any, review: Callable[[], Awaitable[Any]]) -> Any:
        """The cached answer to ``key``, else the one review of it in flight, else a new one (bounded)."""
        found, value = self._cache.get(key, time.monotonic())
        if found:
            return value
        fut = self._inflight.get(key)
        if fut is None:
            if len(self._inflight) >= 2 * self.config.max_reviews:
                self._count(key[0], "busy")
                raise Busy()
            fut = self._inflight[key] = asyncio.ensure_future(self._run(key, review))
        return await asyncio.shield(fut)  # a caller that goes away leaves the review to the others

    async def _run(self, key: Any, review: Callable[[], Awaitable[Any]]) -> Any:
        try:
            async with self._slots:
                self.reviews += 1
                try:
                    async with asyncio.timeout(self.config.review_timeout):
                        value = await review()
                except (ApiError, OSError, TimeoutError) as e:
                    # never the token: the error of a review names only its kind
                    log.warning("proxy authorization review failed", extra={"review": key[0], "error": type(e).__name__})
                    self._count(key[0], "error")
                    raise Busy() from None
            ttl = self.config.ttl if value else self.config.deny_ttl
            self._cache.put(key, value, time.monotonic() + ttl)
            self._count(key[0], "allowed" if value else "denied")
            return value
        finally:
            self._inflight.pop(key, None)

    def _count(self, kind: str, outcome: str) -> None:
        if self.on_review is not None:
            self.on_review(kind, outcome)

    async def _token_review(self, token: str) -> Mapping[str, Any] | None:
        review = await self.client.create(
            TOKEN_REVIEWS, {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}})
        status = review.get("status") if isinstance(review, dict) else None
        if not isinstance(status, dict) or status.get("authenticated") is not True:
            return None
        try:
            return _user_spec(status.get("user"))
        except ValueError as e:  # an answer out of bounds: refused like an invalid token
            log.warning("proxy authorization: TokenReview answer refused", extra={"error": str(e)})
            return None

    async def _access_review(self, caller: Caller, namespace: str, name: str) -> bool:
        spec = {**caller.user, "resourceAttributes": {
            "group": "kubeai.org", "resource": "models", "subresource": "proxy", "verb": "create",
            "namespace": namespace}}
        if name:
            spec["resourceAttributes"]["name"] = name
        sar = await self.client.create(
            SUBJECT_ACCESS_REVIEWS, {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec})
        status = sar.get("status") if isinstance(sar, dict) else None
        return isinstance(status, dict) and status.get("allowed") is True


def _user_spec(user: Any) -> Mapping[str, Any]:
    """The SubjectAccessReview fields of a TokenReview's user, checked for shape and size (ValueError)."""
    if not isinstance(user, dict):
        raise ValueError("no user")
    username, uid, groups, extra = user.get("username"), user.get("uid", ""), user.get("groups") or [], user.get("extra") or {}
    if not (isinstance(username, str) and username and len(username) <= MAX_STRING and isinstance(uid, str) and len(uid) <= MAX_STRING):
        raise ValueError("bad username or uid")
    if not (isinstance(groups, list) and len(groups) <= MAX_LIST and all(isinstance(g, str) and len(g) <= MAX_STRING for g in groups)):
        raise ValueError("bad groups")
    if not (isinstance(extra, dict) and len(extra) <= MAX_LIST and all(
            isinstance(k, str) and len(k) <= MAX_STRING and isinstance(v, list) and len(v) <= MAX_LIST
            and all(isinstance(x, str) and len(x) <= MAX_STRING for x in v) for k, v in extra.items())):
        raise ValueError("bad extra")
    spec: dict[str, Any] = {"user": username, "groups": groups}
    if uid:
        spec["uid"] = uid
    if extra:
        spec["extra"] = extra
    return spec
