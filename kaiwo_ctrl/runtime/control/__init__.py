"""Controllers: event handlers and predicates (handler, predicate), the work
queue and its rate limits (workqueue, ratelimit), the reconcile loop
(controller) and read-your-writes over the caches (expectations).

May import (lower layers): cache, observe, api, net, objects, process. Never a
domain package, nor the top-level ``api`` models.
"""
