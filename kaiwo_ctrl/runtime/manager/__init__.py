"""The manager, which runs everything else: the client, the caches, controllers,
probes and the metrics endpoint, start-up and shutdown order (manager), and
lease-based leader election (leaderelection).

May import (lower layers): control, cache, observe, api, net, objects, process.
Never a domain package, nor the top-level ``api`` models.
"""
