"""Endpoint choice: LeastLoad and PrefixHash (consistent hashing with bounded loads).

Both strategies only consider endpoints that serve the requested adapter (any
endpoint when no adapter is asked for) and return ``None`` when there is none;
the caller then waits for the next endpoint change and asks again.

PrefixHash places ``replication`` points per endpoint on a 64-bit ring at
``xxh64(endpointKey + str(i))``. A request hashes ``adapter + prefix`` and walks
clockwise from the first point at or after its hash. It takes the first
adapter-capable endpoint whose load is acceptable -- the group carries no
load, or ``load <= (total + 1) / count * meanLoadFactor / 100`` over all
endpoints of the Model -- and falls back to the first adapter-capable endpoint
it met when none is.

"Load" is :func:`.score.endpoint_load`: what the engine reports where it does
(queue, batch, KV-cache use, and this replica's requests since the report and
those still without a first token), else KubeAI's measure, the requests in
flight through this proxy replica. With no engine reports both strategies are
KubeAI's, choice for choice. Where engines report, PrefixHash's bound is the
engine-aware one of :func:`.score.home_acceptable` (``Group.choose_prefix``):
the key's home takes the request while it is within a small slack of the least
loaded endpoint, else the least loaded one does -- not the next ring position,
which holds no more of the prefix than any other endpoint.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import xxhash

from kaiwo_ctrl.serving.routing.score import EngineSample, endpoint_load


@dataclass(eq=False, slots=True)
class Endpoint:
    """One Ready server Pod: ``key`` is ``<namespace>/<pod>``, ``address`` is ``ip:port``."""

    key: str
    address: str
    adapters: frozenset[str] = frozenset()
    in_flight: int = 0
    removed: bool = False
    engine: EngineSample | None = None  # the engine's last report (see .scrape)
    engine_until: float = 0.0  # monotonic time the report goes stale
    in_flight_base: int = 0  # ``in_flight`` when the last report's scrape began
    pending: int = 0  # of ``in_flight``, those with no answer byte back yet (queued or in prefill at the engine)
    pending_tokens: float = 0.0  # their prompt tokens the engine has to prefill (estimated; see .score)
    pending_by: dict[str, int] = field(default_factory=dict)  # of ``pending``, per fair-queue tenant (.saturation)

    def serves(self, adapter: str) -> bool:
        return not adapter or adapter in self.adapters


def hash64(text: str) -> int:
    return xxhash.xxh64_intdigest(text.encode())


def least_load(
    endpoints: Iterable[Endpoint], adapter: str = "", skip: frozenset[str] = frozenset(), now: float = 0.0,
) -> Endpoint | None:
    """The endpoint with the least load at monotonic time ``now`` (first seen wins a tie).

    Endpoints in ``skip`` (already tried by this request) are used only when
    nothing else serves the adapter.
    """
    best: Endpoint | None = None
    spare: Endpoint | None = None
    best_load = spare_load = 0.0
    for ep in endpoints:
        if not ep.serves(adapter):
            continue
        load = ep.in_flight if ep.engine is None else endpoint_load(ep, now, adapter)  # the common case inline
        if ep.key in skip:
            if spare is None or load < spare_load:
                spare, spare_load = ep, load
            continue
        if best is None or load < best_load:
            best, best_load = ep, load
    return best or spare


@dataclass(slots=True)
class Choice:
    endpoint: Endpoint | None
    initial: Endpoint | None = None  # the first adapter-capable endpoint on the walk (the key's home)
    fallback: bool = False  # no endpoint was under the load bound
    examined: int = 0  # ring points looked at
    cached: int = 0  # body bytes of the key's last request, when ``endpoint`` is where it went (its prompt is cached there)


@dataclass
class Ring:
    """The hash ring of one Model's endpoints; ``replication`` is fixed when the ring is created."""

    replication: int
    _hashes: list[int] = field(default_factory=list)
    _owners: list[str] = field(default_factory=list)
    _points: dict[str, list[int]] = field(default_factory=dict)

    def add(self, key: str) -> None:
        if key in self._points:
            return
        self._points[key] = [hash64(f"{key}{i}") for i in range(self.replication)]
        self._rebuild()

    def remove(self, key: str) -> None:
        if self._points.pop(key, None) is not None:
            self._rebuild()

    def _rebuild(self) -> None:
        pts = sorted((h, k) for k, hs in self._points.items() for h in hs)
        self._hashes = [h for h, _ in pts]
        self._owners = [k for _, k in pts]

    def __len__(self) -> int:
        return len(self._hashes)

    def choose(
        self,
        key: str,
        endpoints: Mapping[str, Endpoint],
        total_in_flight: float,
        mean_load_factor: int,
        adapter: str = "",
        skip: frozenset[str] = frozenset(),
        load: Callable[[Endpoint], float] | None = None,
        admits: Callable[[Endpoint], bool] | None = None,
    ) -> Choice:
        """``total_in_flight`` is the group's total ``load`` (default: in-flight counts);
        an endpoint ``admits`` rejects is passed over like one above the bound."""
        n = len(self._hashes)
        if not n or not endpoints:
            return Choice(None)
        bound = (total_in_flight + 1) / len(endpoints) * mean_load_factor / 100
        start = bisect_left(self._hashes, hash64(key))
        initial: Endpoint | None = None
        fallback: Endpoint | None = None
        rejected: set[str] = set()
        examined = 0
        for i in range(n):
            owner = self._owners[(start + i) % n]
            examined += 1
            if owner in rejected:
                continue
            ep = endpoints.get(owner)
            if ep is None or not ep.serves(adapter):
                rejected.add(owner)
                continue
            if initial is None:
                initial = ep
            if owner in skip:
                rejected.add(owner)
                continue
            if fallback is None:
                fallback = ep
            if total_in_flight == 0 or ((ep.in_flight if load is None else load(ep)) <= bound and (admits is None or admits(ep))):
                return Choice(ep, initial, False, examined)
            rejected.add(owner)
            if len(rejected) == len(endpoints):
                break
        return Choice(fallback or initial, initial, True, examined)
