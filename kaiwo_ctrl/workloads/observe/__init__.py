"""Reading children back: a workload's status from its observed children
(status), preemption and early termination (preemption), fields a child
kind will not change in place (drift) and the status of an object that does
not decode (undecodable). Pure: no I/O; the reconciler hands in what the
caches hold.

May import, of workloads/, only the layers below it: kinds, builders, base.
Contract ``workloads-layers`` in pyproject.toml.
"""
