"""The proxy's limits: each one a ``kaiwo-ctrl run``/``proxy`` flag (``serving/command.py``).

``body_memory`` bounds the request bodies of all connections together (the
operator's container has 2 GiB), ``body_memory_per_client`` what one client
holds of it. Per connection the bounds are: request heads of at most
``max_head_bytes`` on the wire and ``max_headers`` lines; the body being answered, of at most ``max_body_bytes``
(held once; the ``model`` rewrite replaces it with one re-encoded copy, the
parsed form living only while that copy is made); at most ``max_pipelined``
parsed requests waiting, from one read (at most 256 KiB) beyond them; the
answers written and not yet read, at most the transport's high-water mark
(64 KiB) and one write beyond it, as the next request waits for them; and of
the upstream answer, its head (``max_upstream_head_bytes``) and about
``UPSTREAM_BUFFER`` of body (reading from the model server pauses while the
client is slower).

A multipart/form-data body (an audio upload) whose ``model`` part ends within
``multipart_model_window`` bytes is not held whole: the proxy holds that prefix
and about one read, and streams the rest of the form to the endpoint as it
arrives. One whose ``model`` part comes later (the file first, as OpenAI's
examples send it) is held whole after all, exactly as a JSON body is (its
Content-Length taken from ``body_memory``, waiting, 503), and forwarded whole. JSON
bodies are held whole (routing needs their ``model``, PrefixHash their
prompt), within ``max_body_bytes`` and ``body_memory``.
"""

from __future__ import annotations

from dataclasses import dataclass

#: what one upstream connection buffers of an answer before reading from the model server pauses
UPSTREAM_BUFFER = 256 << 10


@dataclass(frozen=True)
class FairLimits:
    """Fair queuing per tenant per Model (see .fairgate); each field a flag."""

    #: off (the default): requests are never queued by tenant (the engines' queues are shared first come, first served)
    enabled: bool = False
    #: requests one tenant may have waiting for one Model (more: 429)
    max_queue: int = 64
    #: seconds a request may wait in its tenant's queue (then 429)
    max_wait: float = 30.0
    #: tenants waiting for one Model at once (more: 429)
    max_tenants: int = 256
    #: of an engine that reports, this replica's requests there without a first token at most (else it has no room)
    max_pending: int = 1
    #: while another tenant is active on the Model, room a tenant over its share leaves free on every engine, in
    #: requests (0: none; .fairshare)
    reserve: int = 4
    #: while another tenant is active, a tenant over its share sends no new request to an engine where a tenant
    #: under its share has one without a first token (.fairshare)
    prefill_yield: bool = True
    #: while a tenant is over its share, the Model's first endpoints (as many as the others' share of the requests in
    #: flight, at least one, never all) take none of its requests and the others' new conversations (.fairshare)
    quiet_engines: bool = True
    #: of an engine that does not report, this replica's requests in flight there at most (0: no cap, never queue)
    in_flight_cap: int = 0
    #: seconds between two saturation Events (Saturated, SaturationCleared) of one Model from one replica, at least
    event_interval: float = 60.0


@dataclass(frozen=True)
class ProxyLimits:
    #: from a request's first byte to the end of its head (408 after)
    head_timeout: float = 30.0
    #: the longest pause between a request's body bytes (408 after)
    body_idle_timeout: float = 30.0
    #: after a refusal (4xx, 503): what the client still sends is dropped this long, then the connection closes
    linger_timeout: float = 2.0
    #: a request head's size as it came on the wire (431)
    max_head_bytes: int = 64 << 10
    #: header lines in a request head, trailers included (431); Envoy and hyper allow 100
    max_headers: int = 100
    #: requests of one connection parsed and waiting behind the one being answered (then reading pauses)
    max_pipelined: int = 16
    #: once a body has been coming for body_idle_timeout, the least it must have averaged, bytes a second (408); 0: no rate
    min_body_rate: int = 8 << 10
    #: a request body's size (413, sent before the body is read): OpenAI's audio uploads go to 25 MB, plus the form
    max_body_bytes: int = 32 << 20
    #: request bodies held at once across all connections; a request waits (reading paused) until its body
    #: fits, and gets 503 after body_memory_wait of waiting
    body_memory: int = 512 << 20
    body_memory_wait: float = 120.0
    #: of body_memory, what one client holds at most (its address; on the Gateway listener, the route's namespace):
    #: its requests over it wait without holding up anyone else's
    body_memory_per_client: int = 128 << 20
    #: how far into a multipart form its ``model`` part must have ended for the rest to stream (only this much
    #: is held); past it the form is held whole under body_memory
    multipart_model_window: int = 1 << 20
    #: an upstream answer's head (502 when a model server breaks it)
    max_upstream_head_bytes: int = 64 << 10
    #: how long a request waits for a Ready endpoint of its Model (504): long enough for a scale-from-zero
    endpoint_wait: float = 600.0
    #: the overall deadline of a request, streaming included, unless the Model's annotation sets one (504); None: none
    request_timeout: float | None = 1800.0
    #: fair queuing per tenant per Model while the Model is saturated (issue #41)
    fair: FairLimits = FairLimits()
