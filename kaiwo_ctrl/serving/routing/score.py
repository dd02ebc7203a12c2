"""How loaded an endpoint is: one pure function and its weights.

An endpoint whose engine reported recently (see :mod:`.scrape`) is scored on
what the engine said, in units of "running requests":

    load = W_WAITING * waiting + W_KV * kv_cache_use
           + W_RUNNING * (running + W_LOCAL * (in flight here now - in flight here when the scrape began))
           + W_PENDING * (in flight here with no answer byte back yet)
           + W_PREFILL * (their prompt tokens to prefill) / TOKENS_PER_LOAD

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
  negative when more finished than were sent; the load never goes below 0);
* other replicas' requests since the scrape are not seen at all, so the
  difference is scaled by this replica's share of the engine's requests: the
  engine's running and waiting requests at the report over this replica's in
  flight when the scrape began, between 1 and ``UNSEEN_MAX``. With one
  replica (and no other way in) the factor is 1; with two sharing the traffic
  it is about 2, so each counts what the other most likely sent too. (In the
  serving bench with two proxy replicas it lowered engine-aware PrefixHash's
  TTFT p99 in both runs that compared, by less than the rounds' spread.)
* a request this replica sent that has no answer byte back yet (no first
  token: it waits for admission or is in its prefill) weighs ``W_PENDING``
  more, as much as a waiting one. This count is exact and never stale, and it
  is what the next request's time to first token waits behind: a prefill of
  a few thousand tokens stalls the engine's batch for a few hundred ms, a
  decoding request adds well under a millisecond to a step. (In the serving
  bench at saturation it cut engine-aware PrefixHash's TTFT p99 by a third.)
* those requests' prompts weigh by their length: the engine prefills them
  before the next request's first token, at a cost proportional to the tokens
  its prefix cache does not hold (the body's bytes over ``BYTES_PER_TOKEN``,
  less the part a PrefixHash home caches), ``W_PREFILL`` per
  ``TOKENS_PER_LOAD`` tokens: an 8,000-token document queued at an engine
  weighs as much as two or three short questions.

With no fresh report (no metrics, a failed scrape, data older than the
staleness bound) the endpoint falls back to KubeAI's measure: the requests in
flight through this proxy replica -- the same unit, so mixed groups compare.

Adapter affinity: an endpoint whose engine reports the requested adapter among
``running_lora_adapters`` (already in GPU memory) gets ``W_AFFINITY`` taken off
its score when choosing -- less than one request, so it breaks ties and near
ties, never outweighs a queue. Endpoints that do not carry the adapter's Pod
label are not candidates at all (KubeAI's rule, kept).

PrefixHash on engine load (:func:`home_acceptable`): the key's home -- where
its last request from this replica went (its prefix is cached there), else
its ring position -- takes the request while its load is at most a slack above
the least loaded endpoint's, else the least loaded endpoint takes it. The slack
is what the cached prefix saves: a key this replica has not routed is cached
nowhere, so ``NEW_SLACK`` only (a tie-breaking preference for the ring, which
keeps replicas agreeing); a key whose last request went to the home gets
``HOME_SLACK`` plus one unit of load per ``TOKENS_PER_LOAD`` tokens of that
last request (its body bytes over ``BYTES_PER_TOKEN``), at most ``SLACK_MAX``.
A turn of a long conversation therefore stays where its thousands of prompt
tokens are cached -- sent elsewhere, it would be prefilled from the start and
be the slowest first token of the run -- while a short one moves to balance
the load. For a key whose prefix is cached at an admitting home, the two
endpoints are compared by :func:`home_load`, on what delays the request's first
token: the engine's waiting requests and KV-cache use, this replica's requests
there without a first token (``HOME_W_PENDING`` each) and their prompts'
prefill, and running requests at ``HOME_W_RUNNING`` (0: a decoding request adds
well under a millisecond to a step, while moving the turn costs its whole
prefill). (In the serving bench at 128 users, steady state, comparing on the
full load sent half of all choices away from the home, for a 47% hit rate
against 66%.)
A cached prefix saves prefill, not the wait for admission: a home
whose engine reports requests waiting (over ``HOME_MAX_WAITING``) or a KV
cache fuller than ``HOME_MAX_KV`` gets only ``NEW_SLACK`` (:func:`admitting`).
KubeAI's ``meanLoadFactor`` bound (125 % of the mean) is far looser at
saturation: at 40 running requests an engine, the home may hold ten more
before anything moves, and by then its KV cache is full and requests queue
there.

A new scorer is one function of an endpoint and the time, and a unit test.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

W_WAITING = 4.0
W_RUNNING = 1.0
W_KV = 2.0
W_LOCAL = 1.0
W_PENDING = 4.0
W_PREFILL = 1.0
W_AFFINITY = 0.5
HOME_SLACK = 1.0
NEW_SLACK = 0.5
TOKENS_PER_LOAD = 1000.0  # prompt tokens whose prefill is worth one unit of load (a pending request weighs W_PENDING)
BYTES_PER_TOKEN = 4.0  # request body bytes per prompt token (about 4 characters a token in English)
SLACK_MAX = 16.0
HOME_MAX_WAITING = 0.0  # a home whose engine has more requests than this waiting for admission gets no slack for its cache
HOME_MAX_KV = 0.9  # ... nor one whose KV cache is fuller than this (the next request would wait for blocks there)
UNSEEN_MAX = 4.0  # the change since a report counts for at most this many times this replica's own (1: not scaled)
HOME_W_RUNNING = 0.0  # a running request's weight when a cached key's home is compared with the least loaded endpoint
HOME_W_PENDING = 1.0  # ... and a request of ours with no first token yet (its prompt counts by W_PREFILL as well)


@dataclass(frozen=True, slots=True)
class EngineSample:
    """What one engine reported (summed over its data-parallel engines)."""

    running: float = 0.0
    waiting: float = 0.0
    kv: float = 0.0  # KV-cache use, 0..1
    adapters: frozenset[str] = frozenset()  # running_lora_adapters


class Endpoint(Protocol):
    """What scoring reads of an endpoint (:class:`.balance.Endpoint`)."""

    key: str
    in_flight: int
    in_flight_base: int
    pending: int
    pending_tokens: float
    pending_by: dict[str, int]
    engine: EngineSample | None
    engine_until: float


def engine_load(s: EngineSample, local: float, w_running: float | None = None) -> float:
    """``local``: the change in this replica's in-flight count since the report (requests that run there now)."""
    wr = W_RUNNING if w_running is None else w_running
    return max(0.0, W_WAITING * s.waiting + wr * (s.running + W_LOCAL * local) + W_KV * s.kv)


