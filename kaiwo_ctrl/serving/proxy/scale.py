"""Scale-from-zero: a request for a Model at 0 replicas sets it to 1.

Only Models with autoscaling enabled are touched. The write goes through the
``scale`` subresource with the cached Model's resourceVersion as a
precondition, so a proxy with a stale cache can never undo a scale-up someone
else made; a conflict means another writer got there first. Concurrent
requests for one Model share one write.
"""

from __future__ import annotations

import asyncio
import logging

from kaiwo_ctrl.kinds import MODELS
from kaiwo_ctrl.runtime.api.client import ApiError, Client
from kaiwo_ctrl.serving.routing.resolve import ProxyError, Target

log = logging.getLogger("kaiwo_ctrl.serving.proxy.scale")


async def set_replicas(client: Client, namespace: str, name: str, replicas: int, resource_version: str | None = None) -> None:
    """Set ``spec.replicas`` through the ``scale`` subresource.

    With ``resource_version`` the write only applies to that version of the
    Model (409 otherwise). The apiserver cannot serve the scale subresource of
    a Model whose ``spec.replicas`` is unset (500, "field does not exist"), so
    then the Model itself is patched, under the same precondition.
    """
    patch: dict = {"spec": {"replicas": replicas}}
    if resource_version:
        patch["metadata"] = {"resourceVersion": resource_version}
    try:
        await client.patch(MODELS, name, patch, namespace, subresource="scale")
    except ApiError as e:
        if e.status != 500 or "does not exist" not in e.message:
            raise
        await client.patch(MODELS, name, patch, namespace)


class ScaleFromZero:
    def __init__(self, client: Client) -> None:
        self.client = client
        self._pending: dict[tuple[str, str], asyncio.Task[None]] = {}

    @staticmethod
    def needed(t: Target) -> bool:
        spec = t.spec
        return not spec.get("autoscalingDisabled") and not spec.get("replicas")

    async def ensure_running(self, t: Target) -> None:
        if not self.needed(t):
            return
        key = (t.namespace, t.name)
        task = self._pending.get(key)
        if task is None:
            rv = t.model["metadata"].get("resourceVersion")
            task = self._pending[key] = asyncio.create_task(self._scale_up(t.namespace, t.name, rv))
            task.add_done_callback(lambda _: self._pending.pop(key, None))
        await asyncio.shield(task)

    async def _scale_up(self, namespace: str, name: str, rv: str | None) -> None:
        try:
            await set_replicas(self.client, namespace, name, 1, rv)
            log.info("scaled from zero", extra={"model": f"{namespace}/{name}"})
        except ApiError as e:
            if e.conflict:
                return  # the Model changed since we read it (someone else scaled it, most likely)
            log.warning("scale from zero failed", extra={"model": f"{namespace}/{name}", "error": str(e)[:300]})
            raise ProxyError(500, "Internal Server Error: could not scale the Model up from zero") from None
