"""The KaiwoQueueConfig reconciler: node pools -> queue config -> Kueue objects.

:func:`setup` registers, on a runtime :class:`~kaiwo_ctrl.runtime.manager.manager.Manager`:

* the controller ``kaiwoqueueconfig`` (one worker) reconciling the singleton
  ``KaiwoQueueConfig/kaiwo``. Triggers: the queue config itself (create, delete,
  spec changes); Nodes (create, delete, and updates changing
  ``spec.unschedulable``, CPU/memory capacity or labels), debounced
  so a burst of node events becomes a handful of reconciles; the KaiwoConfig
  (spec changes, so edits take effect without a restart); and the Kueue objects
  it manages (so a hand edit or delete of a managed object is repaired);
* the leader-only startup task, run once per start: default topology labels on Nodes
  lacking them, then *ensure default queue config*.

Every read comes from the shared informer caches; the only writes are the ones
the pure planners in this package ask for, so an idle operator writes nothing.
After writing, the reconcile waits (briefly) until the caches show its own
writes, so the next reconcile never plans the same write twice. The watches'
predicates live in :mod:`.watch`; the Kueue writes and the cache waits in :mod:`.writes`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from kaiwo_ctrl.kinds import KAIWOQUEUECONFIGS
from kaiwo_ctrl.nodes import NODES_TRANSFORM, node_informer
from kaiwo_ctrl.runtime.api.client import ApiError
from kaiwo_ctrl.runtime.control.controller import Result
from kaiwo_ctrl.runtime.api.defaulting import installed_schema
from kaiwo_ctrl.runtime.control.handler import Request
from kaiwo_ctrl.runtime.cache.informer import Informer
from kaiwo_ctrl.runtime.manager.manager import Manager
from kaiwo_ctrl.runtime.objects.objpath import deleting, meta, rv, uid
from kaiwo_ctrl.runtime.control.ratelimit import ItemExponentialFailureRateLimiter
from kaiwo_ctrl.runtime.api.resources import NAMESPACES, NODES
from kaiwo_ctrl.settings import settings_for
from kaiwo_ctrl.settings.namespaces import trim_namespace

from .constants import CLUSTER_QUEUE, LOCAL_QUEUE, QUEUE_CONFIG_NAME
from .defaults import default_topology_name, ensure_default_queue_config, queue_config_spec_equivalent
from .kueue import desired_kueue_objects
from .nodepools import NodePool, discover, exclude_control_plane_setting, node_patches, topology_label_patches
from .plan import key_str, object_key, plan_sync
from .status import desired_status, status_changed
from .watch import KueueObjectChanged, NamespaceComesOrGoes, NodeChanged, SpecChanged, always_kaiwo
from .writes import KUEUE_RESOURCES, Expect, KueueWriter, WriteStats, error_text, expect_version, truncate, wait_cache

log = logging.getLogger("kaiwo_ctrl.queues")

CONTROLLER_NAME = "kaiwoqueueconfig"
COMPONENT = "kaiwoqueueconfig-controller"
NAME_ERROR = "only a KaiwoQueueConfig named 'kaiwo' is allowed"

#: Seconds node events are collected before the reconcile runs; node changes
#: must reach the queue config within seconds.
NODE_DEBOUNCE = 1.0
#: Short collection window for events on the Kueue objects we manage (our own writes arrive in bursts).
KUEUE_DEBOUNCE = 0.2
#: Requeue delay while LocalQueues wait for their ClusterQueue or an old object is still terminating.
WAIT_REQUEUE = 1.0
#: Passes per reconcile (LocalQueues need their ClusterQueue's UID, known one pass later).
MAX_PASSES = 3
NODE_WRITE_CONCURRENCY = 32
#: Retry delays after a failed write (one key only, so a short cap keeps repairs timely: e.g. a
#: LocalQueue for a namespace that does not exist yet is created at most this long after it appears).
RETRY_BASE, RETRY_CAP = 0.1, 60.0

# ---------------------------------------------------------------------------
# The reconciler
# ---------------------------------------------------------------------------


class QueueConfigReconciler:
    def __init__(self, mgr: Manager) -> None:
        self.mgr = mgr
        self.client = mgr.client
        self.settings = settings_for(mgr)
        self.expectations = mgr.expectations
        self.nodes = node_informer(mgr)
        self.namespaces = mgr.cache.informer(NAMESPACES, transform=trim_namespace)
        self.queue_configs = mgr.cache.informer(KAIWOQUEUECONFIGS)
        self.kueue: dict[str, Informer] = {kind: mgr.cache.informer(res) for kind, res in KUEUE_RESOURCES.items()}
        self.recorder = mgr.recorder.for_component(COMPONENT)
        self.stats = WriteStats()
        self.writer = KueueWriter(self.client, self.kueue, self.stats, self.recorder)
        self.startup_done = asyncio.Event()
        self._lock: asyncio.Lock | None = None
        self._spec_schema: Mapping[str, Any] | None = None  # the installed CRD's, read once

    @property
    def lock(self) -> asyncio.Lock:
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock

    # ----------------------------------------------------------- reconcile
    async def __call__(self, req: Request) -> Result | None:
        if req.namespace or req.name != QUEUE_CONFIG_NAME:
            raise ValueError(NAME_ERROR)  # only the name kaiwo is allowed; logged and retried with backoff
        async with self.lock:
            self.stats.reconciles += 1
            config = self.settings.current()  # missing -> error, retried with backoff
            queue_config = self.queue_configs.get(QUEUE_CONFIG_NAME)
            if queue_config is not None and deleting(queue_config):
                return Result(requeue_after=WAIT_REQUEUE)  # re-created once the old one is gone
            if queue_config is None or config.spec.dynamically_update_default_cluster_queue:
                queue_config, created = await self.ensure_default(queue_config, config)
                if created:
                    return None  # just created: do not sync from the new object; its event triggers the next run
            else:
                await self.label_nodes(config)
            return await self.sync(queue_config)

    async def label_nodes(self, config: Any) -> None:
        """Give nodes that joined since start their pool and topology labels (and GPU taint).

        Spec 15.8 labels nodes only at start or in dynamic mode, so a GPU node
        added later is invisible to the workloads' GPU maths ("cluster has 0
        GPUs") until the operator restarts. We label it at once; the queue
        config and its ClusterQueue quotas still change only in dynamic mode.
        """
        cfg = config.to_k8s() if hasattr(config, "to_k8s") else config
        nodes = self.nodes.list()
        pools = discover(nodes, exclude_control_plane_setting(cfg))
        patches = node_patches(pools, nodes, cfg)
        if patches:
            await self.patch_nodes(patches, pools, cfg)

    # ------------------------------------------------ ensure default
    async def ensure_default(self, queue_config: dict | None, config: Any) -> tuple[dict, bool]:
        """Discover pools, patch nodes, create or update the queue config.

        Returns the (possibly new) queue config and whether it was created."""
        cfg = config.to_k8s() if hasattr(config, "to_k8s") else config
        if self._spec_schema is None:  # compare with the installed CRD's defaults applied
            schema = await installed_schema(self.client, KAIWOQUEUECONFIGS)
            self._spec_schema = ((schema or {}).get("properties") or {}).get("spec") or {}
        result = ensure_default_queue_config(queue_config, self.nodes.list(), cfg, spec_schema=self._spec_schema)
        if result.node_patches:
            await self.patch_nodes(result.node_patches, result.pools, cfg)
        if result.create is not None:
            try:
                created = await self.client.create(KAIWOQUEUECONFIGS, result.create)
            except ApiError as e:
                if not e.already_exists:
                    raise
                raise ApiError(409, {"reason": "Conflict", "message": "queue config appeared meanwhile"}) from e
            self.stats.queue_config_creates += 1
            log.info("created the default KaiwoQueueConfig", extra={"pools": [p.name for p in result.pools]})
            await wait_cache([expect_version(self.queue_configs, created)])
            return created, True
        assert queue_config is not None
        if result.spec is not None and not queue_config_spec_equivalent(queue_config.get("spec"), result.spec):
            patch = {"metadata": {"resourceVersion": rv(queue_config)}, "spec": result.spec}
            updated = await self.client.patch(KAIWOQUEUECONFIGS, QUEUE_CONFIG_NAME, patch)
            self.stats.queue_config_updates += 1
            log.info("updated the queue config from node pools", extra={"pools": [p.name for p in result.pools]})
            await wait_cache([expect_version(self.queue_configs, updated)])
            return updated, False
        return queue_config, False

    async def patch_nodes(self, patches: Mapping[str, dict], pools: list[NodePool], config: Any) -> None:
        """Apply node label/taint patches, a few at a time; a conflict (taint written with
        the node's resourceVersion) re-reads that node and recomputes its patch."""
        pool_of = {node: pool for pool in pools for node in pool.nodes}
        sem = asyncio.Semaphore(NODE_WRITE_CONCURRENCY)
        expectations: list[Expect] = []

        async def one(name: str, patch: dict) -> None:
            async with sem:
                for attempt in range(5):
                    try:
                        out = await self.client.patch(NODES, name, patch)
                        self.stats.node_patches += 1
                        expectations.append(expect_version(self.nodes, out))
                        return
                    except ApiError as e:
                        if e.not_found:
                            return
                        if not e.conflict or attempt == 4:
                            raise
                    fresh = await self.client.get_or_none(NODES, name)
                    if fresh is None:
                        return
                    pool = pool_of.get(name)
                    again = node_patches([pool], [NODES_TRANSFORM(fresh)], config).get(name) if pool else None
                    if not again:
                        return
                    patch = again

        results = await asyncio.gather(*(one(n, p) for n, p in patches.items()), return_exceptions=True)
        await wait_cache(expectations)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            raise errors[0]

    # ---------------------------------------------------------- sync
    def _namespace_ready(self, name: str | None) -> bool:
        ns = self.namespaces.get(name) if name else None
        return ns is not None and not deleting(ns)

    async def sync(self, queue_config: dict) -> Result | None:
        failures: dict[tuple, str] = {}
        missing_namespaces: dict[tuple, str] = {}
        state = plan = None
        for _ in range(MAX_PASSES):
            uids: dict[str, str] = {
                str(meta(cq).get("name")): str(uid(cq))
                for cq in self.kueue[CLUSTER_QUEUE].list()
                if not deleting(cq) and uid(cq)
            }
            topology = default_topology_name(self.settings.current().to_k8s())
            state = desired_kueue_objects(queue_config, uids, default_topology=topology)
            existing = [o for inf in self.kueue.values() for o in inf.list()]
            plan = plan_sync(state.objects, existing, state.hold, meta(queue_config).get("name") or QUEUE_CONFIG_NAME)
            # A LocalQueue in a namespace that does not exist would only fail:
            # report it and wait for the namespace's create event instead of
            # retrying on a timer (an idle operator writes nothing).
            no_namespace = [o for o in plan.creates if o.get("kind") == LOCAL_QUEUE and not self._namespace_ready(meta(o).get("namespace"))]
            if no_namespace:
                plan.creates = [o for o in plan.creates if o not in no_namespace]
                for o in no_namespace:
                    missing_namespaces[object_key(o)] = f"namespace {meta(o).get('namespace')} does not exist"
            if plan.empty:
                break
            wrote = await self.writer.apply(queue_config, plan, existing, failures)
            if not wrote:
                break
        assert state is not None and plan is not None
        out_of_sync = [f"{key_str(key)}: {reason}" for key, reason in failures.items()]
        out_of_sync += [f"{key_str(key)}: {reason}" for key, reason in missing_namespaces.items()]
        out_of_sync += plan.out_of_sync()
        for lq in state.waiting:
            out_of_sync.append(
                f"{key_str(object_key(lq))}: waiting for ClusterQueue {lq['spec']['clusterQueue']} to be created"
            )
        await self.write_status(queue_config, state.problems, out_of_sync)
        if failures:
            return Result(requeue=True)  # rate-limited retry
        if state.waiting or plan.blocked:
            return Result(requeue_after=WAIT_REQUEUE)
        return None

    async def write_status(self, queue_config: dict, problems: list, out_of_sync: list[str]) -> None:
        current = queue_config.get("status") or {}
        status = desired_status(
            current, problems=problems, out_of_sync=out_of_sync, generation=meta(queue_config).get("generation")
        )
        if not status_changed(current, status):
            return
        try:
            out = await self.expectations.write_status(
                (KAIWOQUEUECONFIGS.kind, "", QUEUE_CONFIG_NAME), queue_config, status,
                lambda patch: self.client.patch_status(KAIWOQUEUECONFIGS, QUEUE_CONFIG_NAME, patch),
                own=False,  # the queue config watch ignores status-only updates (SpecChanged)
            )
        except ApiError as e:
            if e.not_found:
                return
            raise
        self.stats.status_writes += 1
        if status["status"] != current.get("status") and problems:
            self.recorder.warning(queue_config, "KaiwoQueueConfigInvalid", truncate("; ".join(map(str, problems)), 1000))
        await wait_cache([expect_version(self.queue_configs, out)])

    # ------------------------------------------------------ startup
    async def startup(self) -> None:
        """Leader-only startup task: topology labels, then ensure the default queue config.

        Retried with backoff until it succeeds; then it parks, because the manager
        treats a leader runnable that returns as the end of the run."""
        delay = 0.5
        while True:
            try:
                await self.startup_once()
                break
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - retried; the controller keeps running meanwhile
                log.error("queue-config startup task failed, retrying", extra={"error": error_text(e), "delay": delay})
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)
        self.startup_done.set()
        await asyncio.Event().wait()

    async def startup_once(self) -> None:
        config = self.settings.current()
        cfg = config.to_k8s()
        patches = topology_label_patches(self.nodes.list())
        if patches:
            sem = asyncio.Semaphore(NODE_WRITE_CONCURRENCY)
            expectations: list[Expect] = []

            async def one(name: str, patch: dict) -> None:
                async with sem:
                    try:
                        out = await self.client.patch(NODES, name, patch)
                        self.stats.node_patches += 1
                        expectations.append(expect_version(self.nodes, out))
                    except ApiError as e:  # a topology-label failure is logged, not fatal
                        if not e.not_found:
                            log.warning("topology labels not written", extra={"node": name, "error": error_text(e)})

            await asyncio.gather(*(one(n, p) for n, p in patches.items()))
            # pool labelling below adds missing topology labels too: let it see these first
            await wait_cache(expectations)
        async with self.lock:
            queue_config = self.queue_configs.get(QUEUE_CONFIG_NAME)
            if queue_config is not None and deleting(queue_config):
                raise RuntimeError("the queue config is being deleted")
            await self.ensure_default(queue_config, cfg)
        log.info("queue-config startup task done")


