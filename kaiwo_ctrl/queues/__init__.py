"""KaiwoQueueConfig: pure building blocks for the queue-config controller.

Everything in this package is side-effect free: functions take the objects the
reconciler read from its caches (plain dicts as stored by the apiserver) and
return desired objects, patches or plans. The reconciler performs the writes.

Modules:

* :mod:`.constants` - label keys, names and Kueue API versions.
* :mod:`.nodepools` - node-pool discovery and node label/taint patches (spec 15.2, 15.3).
* :mod:`.defaults` - default ClusterQueue/Topology and the merge into a queue config (15.4, 15.5).
* :mod:`.kueue` - queue-config spec -> desired Kueue objects, v1beta1 -> v1beta2 translation (15.7).
* :mod:`.validate` - bad-input checks naming the offending item.
* :mod:`.plan` - diff desired vs existing Kueue objects into creates/updates/deletes.
* :mod:`.localqueue` - the LocalQueue helper shared by the workload reconcilers (5.8).
* :mod:`.status` - desired KaiwoQueueConfig status.
"""
