"""kaiwo-ctrl's controller runtime: generic machinery for Kubernetes controllers.

It knows nothing of Kaiwo: it imports no domain package and no model of the
top-level ``api`` package (import-linter contract ``runtime-is-generic``).
Its subpackages form layers, top first; each imports only subpackages of
the layers below it (contract ``runtime-layers``; ``|`` marks two
independent subpackages in one layer):

    manager   the manager (start-up, probes, shutdown) and leader election
    control   controllers, work queues, rate limits, handlers, predicates, read-your-writes
    cache     informers, their stores, the shared cache
    observe   metrics, logs, traces, Events, status conditions
    api       the Kubernetes API client, its transport and wire format
    net       HTTP/1.1 client and server, throw-away TLS certificates
    objects   plain object dicts: paths, diff, quantities, names, ownership
  | process   the event loop, the heap, supervised background tasks

Each subpackage's docstring says what it owns. A new module goes into the
subpackage whose layer it needs, never directly under runtime/.
"""
