"""What a KaiwoJob or KaiwoService asks for, and the words every layer above
shares: child names (naming) and labels (labels), condition types
(condtypes), durations (timing), the status values children map to
(childstatus), the observed-children slots (observed), GPU vendors and
counts (gpu), container resources (resources), the cluster settings a pass
reads (world) and the typed view of the object itself (kaiwoobject).
Pure: no I/O, no caches.

May import nothing else of workloads/ (the bottom layer). Contract
``workloads-layers`` in pyproject.toml.
"""