def setup(mgr: Manager, *, tracer: Any = None) -> QueueConfigReconciler:
    """Register the KaiwoQueueConfig controller, its watches and the leader-only startup task."""
    rec = QueueConfigReconciler(mgr)
    ctl = mgr.new_controller(
        CONTROLLER_NAME,
        rec,
        workers=1,
        tracer=tracer,
        rate_limiter=ItemExponentialFailureRateLimiter(base=RETRY_BASE, cap=RETRY_CAP),
    )
    ctl.for_(rec.queue_configs, predicates=[SpecChanged()])
    ctl.watches(rec.nodes, always_kaiwo, predicates=[NodeChanged()], debounce=NODE_DEBOUNCE)
    ctl.watches(rec.settings.informer, always_kaiwo, predicates=[SpecChanged()])
    ctl.watches(rec.namespaces, always_kaiwo, predicates=[NamespaceComesOrGoes()], debounce=NODE_DEBOUNCE)
    for informer in rec.kueue.values():
        ctl.watches(informer, always_kaiwo, predicates=[KueueObjectChanged()], debounce=KUEUE_DEBOUNCE)
    rec.controller = ctl  # type: ignore[attr-defined]
    mgr.add_runnable("kaiwoqueueconfig-startup", rec.startup, leader=True)
    return rec
