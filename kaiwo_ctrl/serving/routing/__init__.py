"""From a request's model name to one of the Model's Pods. The proxy enters once, at
:meth:`.router.Router.acquire`, and gets a ``Lease``.

* :mod:`.resolve` - requested model name -> Model (+ adapter), label selectors;
* :mod:`.router` - the one entry for the pick: ``Router.acquire`` -> ``Lease``;
* :mod:`.fairgate`, :mod:`.fairqueue`, :mod:`.saturation`, :mod:`.fairshare` - fair queuing per tenant
  while a Model is saturated, and the room a tenant over its share leaves to the others; :mod:`.weights` - a tenant's weight from its Namespace;
  :mod:`.fairevents` - the Saturated / SaturationCleared Events on the Model;
* :mod:`.endpoints` - Ready Pods -> endpoint groups, in-flight counts, waiting;
* :mod:`.balance` - LeastLoad and PrefixHash; :mod:`.score` - how loaded an endpoint
  is; :mod:`.prefix` - the prompt prefix PrefixHash hashes;
* :mod:`.scrape`, :mod:`.enginemetrics` - the engines' own load from their ``/metrics``;
* :mod:`.exchange` - per-Model state derived once per version, per-request timing;
* :mod:`.metrics` - the proxy's Prometheus series.
"""