def unseen_factor(s: EngineSample, base: int) -> float:
    """Requests reaching the engine for each one from this replica: its requests at the report over this
    replica's in flight when the scrape began, between 1 and ``UNSEEN_MAX`` (1 with none of ours there)."""
    if base <= 0:
        return 1.0
    return min(UNSEEN_MAX, max(1.0, (s.running + s.waiting) / base))


def endpoint_load(
    ep: Endpoint, now: float, adapter: str = "", w_running: float | None = None, w_pending: float | None = None,
) -> float:
    """The endpoint's load at monotonic time ``now``; with ``adapter``, less the affinity bonus. ``w_running`` and
    ``w_pending`` replace ``W_RUNNING`` and ``W_PENDING`` (see :func:`home_load`)."""
    s = ep.engine
    if s is None or now > ep.engine_until:
        return float(ep.in_flight)
    local = float(ep.in_flight - ep.in_flight_base)
    if local:
        local *= unseen_factor(s, ep.in_flight_base)
    wp = W_PENDING if w_pending is None else w_pending
    load = engine_load(s, local, w_running) + wp * ep.pending + W_PREFILL * ep.pending_tokens / TOKENS_PER_LOAD
    if adapter and adapter in s.adapters:
        load -= W_AFFINITY
    return load


def home_load(ep: Endpoint, now: float, adapter: str = "") -> float:
    """What delays a cached key's next first token at ``ep``: :func:`endpoint_load` with running requests weighing
    ``HOME_W_RUNNING`` and pending ones ``HOME_W_PENDING``. Both the home and the least loaded endpoint are compared
    on it, for a key whose prefix is cached at an admitting home."""
    return endpoint_load(ep, now, adapter, HOME_W_RUNNING, HOME_W_PENDING)


def fresh(ep: Endpoint, now: float) -> bool:
    return ep.engine is not None and now <= ep.engine_until


def home_slack(cached_bytes: int | None) -> float:
    """How much more load than the least loaded endpoint a PrefixHash key's home may carry.

    ``cached_bytes``: the body size of the key's last request, which went to the home (its
    prompt is likely cached there); None when the key's prefix is cached nowhere known.
    """
    if cached_bytes is None:
        return NEW_SLACK
    return min(SLACK_MAX, HOME_SLACK + cached_bytes / BYTES_PER_TOKEN / TOKENS_PER_LOAD)


def admitting(s: EngineSample | None) -> bool:
    """Does an engine (its fresh report, or None) admit new requests at once? A cached prefix only saves prefill:
    behind a queue or at a full KV cache the request waits for other requests to finish, cached or not."""
    return s is None or (s.waiting <= HOME_MAX_WAITING and s.kv <= HOME_MAX_KV)


def home_acceptable(home: float, least: float, cached_bytes: int | None = 0) -> bool:
    """May a PrefixHash key's home, at load ``home``, take the request when the least loaded endpoint has ``least``?"""
    return home <= least + home_slack(cached_bytes)
