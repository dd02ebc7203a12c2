"""The OpenAI-compatible front door.

Requests name a Model; the proxy resolves it from the Model informer, picks a
Ready server Pod of that Model (endpoints tracked from the Pod informer) by the
Model's load-balancing strategy, and streams the exchange through. Modules:

* :mod:`.router` - where the upstream is chosen: ``Router.acquire`` -> ``Lease``, the one entry;
* :mod:`.endpoints` - Ready Pods -> endpoint groups, in-flight counts, waiting;
* :mod:`.balance` - LeastLoad and PrefixHash (consistent hashing, bounded loads);
* :mod:`.prefix` - the prompt prefix PrefixHash hashes, per route;
* :mod:`.resolve` - requested model name -> Model (+ adapter), label selectors;
* :mod:`.handler` / :mod:`.server` - the routes and the server runnable (on the
  lean HTTP/1.1 server and client of the runtime, ``http1server`` and ``http1``);
* :mod:`.exchange` - per-Model state derived once per version, per-request timing;
* :mod:`.forward` - upstream attempts, retries, header hygiene, stream relay;
* :mod:`.metrics` - Prometheus series of the proxy.
"""
