"""One informer per (resource, namespace, selectors) per process.

Controllers ask the cache for an informer and register handlers on it, so a
kind watched by three controllers costs one list+watch. Informers must be
requested before :meth:`Cache.start`; asking for an unknown one afterwards
starts it too (and the caller should wait for its sync). There is no lazy
"list everything on first get": reads that are not cached go to the client.

Each informer has exactly one transform, declared once, so what a cache keeps
never depends on which controller asked first (compare controller-runtime's
``cache.Options.ByObject``):

* :meth:`Cache.declare_transform` sets the default of a resource, used by its
  informers that do not declare their own;
* the ``transform`` argument of :meth:`Cache.informer` declares the transform
  of that one informer (resource + namespace + selectors), e.g. the Pods of one
  label selector kept with what their readers need.

Declaring a different transform where one is already declared is an error, and
so is declaring one after the informer it applies to started. Without any
declaration an informer gets
:func:`~kaiwo_ctrl.runtime.cache.informer.strip_managed_fields`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from kaiwo_ctrl.runtime.api.client import Client, Resource
from kaiwo_ctrl.runtime.cache.informer import Informer, InformerMetricsHook, Transform, strip_managed_fields
from kaiwo_ctrl.runtime.cache.store import IndexFunc

_Key = tuple[Resource, str | None, str | None, str | None]


class Cache:
    def __init__(self, client: Client, *, metrics: InformerMetricsHook | None = None, resync_period: float = 10 * 3600):
        self.client = client
        self.metrics = metrics
        self.resync_period = resync_period
        self._informers: dict[_Key, Informer] = {}
        #: resource -> its default transform; informer key -> that informer's own
        self._transforms: dict[Resource | _Key, Transform] = {}
        self._started = False

    def declare_transform(self, resource: Resource, transform: Transform) -> None:
        """The default transform of ``resource``'s informers (those without their own)."""
        self._declare(resource, transform, [k for k in self._informers if k[0] == resource and k not in self._transforms])

    def _declare(self, target: Resource | _Key, transform: Transform, applies_to: list[_Key]) -> None:
        declared = self._transforms.get(target)
        if declared is transform:
            return
        if declared is not None:
            raise ValueError(f"{target}: a different transform is already declared")
        if self._started and applies_to:
            raise ValueError(f"{target}: transform declared after its informer started")
        self._transforms[target] = transform
        for key in applies_to:
            self._informers[key].transform = transform

    def _transform_of(self, key: _Key) -> Transform:
        return self._transforms.get(key) or self._transforms.get(key[0]) or strip_managed_fields

    def informer(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        transform: Transform | None = None,
        indexers: Mapping[str, IndexFunc] | None = None,
    ) -> Informer:
        key = (resource, namespace, label_selector, field_selector)
        if transform is not None:
            self._declare(key, transform, [key] if key in self._informers else [])
        inf = self._informers.get(key)
        if inf is None:
            inf = Informer(
                self.client,
                resource,
                namespace=namespace,
                label_selector=label_selector,
                field_selector=field_selector,
                transform=self._transform_of(key),
                resync_period=self.resync_period,
                metrics=self.metrics,
            )
            self._informers[key] = inf
            if self._started:
                inf.start()
        for name, fn in (indexers or {}).items():
            inf.add_indexer(name, fn)
        return inf

    @property
    def informers(self) -> list[Informer]:
        return list(self._informers.values())

    def start(self) -> None:
        self._started = True
        for inf in self._informers.values():
            inf.start()

    async def wait_for_sync(self, timeout: float = 120.0) -> bool:
        results = await asyncio.gather(*(i.wait_synced(timeout) for i in self._informers.values()))
        return all(results)

    @property
    def synced(self) -> bool:
        return all(i.has_synced for i in self._informers.values())

    async def stop(self) -> None:
        await asyncio.gather(*(i.stop() for i in self._informers.values()))
        self._started = False

    def stats(self) -> dict[str, Any]:
        return {str(i.resource): len(i.store) for i in self._informers.values()}
