"""Prometheus series of the proxy, registered in the manager's registry.

* ``kaiwo_proxy_active_requests{model_namespace,model_name}`` - requests parsed
  and resolved, not yet finished (held ones included); adapter traffic counts
  toward its base Model. The autoscaler sums this gauge over proxy replicas.
* ``kaiwo_proxy_requests_total`` and ``kaiwo_proxy_request_duration_seconds``
  per Model and status code;
* ``kaiwo_proxy_overhead_seconds`` - the proxy's own time per request: from
  the request being read to the upstream request being sent, minus the time
  spent waiting for an endpoint;
* ``kaiwo_proxy_upstream_retries_total{reason}``;
* ``kaiwo_proxy_prefixhash_choices_total{outcome}`` (``home``: the key's first
  endpoint; ``spill``: a later one under the load bound; ``fallback``: none was
  under the bound) and ``kaiwo_proxy_prefixhash_ring_points_examined_total``;
* ``kaiwo_proxy_gateway_refused_total`` - requests the Gateway listener refused
  (no or a wrong route token, or a path outside ``/<namespace>/<model>/v1/``);
  no labels: the namespace of a refused request is the client's word;
* ``kaiwo_proxy_auth_refused_total{code}`` - requests refused by the caller check
  (401, 404 not allowed, 503 reviews busy or failing), and
  ``kaiwo_proxy_auth_reviews_total{review,outcome}`` - TokenReviews (``token``) and
  SubjectAccessReviews (``sar``) by outcome (``allowed``, ``denied``, ``error``, ``busy``:
  not made, too many in flight). Cache hits make no review.
* fair queuing (issue #41), per Model and tenant (at most 64 tenant values per Model, then ``other``):
  ``kaiwo_proxy_fair_requests_total{...,tenant,outcome}`` (``direct``: not saturated, not queued;
  ``queued``; ``released``; ``rejected``: 429), ``kaiwo_proxy_fair_queue_length`` and
  ``kaiwo_proxy_fair_wait_seconds`` (time in the queue of released and expired requests).

They are :mod:`kaiwo_ctrl.runtime.observe.lean` series: updated with plain
arithmetic on every request, exposed like prometheus_client's own.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from kaiwo_ctrl.runtime.observe.lean import LeanCounter, LeanGauge, LeanHistogram

ACTIVE = "kaiwo_proxy_active_requests"
LABELS = ("model_namespace", "model_name")
OVERHEAD_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1)
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)


class ProxyMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.active = LeanGauge(ACTIVE, "Active requests per Model (held requests included)", LABELS, registry=r)
        self.requests = LeanCounter("kaiwo_proxy_requests", "Proxied requests per Model and status code", (*LABELS, "code"), registry=r)
        self.duration = LeanHistogram(
            "kaiwo_proxy_request_duration_seconds", "Request duration per Model and status code", (*LABELS, "code"),
            buckets=DURATION_BUCKETS, registry=r,
        )
        self.overhead = LeanHistogram(
            "kaiwo_proxy_overhead_seconds", "Time the proxy itself adds per request (endpoint waits excluded)",
            buckets=OVERHEAD_BUCKETS, registry=r,
        )
        self.retries = LeanCounter("kaiwo_proxy_upstream_retries", "Upstream attempts retried", ("reason",), registry=r)
        self.prefix_choices = LeanCounter("kaiwo_proxy_prefixhash_choices", "PrefixHash choices by outcome", ("outcome",), registry=r)
        self.prefix_examined = LeanCounter(
            "kaiwo_proxy_prefixhash_ring_points_examined", "Ring points examined by PrefixHash choices", registry=r
        )
        self.gateway_refused = LeanCounter(
            "kaiwo_proxy_gateway_refused", "Requests the Gateway listener refused (route token or path)", registry=r
        )
        self.auth_refused = LeanCounter("kaiwo_proxy_auth_refused", "Requests refused by the caller check, by status code",
                                        ("code",), registry=r)
        fair = (*LABELS, "tenant")
        self.fair_requests = LeanCounter("kaiwo_proxy_fair_requests", "Requests through the fair queue by tenant and outcome",
                                         (*fair, "outcome"), registry=r)
        self.fair_queue = LeanGauge("kaiwo_proxy_fair_queue_length", "Requests waiting in the fair queue per tenant", fair, registry=r)
        self.fair_wait = LeanHistogram("kaiwo_proxy_fair_wait_seconds", "Time requests waited in the fair queue", fair,
                                       buckets=DURATION_BUCKETS, registry=r)
        self.auth_reviews = LeanCounter("kaiwo_proxy_auth_reviews", "Token and access reviews of proxy callers, by outcome",
                                        ("review", "outcome"), registry=r)
        for outcome in ("home", "spill", "fallback"):
            self.prefix_choices.labels(outcome)
