"""An async Kubernetes client that speaks raw JSON.

:class:`RestConfig` (in :mod:`kaiwo_ctrl.runtime.api.restconfig`) holds the
connection settings (kubeconfig, exec plugins, in-cluster service account
with token refresh); requests go through :mod:`kaiwo_ctrl.runtime.api.transport`
(one lean HTTP/1.1 pool for requests and watches) with orjson bodies,
so no generated model classes are built on the hot path. Every kind is addressed through a :class:`Resource` (group,
version, plural, kind, scope); core kinds are listed in
:mod:`kaiwo_ctrl.runtime.api.resources` and custom resources are declared the same
way or discovered.

Writes come in four shapes: create, replace (PUT with resourceVersion, 409 on
a stale read), patch (merge / JSON / strategic) and server-side apply with a
field manager. Status has its own subresource calls. :func:`retry_on_conflict`
re-reads and retries a read-modify-write on 409.

:class:`Resource` and :class:`ApiError` live in :mod:`kaiwo_ctrl.runtime.api.apitypes` (and are
imported from here too); the wire format (query parameters, JSON bodies, watch-stream
lines) in :mod:`kaiwo_ctrl.runtime.api.wire`; the long reads (watches, a list
decoded as it arrives) in :mod:`kaiwo_ctrl.runtime.api.streams`.
"""

from __future__ import annotations

import builtins
import logging
import time
from collections import Counter
from collections.abc import AsyncGenerator, Mapping
from typing import Any, TypeVar

import orjson

from kaiwo_ctrl.runtime.api.apitypes import ApiError, Resource, retry_on_conflict  # noqa: F401 - re-exported: the client's vocabulary
from kaiwo_ctrl.runtime.api.restconfig import RestConfig  # re-exported: callers build clients from it
from kaiwo_ctrl.runtime.api.streams import RequestHook, StreamingReads
from kaiwo_ctrl.runtime.api.transport import Transport
from kaiwo_ctrl.runtime.api.watchstream import decode_object_without_managed_fields
from kaiwo_ctrl.runtime.api.wire import PATCH_TYPES, list_params, loads, with_type

log = logging.getLogger("kaiwo_ctrl.runtime.api.client")

_WRITES = frozenset(("POST", "PUT", "PATCH"))

T = TypeVar("T")



