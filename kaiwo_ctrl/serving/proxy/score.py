"""How loaded an endpoint is: one pure function and its weights.

An endpoint whose engine reported recently (see :mod:`.scrape`) is scored on
what the engine said, in units of "running requests":

    load = W_WAITING * waiting + W_RUNNING * running + W_KV * kv_cache_use
           + W_LOCAL * (in flight here now - in flight here when the scrape began)

* a waiting request weighs most: it waits for a running one to finish before
  it even starts its prefill, and everything sent here queues behind it;
* a running request shares the decode batch (each step gets slower);
* KV-cache use (0..1) weighs up to ``W_KV`` requests: a full cache means the
  engine preempts or stops admitting, so of two equal queues the emptier cache
  wins;
* the engine's figures are up to one interval old: requests this replica sent
  since the scrape began are not in them, and those of its requests that
  finished since are still in them. The difference -- this replica's in-flight
  count now less at the scrape -- is added, one running request each (it is
  negative when more finished than were sent; the load never goes below 0).

With no fresh report (no metrics, a failed scrape, data older than the
staleness bound) the endpoint falls back to KubeAI's measure: the requests in
flight through this proxy replica -- the same unit, so mixed groups compare.

Adapter affinity: an endpoint whose engine reports the requested adapter among
``running_lora_adapters`` (already in GPU memory) gets ``W_AFFINITY`` taken off
its score when choosing -- less than one request, so it breaks ties and near
ties, never outweighs a queue. Endpoints that do not carry the adapter's Pod
label are not candidates at all (KubeAI's rule, kept).

A new scorer is one function of an endpoint and the time, and a unit test.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

W_WAITING = 4.0
W_RUNNING = 1.0
W_KV = 2.0
W_LOCAL = 1.0
W_AFFINITY = 0.5


@dataclass(frozen=True, slots=True)
class EngineSample:
    """What one engine reported (summed over its data-parallel engines)."""

    running: float = 0.0
    waiting: float = 0.0
    kv: float = 0.0  # KV-cache use, 0..1
    adapters: frozenset[str] = frozenset()  # running_lora_adapters


class Endpoint(Protocol):
    """What scoring reads of an endpoint (:class:`.balance.Endpoint`)."""

    in_flight: int
    in_flight_base: int
    engine: EngineSample | None
    engine_until: float


def engine_load(s: EngineSample, local: int) -> float:
    return max(0.0, W_WAITING * s.waiting + W_RUNNING * s.running + W_KV * s.kv + W_LOCAL * local)


def endpoint_load(ep: Endpoint, now: float, adapter: str = "") -> float:
    """The endpoint's load at monotonic time ``now``; with ``adapter``, less the affinity bonus."""
    s = ep.engine
    if s is None or now > ep.engine_until:
        return float(ep.in_flight)
    load = engine_load(s, ep.in_flight - ep.in_flight_base)
    if adapter and adapter in s.adapters:
        load -= W_AFFINITY
    return load


def queued(ep: Endpoint, now: float) -> bool:
    """The engine reported requests waiting: it admits nothing new now."""
    return ep.engine is not None and now <= ep.engine_until and ep.engine.waiting > 0


def fresh(ep: Endpoint, now: float) -> bool:
    return ep.engine is not None and now <= ep.engine_until
