"""The client's long reads: a list decoded item by item as it arrives, and
watch streams.

:class:`StreamingReads` is a part of :class:`~kaiwo_ctrl.runtime.api.client.Client`
(its base class), kept here so each module stays small; it uses the client's
transport, request counts, hooks and request timeout.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncGenerator, Callable, Iterator
from typing import Any

from kaiwo_ctrl.runtime.api.apitypes import ApiError, Resource
from kaiwo_ctrl.runtime.api.liststream import ListSplitter, MalformedList
from kaiwo_ctrl.runtime.api.transport import Transport
from kaiwo_ctrl.runtime.api.watchstream import OnUndecodable, decode_events
from kaiwo_ctrl.runtime.api.wire import LineSplitter, list_params, loads

RequestHook = Callable[[str, str, int, float], None]  # method, path, status, seconds


class StreamingReads:
    transport: Transport
    counts: Counter[str]
    hooks: list[RequestHook]
    request_timeout: float

    async def list_stream(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
        resource_version_match: str | None = None,
        timeout: float | None = None,
        drop_managed_fields: bool = False,
        on_undecodable: OnUndecodable | None = None,
    ) -> AsyncGenerator[tuple[Iterator[dict], str | None], None]:
        """One list, unpaged, decoded item by item as it arrives
        (:mod:`.liststream`): ``(items, None)`` for each run of items that
        arrived together (an iterator that decodes them as they are taken),
        then ``(last items, resourceVersion)``. ``timeout`` bounds the whole
        list. ``drop_managed_fields`` leaves ``metadata.managedFields`` out,
        cut from the bytes before decoding where possible. An item too deeply
        nested to decode or encode goes to ``on_undecodable`` (deepjson.py)
        instead of failing the list.

        The API server sends one list for less CPU than the same objects as a
        streaming list's events, or in pages; with the items taken one by one,
        the client holds no more of it at a time than with pages.
        """
        path = res.path(namespace)
        target = self.transport.target(path, list_params(label_selector, field_selector, resource_version, resource_version_match))
        timeout = timeout or self.request_timeout
        deadline = asyncio.get_running_loop().time() + timeout
        self.counts["GET"] += 1
        t0 = time.monotonic()
        status = 0
        try:
            async with self.transport.stream(target, timeout) as resp:
                status = resp.status
                if status >= 400:
                    async with asyncio.timeout_at(deadline):
                        raw = await resp.read()
                    raise ApiError.from_answer(status, loads(raw), "GET", path, resp.header(b"retry-after"))
                splitter = ListSplitter()
                chunks = aiter(resp)
                while True:
                    async with asyncio.timeout_at(deadline):  # not around the yield: the consumer runs there
                        chunk = await anext(chunks, None)
                    if chunk is None:
                        break
                    if pieces := splitter.feed(chunk):
                        yield splitter.decode(pieces, drop_managed_fields, on_undecodable), None
                pieces, envelope = splitter.finish()
                yield splitter.decode(pieces, drop_managed_fields, on_undecodable), str((envelope.get("metadata") or {}).get("resourceVersion") or "")
                splitter.check_complete()
        except MalformedList as exc:
            raise ApiError(0, str(exc), "GET", path) from exc
        except (TimeoutError, OSError) as exc:
            raise ApiError.transport_failure(exc, "GET", path) from exc
        finally:
            dt = time.monotonic() - t0
            for hook in self.hooks:
                hook("GET", path, status, dt)

    async def watch(self, res: Resource, namespace: str | None = None, **kw: Any) -> AsyncGenerator[dict, None]:
        """Stream watch events as dicts ``{"type": ..., "object": {...}}``
        (one at a time; the arguments are those of :meth:`watch_batches`)."""
        async for batch in self.watch_batches(res, namespace, **kw):
            for ev in batch:
                yield ev

    async def watch_batches(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        resource_version: str | None = None,
        timeout_seconds: int = 300,
        allow_bookmarks: bool = True,
        label_selector: str | None = None,
        field_selector: str | None = None,
        inactivity_timeout: float = 90.0,
        send_initial_events: bool = False,
        drop_managed_fields: bool = False,
        on_undecodable: OnUndecodable | None = None,
    ) -> AsyncGenerator[Iterator[dict], None]:
        """Stream watch events, in batches of those that arrived together (each
        batch an iterator that decodes its events as they are consumed).

        Lines are split on raw bytes (objects can be megabytes), and a stream
        that delivers nothing for ``inactivity_timeout`` seconds is treated
        as dead: with bookmarks on, the server talks at least once a minute.

        ``send_initial_events`` asks for a streaming list ("watch-list"): the
        server first sends every object matching ``resource_version`` (``""``:
        a consistent read) as ADDED, then a BOOKMARK annotated
        ``k8s.io/initial-events-end: "true"``, and then goes on as a watch.
        It requires bookmarks and the ``NotOlderThan`` match, which are set.
        ``drop_managed_fields`` leaves ``metadata.managedFields`` out of the
        objects, cut from the bytes before decoding where possible.
        """
        params = {
            "watch": "true",
            "resourceVersion": resource_version,
            "timeoutSeconds": timeout_seconds,
            "allowWatchBookmarks": "true" if allow_bookmarks or send_initial_events else None,
            "sendInitialEvents": "true" if send_initial_events else None,
            "resourceVersionMatch": "NotOlderThan" if send_initial_events else None,
            "labelSelector": label_selector,
            "fieldSelector": field_selector,
        }
        path = res.path(namespace)
        target = self.transport.target(path, params)
        self.counts["WATCH"] += 1
        try:
            async with self.transport.stream(target, inactivity_timeout, inactivity=inactivity_timeout, long_lived=True) as resp:
                for hook in self.hooks:
                    hook("WATCH", path, resp.status, 0.0)
                if resp.status >= 400:
                    async with asyncio.timeout(self.request_timeout):
                        raw = await resp.read()
                    raise ApiError(resp.status, loads(raw), "WATCH", path)
                splitter = LineSplitter()
                async for chunk in resp:
                    lines = splitter.feed(chunk)
                    if lines:
                        yield decode_events(lines, drop_managed_fields, on_undecodable)
        except (TimeoutError, OSError) as exc:
            raise ApiError.transport_failure(exc, "WATCH", path) from exc
