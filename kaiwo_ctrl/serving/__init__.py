"""Model serving: the KubeAI ``Model`` (kubeai.org/v1) controller, its system
config, the server Pod builders, the cache and adapter handling."""
