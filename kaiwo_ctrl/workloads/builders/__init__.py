"""From a checked spec to the pieces of its children: the storage children and
StoragePlan (storage), the pod template (podtemplate), the Ray cluster
(raycluster), the spec's validation, which uses the builders' own parsers so
that what validates is what builds (validation), and the one immutable Plan
that a pass derives and every builder and status mapper reads (plan).
Pure: no I/O, no caches.

May import, of workloads/, only the layers below it: base. Contract
``workloads-layers`` in pyproject.toml.
"""
