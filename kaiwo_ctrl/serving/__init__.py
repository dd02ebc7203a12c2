"""Serving KubeAI Models: the Model controller, the OpenAI-compatible proxy and the autoscaler."""
