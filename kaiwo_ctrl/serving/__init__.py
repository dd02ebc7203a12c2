"""Serving KubeAI Models, in layers (top first; the ``serving-layers`` import contract):

* :mod:`.command` - flags and wiring of the proxy and the autoscaler;
* :mod:`.autoscale` - the autoscaler: the proxies' and engines' load -> ``spec.replicas``;
* :mod:`.proxy` - the OpenAI-compatible HTTP front; :mod:`.inferencepool` - a Model's
  Pods exported to a Gateway as an InferencePool;
* :mod:`.routing` - from a model name to a Model and then to one of its Pods (the
  router, endpoints, balancing, engine metrics, fair queuing); :mod:`.model` - the
  ``Model`` controller (server Pods, system config, cache, adapters, status). These
  two never import each other, nor do the proxy and the controller;
* :mod:`.limits` - the proxy's limits and their defaults; :mod:`.podcontract` - how a
  Model's server Pods are labelled and annotated, which both sides read.
"""
