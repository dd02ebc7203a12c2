"""Scale-from-zero: a request for a Model at 0 replicas sets it to 1.

Only Models with autoscaling enabled are touched. The write goes through the
``scale`` subresource as a JSON patch that first tests for 0 replicas, so a
proxy with a stale cache can never undo a scale-up someone else made; a failed
test (422) or a conflict means another writer got there first. Concurrent
requests for one Model share one write.
"""

from __future__ import annotations

import asyncio
import logging

from kaiwo_ctrl.kinds import MODELS
from kaiwo_ctrl.runtime.client import ApiError, Client
from kaiwo_ctrl.serving.proxy.resolve import ProxyError, Target

log = logging.getLogger("kaiwo_ctrl.serving.proxy.scale")


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
            task = self._pending[key] = asyncio.create_task(self._scale_up(t.namespace, t.name))
            task.add_done_callback(lambda _: self._pending.pop(key, None))
        await asyncio.shield(task)

    async def _scale_up(self, namespace: str, name: str) -> None:
        patch = [{"op": "test", "path": "/spec/replicas", "value": 0}, {"op": "replace", "path": "/spec/replicas", "value": 1}]
        try:
            await self.client.patch(MODELS, name, patch, namespace, patch_type="json", subresource="scale")
            log.info("scaled from zero", extra={"model": f"{namespace}/{name}"})
        except ApiError as e:
            if e.status in (409, 422):
                return  # replicas were no longer 0
            log.warning("scale from zero failed", extra={"model": f"{namespace}/{name}", "error": str(e)[:300]})
            raise ProxyError(500, "Internal Server Error: could not scale the Model up from zero") from None
