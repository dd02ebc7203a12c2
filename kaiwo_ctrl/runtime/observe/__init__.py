"""What the process tells the people who run it and the users of its objects:
Prometheus metrics (metrics) and their authenticated endpoint (metricsauth),
structured logs (logging), traces (tracing), core/v1 Events (events) and
status conditions (conditions).

May import (lower layers): api, net, objects, process. Never a domain package,
nor the top-level ``api`` models.
"""
