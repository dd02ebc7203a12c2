"""KaiwoJob / KaiwoService: pure builders (desired children) and status observation.

Nothing in this package talks to the API server. The reconciler reads its caches,
builds a :class:`~kaiwo_ctrl.workloads.world.World`, calls
:func:`~kaiwo_ctrl.workloads.desired.desired_children` and
:func:`~kaiwo_ctrl.workloads.status.observe`, and applies the results.
"""