class Client(StreamingReads):
    """Raw-JSON async client. One per process; safe to share between tasks."""

    def __init__(
        self,
        config: RestConfig,
        *,
        field_manager: str = "kaiwo-ctrl",
        user_agent: str = "kaiwo-ctrl",
        max_connections: int = 256,
        request_timeout: float = 60.0,
    ) -> None:
        self.config = config
        self.field_manager = field_manager
        self.user_agent = user_agent
        self.request_timeout = request_timeout
        self._max_connections = max_connections
        self.transport = Transport(config, user_agent=user_agent, max_connections=max_connections)
        self.hooks: list[RequestHook] = []
        #: answers to writes (POST, PUT, PATCH) come without metadata.managedFields,
        #: cut from the bytes before decoding: a manager turns this on, as its
        #: caches hold none and its writes' answers stand in for cached objects
        self.trim_write_answers = False
        #: requests by HTTP method since start (tests and benchmarks read this)
        self.counts: Counter[str] = Counter()

    def with_own_pool(self, max_connections: int) -> "Client":
        """A client on the same server with its own pool of ``max_connections``
        connections; it shares this one's request counts and hooks."""
        other = Client(
            self.config,
            field_manager=self.field_manager,
            user_agent=self.user_agent,
            max_connections=max_connections,
            request_timeout=self.request_timeout,
        )
        other.hooks, other.counts, other.trim_write_answers = self.hooks, self.counts, self.trim_write_answers
        return other

    @classmethod
    async def from_kubeconfig(cls, kubeconfig: str | None = None, **kw: Any) -> "Client":
        return cls(await RestConfig.load(kubeconfig), **kw)

    async def close(self) -> None:
        await self.transport.close()

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    @property
    def writes(self) -> int:
        return sum(n for m, n in self.counts.items() if m in ("POST", "PUT", "PATCH", "DELETE"))

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str | None = None,
        timeout: float | None = None,
        decode: bool = True,
    ) -> Any:
        """One API request (through :mod:`.transport`); the decoded JSON answer
        (None for an empty one, or when ``decode`` is false: a caller that does
        not read the answer saves decoding it); see ``trim_write_answers``.
        Errors raise :class:`ApiError` whatever ``decode`` says."""
        target = self.transport.target(path, params)
        data = b""
        if body is not None:
            data = body if isinstance(body, bytes) else orjson.dumps(body)
            content_type = content_type or "application/json"
        self.counts[method] += 1
        t0 = time.monotonic()
        status = 0
        try:
            status, raw, retry_after = await self.transport.exchange(
                method, target, data, content_type, timeout or self.request_timeout
            )
            if status >= 400:
                raise ApiError.from_answer(status, loads(raw), method, path, retry_after)
            if not raw or not decode:
                return None
            if self.trim_write_answers and method in _WRITES:
                return decode_object_without_managed_fields(raw)
            return loads(raw)
        except (TimeoutError, OSError) as exc:
            raise ApiError.transport_failure(exc, method, path) from exc
        finally:
            dt = time.monotonic() - t0
            for hook in self.hooks:
                hook(method, path, status, dt)

    # ------------------------------------------------------------ verbs
    async def get(self, res: Resource, name: str, namespace: str | None = None, subresource: str | None = None) -> dict:
        return await self.request("GET", res.path(namespace, name, subresource))

    async def get_or_none(self, res: Resource, name: str, namespace: str | None = None) -> dict | None:
        try:
            return await self.get(res, name, namespace)
        except ApiError as e:
            if e.not_found:
                return None
            raise

    async def list(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
        resource_version_match: str | None = None,
        limit: int | None = None,
        continue_: str | None = None,
        timeout: float | None = None,
    ) -> dict:
        params = list_params(label_selector, field_selector, resource_version, resource_version_match, limit, continue_)
        return await self.request("GET", res.path(namespace), params=params, timeout=timeout)

    async def list_all(self, res: Resource, namespace: str | None = None, page: int = 500, **kw: Any) -> tuple[builtins.list[dict], str]:
        """A consistent paged list: all items and the list's resourceVersion."""
        items: list[dict] = []
        rv = ""
        async for chunk, rv in self.list_pages(res, namespace, page, **kw):
            items.extend(chunk)
        return items, rv

    async def list_pages(
        self,
        res: Resource,
        namespace: str | None = None,
        page: int = 500,
        *,
        resource_version: str | None = None,
        resource_version_match: str | None = None,
        **kw: Any,
    ) -> AsyncGenerator[tuple[builtins.list[dict], str], None]:
        """A consistent paged list, one ``(items, resourceVersion)`` per page, so a
        caller can trim each page before the next arrives. The resourceVersion
        (and its match rule) go with the first page only: later pages follow
        the ``continue`` token, which pins the snapshot."""
        cont: str | None = None
        while True:
            if cont:
                out = await self.list(res, namespace, limit=page, continue_=cont, **kw)
            else:
                out = await self.list(
                    res, namespace, limit=page, resource_version=resource_version, resource_version_match=resource_version_match, **kw
                )
            meta = out.get("metadata") or {}
            cont = meta.get("continue")
            yield out.get("items") or [], meta.get("resourceVersion", "")
            if not cont:
                return

    async def create(self, res: Resource, obj: Mapping[str, Any], namespace: str | None = None, *, decode: bool = True) -> dict:
        """POST ``obj``; the created object, or None with ``decode=False``."""
        ns = namespace or obj.get("metadata", {}).get("namespace")
        return await self.request(
            "POST", res.path(ns), body=with_type(res, obj), params={"fieldManager": self.field_manager}, decode=decode
        )

    async def replace(self, res: Resource, obj: Mapping[str, Any], subresource: str | None = None) -> dict:
        meta = obj["metadata"]
        return await self.request(
            "PUT",
            res.path(meta.get("namespace"), meta["name"], subresource),
            body=with_type(res, obj),
            params={"fieldManager": self.field_manager},
        )

    async def replace_status(self, res: Resource, obj: Mapping[str, Any]) -> dict:
        return await self.replace(res, obj, "status")

    async def patch(
        self,
        res: Resource,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        patch_type: str = "merge",
        subresource: str | None = None,
        force: bool | None = None,
        field_manager: str | None = None,
        decode: bool = True,
    ) -> dict:
        params: dict[str, Any] = {"fieldManager": field_manager or self.field_manager}
        if force is not None:
            params["force"] = force
        return await self.request(
            "PATCH",
            res.path(namespace, name, subresource),
            body=patch,
            content_type=PATCH_TYPES[patch_type],
            params=params,
            decode=decode,
        )

    async def patch_status(self, res: Resource, name: str, patch: Any, namespace: str | None = None, **kw: Any) -> dict:
        return await self.patch(res, name, patch, namespace, subresource="status", **kw)

    async def apply(
        self,
        res: Resource,
        obj: Mapping[str, Any],
        *,
        force: bool = True,
        subresource: str | None = None,
        field_manager: str | None = None,
    ) -> dict:
        """Server-side apply ``obj`` (a partial object holding only the fields we own)."""
        meta = obj["metadata"]
        return await self.patch(
            res,
            meta["name"],
            with_type(res, obj),
            meta.get("namespace") if res.namespaced else None,
            patch_type="apply",
            subresource=subresource,
            force=force,
            field_manager=field_manager,
        )

    async def apply_status(self, res: Resource, obj: Mapping[str, Any], **kw: Any) -> dict:
        return await self.apply(res, obj, subresource="status", **kw)

    async def delete(
        self,
        res: Resource,
        name: str,
        namespace: str | None = None,
        *,
        propagation: str | None = "Background",
        uid: str | None = None,
        resource_version: str | None = None,
    ) -> dict | None:
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if propagation:
            body["propagationPolicy"] = propagation
        pre = {k: v for k, v in (("uid", uid), ("resourceVersion", resource_version)) if v}
        if pre:
            body["preconditions"] = pre
        try:
            return await self.request("DELETE", res.path(namespace, name), body=body)
        except ApiError as e:
            if e.not_found:
                return None
            raise

    async def server_version(self) -> dict:
        return await self.request("GET", "/version")
