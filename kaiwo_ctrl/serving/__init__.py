"""Serving KubeAI Models: the ``Model`` (kubeai.org/v1) controller, its system
config, the server Pod builders, the cache and adapter handling, the
OpenAI-compatible proxy and the autoscaler."""
