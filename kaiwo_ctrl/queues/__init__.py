"""KaiwoQueueConfig: pure building blocks for the queue-config controller.

Everything in this package is side-effect free: functions take the objects the
reconciler read from its caches (plain dicts as stored by the apiserver) and
return desired objects, patches or plans. The reconciler performs the writes.

Modules:

* :mod:`.constants` - label keys, names and Kueue API versions.
* :mod:`.nodepools` - node-pool discovery and node label/taint patches.
* :mod:`.defaults` - default ClusterQueue/Topology and the merge into a queue config.
* :mod:`.kueue` - queue-config spec -> desired Kueue objects, v1beta1 -> v1beta2 translation.
* :mod:`.validate` - bad-input checks naming the offending item.
* :mod:`.owned` - the fields kaiwo-ctrl owns on a Kueue object: normalised comparison and merge.
* :mod:`.plan` - diff desired vs existing Kueue objects into creates/updates/deletes.
* :mod:`.localqueue` - the LocalQueue helper shared by the workload reconcilers.
* :mod:`.status` - desired KaiwoQueueConfig status.
* :mod:`.events` - event reasons/messages for sync writes.

The reconciler itself (:mod:`.controller`) performs the writes: :mod:`.writes`
carries out a plan and waits for the caches, :mod:`.watch` holds its predicates.

Reconcile outline using these pieces::

    result = ensure_default_queue_config(queue_config_or_None, nodes, kaiwo_config)
    # patch nodes (result.node_patches), create result.create or write result.spec
    state = desired_kueue_objects(queue_config, cluster_queue_uids)
    plan = plan_sync(state.objects, existing_kueue_objects, state.hold)
    # deletes, then recreates (delete + create), creates, updates; collect failures
    status = desired_status(current_status, problems=state.problems, out_of_sync=failures_and_waiting)
"""

from .defaults import ensure_default_queue_config, merge_queue_config_spec
from .kueue import desired_kueue_objects, translate_cluster_queue_spec
from .localqueue import desired_local_queue, resolve_local_queue
from .nodepools import discover, node_patches, topology_label_patches
from .plan import plan_sync
from .status import desired_status, status_changed
from .validate import validate

__all__ = [
    "desired_kueue_objects",
    "desired_local_queue",
    "desired_status",
    "discover",
    "ensure_default_queue_config",
    "merge_queue_config_spec",
    "node_patches",
    "plan_sync",
    "resolve_local_queue",
    "status_changed",
    "topology_label_patches",
    "translate_cluster_queue_spec",
    "validate",
]
