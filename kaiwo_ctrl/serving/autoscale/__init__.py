"""The Model autoscaler: active requests at the proxies -> ``spec.replicas``.

Design (leader only):

* Every proxy replica keeps the gauge ``kaiwo_proxy_active_requests`` per
  Model (held requests and adapter traffic included). Every ``interval`` the
  leader scrapes ``/metrics`` of every proxy replica -- peers found as Ready
  Pods matching a label selector in the operator's namespace, or a fixed list
  of addresses -- and sums the gauge per Model. When any scrape fails the
  tick is skipped rather than taken as a drop in load.
* Engine load: where this process also serves the proxy, its engine scraper
  knows what each Model's server Pods report. For a Model whose every Ready
  Pod reported freshly, the sample is the larger of the engines' running plus
  waiting requests and the proxies' sum (the engines see traffic that bypasses
  the proxies -- a Gateway route, a port-forward, other replicas; the proxies
  see requests held before any Pod takes them, as when scaling from zero).
  Otherwise the proxies' sum alone, as KubeAI does. With no proxy replica to
  scrape, engine load alone still drives the Models it covers.
* Per Model a moving window of ``ceil(timeWindow / interval)`` samples; the
  target is ``ceil(mean / targetRequests)`` clamped to [minReplicas,
  maxReplicas]. Scaling up is immediate; scaling down needs
  ``ceil(scaleDownDelaySeconds / interval)`` consecutive lower targets, and the
  count starts again after each scale-down (KubeAI keeps counting, so a second
  step down followed without delay).
* Writes go through the ``scale`` subresource, only when the target differs.
* The windows are saved in ConfigMap ``<state name>`` (key ``models``: JSON
  keyed by ``<namespace>/<name>``, as ConfigMap keys cannot hold a ``/``),
  created if missing, written only when a window changed. A new leader loads
  them when it takes over, so neither a restart nor a leader change drops or
  resets load.
"""
