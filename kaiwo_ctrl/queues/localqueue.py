"""The LocalQueue a workload needs - one helper shared by the KaiwoJob and
KaiwoService reconcilers.

:func:`resolve_local_queue` decides, from what the reconciler already has in its
caches, whether a LocalQueue must be created; :func:`desired_local_queue` builds it.
LocalQueues made here carry ``app.kubernetes.io/managed-by: kaiwo-ctrl`` but not the
``kaiwo.silogen.ai/queue-config`` label, and a plain (non-controller) owner reference
to their ClusterQueue: the queue-config sync therefore never deletes them, and they
are garbage-collected when the ClusterQueue goes away.

:func:`create_local_queue` makes the POST, at most one at a time per LocalQueue:
a burst of workloads into a new namespace all find the queue missing from the
cache, and without the guard each would POST it (all but one getting 409).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from kaiwo_ctrl.kinds import LOCALQUEUES
from kaiwo_ctrl.runtime.api.client import ApiError, Client

from .constants import DEFAULT_CLUSTER_QUEUE_NAME
from .kueue import entry_name, local_queue


def desired_local_queue(namespace: str, cluster_queue: str | Mapping[str, Any]) -> dict[str, Any]:
    """LocalQueue ``<cq>`` in ``namespace`` with ``spec.clusterQueue: <cq>``.

    ``cluster_queue`` is the ClusterQueue object (its UID gives the owner reference)
    or just its name (then no owner reference is set).
    """
    if isinstance(cluster_queue, Mapping):
        meta = cluster_queue.get("metadata") or {}
        name, uid = meta["name"], meta.get("uid")
    else:
        name, uid = cluster_queue, None
    return local_queue(namespace, name, qc_name=None, cluster_queue_uid=uid, controller=False)


def queue_name(workload_cluster_queue: str | None, config: Any = None) -> str:
    """``spec.clusterQueue`` of the workload, else ``KaiwoConfig.spec.defaultClusterQueueName``."""
    if workload_cluster_queue:
        return workload_cluster_queue
    if config is not None:
        if hasattr(config, "to_k8s"):
            config = config.to_k8s()
        spec = config.get("spec") if isinstance(config.get("spec"), Mapping) else config
        if spec.get("defaultClusterQueueName"):
            return spec["defaultClusterQueueName"]
    return DEFAULT_CLUSTER_QUEUE_NAME


@dataclass(frozen=True)
class LocalQueueDecision:
    """``action``: ``none`` (nothing to do), ``create`` (create ``local_queue``) or
    ``error`` (fail the reconcile with ``message``)."""

    action: Literal["none", "create", "error"]
    queue: str
    local_queue: dict[str, Any] | None = None
    message: str = ""


def resolve_local_queue(
    namespace: str,
    queue: str,
    queue_config: Any,
    *,
    local_queue_exists: bool,
    cluster_queue: Mapping[str, Any] | None,
) -> LocalQueueDecision:
    """Decide how to ensure LocalQueue ``queue`` in ``namespace``.

    ``queue_config`` is the KaiwoQueueConfig (object, spec or model; ``None`` if it
    does not exist), ``local_queue_exists`` whether LocalQueue ``namespace/queue`` is
    in the cache, ``cluster_queue`` the ClusterQueue ``queue`` from the cache (or
    ``None``).
    """
    if local_queue_exists:
        return LocalQueueDecision("none", queue)
    if hasattr(queue_config, "to_k8s"):
        queue_config = queue_config.to_k8s()
    queue_config = queue_config or {}
    spec = queue_config.get("spec") if isinstance(queue_config.get("spec"), Mapping) else queue_config
    entry = next((e for e in spec.get("clusterQueues") or [] if entry_name(e) == queue), None)
    if entry is None:
        return LocalQueueDecision(
            "error", queue, message=f"cluster queue {queue} is not listed in the KaiwoQueueConfig"
        )
    namespaces = entry.get("namespaces") or []
    if namespaces:
        if namespace in namespaces:
            return LocalQueueDecision("none", queue)  # the queue-config controller creates it
        return LocalQueueDecision(
            "error",
            queue,
            message=(
                f"cluster queue {queue} defines one or more namespaces, "
                "use one of these namespaces to use this cluster queue"
            ),
        )
    if cluster_queue is None:
        return LocalQueueDecision("error", queue, message=f"cluster queue {queue} does not exist")
    return LocalQueueDecision("create", queue, desired_local_queue(namespace, cluster_queue))


# per client: (namespace, name) -> the POST in flight for that LocalQueue; its
# result says whether the queue exists afterwards
_IN_FLIGHT: "weakref.WeakKeyDictionary[Client, dict[tuple[str, str], asyncio.Future[bool]]]" = (
    weakref.WeakKeyDictionary()
)


async def create_local_queue(client: Client, local_queue: Mapping[str, Any]) -> dict[str, Any] | None:
    """Create ``local_queue``; only the caller whose POST made it gets the object.

    Concurrent callers for the same LocalQueue wait for the POST in flight instead
    of making their own, and get ``None`` once it succeeded (as they do when it
    already existed). If that POST failed, each waiter tries again itself, so the
    error reaches every caller that could not be served.
    """
    meta = local_queue["metadata"]
    key = (meta["namespace"], meta["name"])
    pending = _IN_FLIGHT.setdefault(client, {})
    while (other := pending.get(key)) is not None:
        if await asyncio.shield(other):
            return None
    exists: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
    pending[key] = exists
    created: dict[str, Any] | None = None
    try:
        created = await client.create(LOCALQUEUES, local_queue)
        exists.set_result(True)
    except ApiError as e:
        if not e.already_exists:
            raise
        exists.set_result(True)
    finally:
        del pending[key]
        if not exists.done():
            exists.set_result(False)
    return created
