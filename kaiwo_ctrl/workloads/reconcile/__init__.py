"""The controller: the desired children of one pass (desired) and the CLI's
offline rendering of them (render), the informers and their trimmed caches
(caches), applying children (children), the status write (statuswrite),
the expiry sweep (sweep), early termination (termination), one reconcile
(reconciler) and the wiring into the manager (controller). The only layer
that talks to the API server.

May import, of workloads/, only the layers below it: observe, kinds, builders,
base. Contract ``workloads-layers`` in pyproject.toml.
"""
