"""The OpenAI-compatible HTTP front. A request names a Model; the handler asks
:mod:`..routing` for an endpoint once and streams the exchange through.

* :mod:`.server` - the routes on the runtime's HTTP/1.1 server, wired to the caches;
* :mod:`.handler` - the OpenAI-compatible routes;
* :mod:`.auth` - who calls, and may they use this Model (``--proxy-auth``);
* :mod:`.multipart` - the ``model`` part of an upload, found as the body arrives;
* :mod:`.forward` - upstream attempts, retries, header hygiene, stream relay;
* :mod:`.deadlines` - request deadlines checked by one sweep;
* :mod:`.listing` - ``GET /v1/models``;
* :mod:`.scale` - scale from zero on a first request.
"""
