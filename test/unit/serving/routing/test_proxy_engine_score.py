"""The engine-aware scorer, the engine metrics parse (hostile input) and both strategies on engine load."""

from __future__ import annotations

import math
import time

import pytest

from kaiwo_ctrl.serving.routing.balance import Endpoint, Ring, hash64, least_load
from kaiwo_ctrl.serving.routing.enginemetrics import MAX_ADAPTERS, MAX_REQUESTS, BadMetrics, parse_engine_metrics
from kaiwo_ctrl.serving.routing.endpoints import RECENT_KEYS, Group
from kaiwo_ctrl.serving.routing.score import (
    BYTES_PER_TOKEN, HOME_MAX_KV, HOME_SLACK, HOME_W_PENDING, HOME_W_RUNNING, NEW_SLACK, SLACK_MAX, TOKENS_PER_LOAD, W_AFFINITY, W_KV, W_LOCAL, W_PENDING, W_PREFILL,
    W_RUNNING,
    UNSEEN_MAX, W_WAITING, EngineSample, admitting, endpoint_load, home_acceptable, home_load, home_slack,
)

NOW = 100.0


def ep(name: str, *, in_flight: int = 0, sample: EngineSample | None = None, until: float = NOW + 3, base: int | None = None,
       adapters: frozenset[str] = frozenset(), pending: int = 0) -> Endpoint:
    e = Endpoint(f"ns/{name}", f"10.0.0.1:{8000 + len(name)}", adapters, in_flight, pending=pending)
    e.engine, e.engine_until, e.in_flight_base = sample, until, in_flight if base is None else base
    return e


S = EngineSample


@pytest.mark.parametrize("endpoint, adapter, expected", [
    # no report: KubeAI's measure, the in-flight count here
    (ep("a", in_flight=3), "", 3.0),
    # a stale report is ignored
    (ep("a", in_flight=2, sample=S(running=9, waiting=9), until=NOW - 0.001), "", 2.0),
    # a fresh report: waiting > running > KV use
    (ep("a", in_flight=5, sample=S(running=2, waiting=1, kv=0.5)), "", W_WAITING + 2 * W_RUNNING + 0.5 * W_KV),
    # this replica's in-flight change since the scrape began: 3 more sent ...
    (ep("a", in_flight=4, sample=S(running=1), base=1), "", 4.0),
    # ... or 2 of its requests (counted by the engine) finished since
    (ep("a", in_flight=1, sample=S(running=3), base=3), "", 1.0),
    # another replica sends as much (half the engine's requests were this one's): each change counts twice
    (ep("a", in_flight=7, sample=S(running=8, waiting=2), base=5), "", 8 + 2 * W_WAITING + 2 * 2.0),
    (ep("a", in_flight=3, sample=S(running=10), base=5), "", 10 - 2 * 2.0),
    # ... at most UNSEEN_MAX times (an engine with few requests of ours, or one that lies)
    (ep("a", in_flight=2, sample=S(running=100), base=1), "", 100 + UNSEEN_MAX),
    # none of ours at the report: no share to go by, the change counts once
    (ep("a", in_flight=2, sample=S(running=30), base=0), "", 32.0),
    # of those 3, 2 have no first token yet (queued or in prefill at the engine): W_PENDING each on top
    (ep("a", in_flight=4, sample=S(running=1), base=1, pending=2), "", 4.0 + 2 * W_PENDING),
    # without a fresh report pending requests are just in flight (KubeAI's measure)
    (ep("a", in_flight=4, pending=2), "", 4.0),
    # never below zero
    (ep("a", in_flight=0, sample=S(running=1), base=4), "", 0.0),
    # adapter already running on the engine: the affinity bonus; another adapter: none
    (ep("a", sample=S(running=1, adapters=frozenset({"lora-a"}))), "lora-a", 1.0 - W_AFFINITY),
    (ep("a", sample=S(running=1, adapters=frozenset({"lora-a"}))), "lora-b", 1.0),
    # without a fresh report there is no affinity from running_lora_adapters
    (ep("a", in_flight=1, sample=S(adapters=frozenset({"x"})), until=0.0), "x", 1.0),
])
def test_endpoint_load_table(endpoint, adapter, expected):
    assert endpoint_load(endpoint, NOW, adapter) == pytest.approx(expected)


def test_weights_order_waiting_over_running_over_kv():
    one_waiting = S(waiting=1)
    one_running = S(running=1)
    full_cache = S(kv=1.0)
    loads = [endpoint_load(ep(n, sample=s), NOW) for n, s in (("w", one_waiting), ("r", one_running), ("k", full_cache))]
    assert loads[0] > loads[1] > 0 and loads[0] > loads[2] > 0
    assert W_AFFINITY < W_RUNNING, "affinity breaks ties, never outweighs a request"


@pytest.mark.parametrize("states, adapter, chosen", [
    # a long queue behind an idle local count loses to an engine with a short batch
    ({"queue": dict(in_flight=0, sample=S(running=8, waiting=20)), "busy": dict(in_flight=0, sample=S(running=3))}, "", "busy"),
    # no reports anywhere: fewest in flight here (KubeAI)
    ({"a": dict(in_flight=2), "b": dict(in_flight=1), "c": dict(in_flight=5)}, "", "b"),
    # mixed: a reporting idle engine vs a silent endpoint with one in flight here
    ({"silent": dict(in_flight=1), "idle": dict(in_flight=0, sample=S())}, "", "idle"),
    # equal engines: the one running the adapter wins; the unlabelled one is no candidate even when idle
    ({"a": dict(sample=S(running=2), adapters=frozenset({"l"})),
      "b": dict(sample=S(running=2, adapters=frozenset({"l"})), adapters=frozenset({"l"})),
      "c": dict(sample=S())}, "l", "b"),
    # affinity does not outweigh a queue
    ({"a": dict(sample=S(running=1), adapters=frozenset({"l"})),
      "b": dict(sample=S(running=1, waiting=2, adapters=frozenset({"l"})), adapters=frozenset({"l"}))}, "l", "a"),
])
def test_least_load_on_engine_state(states, adapter, chosen):
    eps = [ep(n, **kw) for n, kw in states.items()]
    assert least_load(eps, adapter, now=NOW).key == f"ns/{chosen}"


def test_prefix_hash_bound_uses_engine_load():
    g = Group()
    for name in ("p0", "p1", "p2"):
        g.upsert(Endpoint(f"ns/{name}", f"10.0.0.{name[1]}:8000"))
    home = g.choose_prefix("tenant-1", 64, 125, "", frozenset()).endpoint
    assert home is not None
    # another replica's traffic has queued requests at the home engine: nothing in flight here

    for e in g.endpoints.values():
        e.engine, e.engine_until = S(running=1), time.monotonic() + 60
    home.engine = S(running=8, waiting=6)
    c = g.choose_prefix("tenant-1", 64, 125, "", frozenset())
    assert c.endpoint is not home and c.initial is home and not c.fallback
    # the same with no reports: home, as KubeAI (nothing in flight here)
    for e in g.endpoints.values():
        e.engine = None
    assert g.choose_prefix("tenant-1", 64, 125, "", frozenset()).endpoint is home


def test_ring_choose_without_load_keeps_in_flight_semantics():
    e = {f"ns/p{i}": Endpoint(f"ns/p{i}", f"10.0.0.{i}:8000") for i in range(2)}
    r = Ring(16)
    for k in e:
        r.add(k)
    first = r.choose("key", e, 0, 125).endpoint
    first.in_flight = 10
    assert r.choose("key", e, 10, 125).endpoint is not first


# ------------------------------------------------------------------ parse
VLLM = b"""# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 2.0
vllm:num_requests_waiting{engine="0",model_name="m"} 7.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.5
vllm:lora_requests_info{max_lora="2",running_lora_adapters="old",waiting_lora_adapters=""} 1.70e9
vllm:lora_requests_info{max_lora="2",running_lora_adapters="a,b",waiting_lora_adapters=""} 1.71e9
vllm:prompt_tokens_total{model_name="m"} 12345
"""


def test_parse_vllm_sums_engines_and_takes_latest_adapters():
    s = parse_engine_metrics(VLLM)
    assert s == S(running=5, waiting=7, kv=0.5, adapters=frozenset({"a", "b"}))


def test_parse_older_and_sglang_names():
    assert parse_engine_metrics(b"vllm:num_requests_running 1\nvllm:gpu_cache_usage_perc 0.75\n") == S(running=1, kv=0.75)
    assert parse_engine_metrics(b"vllm:kv_cache_usage_perc 0.1\nvllm:gpu_cache_usage_perc 0.9\nvllm:num_requests_waiting 0\n").kv == 0.1
    assert parse_engine_metrics(b"sglang:num_running_reqs 2\nsglang:num_queue_reqs 4\nsglang:token_usage 0.3\n") == S(2, 4, 0.3)


#: one table row an engine: its /metrics text -> (running, waiting, KV use)
ENGINE_TABLE = [
    ("vllm", b"vllm:num_requests_running 3\nvllm:num_requests_waiting 1\nvllm:kv_cache_usage_perc 0.4\n", (3, 1, 0.4)),
    ("sglang", b"sglang:num_running_reqs 2\nsglang:num_queue_reqs 4\nsglang:token_usage 0.3\n", (2, 4, 0.3)),
    # llama-server --metrics as current llama.cpp prints it: HELP/TYPE lines, no KV figure
    ("llama.cpp", b"# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.\n"
                  b"# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total 120\n"
                  b"# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 2\n"
                  b"# TYPE llamacpp:requests_deferred gauge\nllamacpp:requests_deferred 5\n"
                  b"llamacpp:n_busy_slots_per_decode 1.5\n", (2, 5, 0.0)),
    ("llama.cpp, older", b"llamacpp:requests_processing 1\nllamacpp:requests_deferred 0\n"
                         b"llamacpp:kv_cache_usage_ratio 0.6\nllamacpp:kv_cache_tokens 300\n", (1, 0, 0.6)),
]


@pytest.mark.parametrize(("engine", "body", "want"), ENGINE_TABLE, ids=[row[0] for row in ENGINE_TABLE])
def test_parse_each_engines_own_names(engine, body, want):
    s = parse_engine_metrics(body)
    assert (s.running, s.waiting, s.kv) == want, engine


def test_a_lying_llama_cpp_figure_is_refused():
    with pytest.raises(BadMetrics):
        parse_engine_metrics(b"llamacpp:requests_processing 1\nllamacpp:kv_cache_usage_ratio 7\n")


@pytest.mark.parametrize("body", [
    b"", b"# nothing here\n", b"process_cpu_seconds_total 3\n", b"\x00\xff" * 1000,
    b"vllm:kv_cache_usage_perc 0.5\n",  # no request figures: nothing to route on
    b"vllm:num_requests_running{unterminated 5\n", b"vllm:num_requests_running{a=\"b\"} notanumber\n",
    b"vllm:num_requests_running\n", b"{" * 10000,
])
def test_parse_gives_nothing_for_answers_without_figures(body):
    assert parse_engine_metrics(body) is None


@pytest.mark.parametrize("line", [
    b"vllm:num_requests_running -1", b"vllm:num_requests_waiting NaN", b"vllm:num_requests_waiting +Inf",
    b"vllm:num_requests_running 1e12", b"vllm:kv_cache_usage_perc 1.5",
])
def test_parse_refuses_impossible_values(line):
    with pytest.raises(BadMetrics):
        parse_engine_metrics(line + b"\n")


def test_parse_bounds_adapters_and_survives_huge_labels():
    names = ",".join(f"a{i}" for i in range(1000)) + "," + "x" * 300
    s = parse_engine_metrics(f'vllm:num_requests_running 0\nvllm:lora_requests_info{{running_lora_adapters="{names}"}} 1\n'.encode())
    assert len(s.adapters) <= MAX_ADAPTERS and all(len(a) <= 253 for a in s.adapters)
    big = b'vllm:lora_requests_info{running_lora_adapters="' + b"y" * 100_000 + b'"} 1\nvllm:num_requests_running 1\n'
    assert parse_engine_metrics(big) == S(running=1)
    assert parse_engine_metrics(b"vllm:num_requests_running 1\nvllm:lora_requests_info{x=\"y\"} nan\n").adapters == frozenset()
    assert math.isfinite(parse_engine_metrics(b"vllm:num_requests_running 1 1700000000000\n").running)


def _group(n: int) -> Group:
    g = Group()
    for i in range(n):
        g.upsert(Endpoint(f"ns/p{i}", f"10.0.0.{i}:8000"))
    return g


def _report(g: Group, **samples: EngineSample) -> None:

    for e in g.endpoints.values():
        e.engine, e.engine_until = samples.get(e.key.split("/")[1], S(running=4)), time.monotonic() + 60


def _home_and_next(g: Group, key: str) -> tuple[Endpoint, Endpoint]:
    """The key's home and the endpoint KubeAI would spill to (the next on its ring walk)."""
    home = g.choose_prefix(key, 64, 125, "", frozenset()).endpoint
    nxt = g.choose_prefix(key, 64, 125, "", frozenset({home.key})).endpoint
    return home, nxt


# (home, next on the ring, the third endpoint) engine states, whether the key's last request went to its
# home (its prefix is cached there) -> who takes the request
@pytest.mark.parametrize("home_s, next_s, other_s, cached, chosen", [
    # all equal: the home, for its prefix cache
    (S(running=40, kv=0.9), S(running=40, kv=0.9), S(running=40, kv=0.9), True, "home"),
    (S(running=40, kv=0.9), S(running=40, kv=0.9), S(running=40, kv=0.9), False, "home"),
    # the home is up to HOME_SLACK above the least loaded: still the home, when its cache holds the prefix
    (S(running=40 + HOME_SLACK), S(running=40), S(running=41), True, "home"),
    # a new key is cached nowhere: only NEW_SLACK of preference for the ring's home
    (S(running=40 + HOME_SLACK), S(running=40), S(running=41), False, "next"),
    (S(running=40 + NEW_SLACK), S(running=40), S(running=41), False, "home"),
    # a cached key's home that runs more requests keeps it: a decoding request adds under a millisecond to a step,
    # while moving the turn costs its whole prefill
    (S(running=41 + HOME_SLACK), S(running=44), S(running=40), True, "home"),
    (S(running=48, kv=0.8), S(running=40, kv=0.5), S(running=40, kv=0.5), True, "home"),
    # a new key's home one request over NEW_SLACK: the least loaded -- not the next ring position, which is busier
    (S(running=41 + NEW_SLACK), S(running=44), S(running=40), False, "other"),
    # a home that no longer admits: the least loaded on the full load
    (S(running=40, kv=0.95), S(running=44, kv=0.8), S(running=40, kv=0.5), True, "other"),
    # a waiting request weighs W_WAITING: a home with two waiting is over the slack
    (S(running=38, waiting=2), S(running=40), S(running=40), True, "next"),
    # ... and so is one waiting: a cached prefix saves prefill, not the wait for admission, so a home whose engine
    # queues gets no slack for it
    (S(running=40, waiting=1), S(running=40), S(running=41), True, "next"),
    # a KV cache fuller than HOME_MAX_KV: the next request would wait for blocks there, cached or not
    (S(running=40, kv=0.95), S(running=40, kv=0.5), S(running=41, kv=0.5), True, "next"),
    (S(running=40, kv=HOME_MAX_KV), S(running=40, kv=0.5), S(running=41, kv=0.5), True, "home"),
    # KubeAI's 125 % bound would keep this new key's home (45 <= 1.25 * mean); the engine-aware slack does not
    (S(running=45), S(running=36), S(running=38), False, "next"),
    # the least loaded by the engines' figures, even where the home is below the mean
    (S(running=10, waiting=3), S(running=30), S(running=2), True, "other"),
])
def test_prefix_hash_home_or_least_loaded_table(home_s, next_s, other_s, cached, chosen):
    g = _group(3)
    home, nxt = _home_and_next(g, "tenant-2")
    other = next(e for e in g.endpoints.values() if e is not home and e is not nxt)
    if cached:
        g._remember(hash64("tenant-2"), home.key)
    _report(g, **{home.key[3:]: home_s, nxt.key[3:]: next_s, other.key[3:]: other_s})
    c = g.choose_prefix("tenant-2", 64, 125, "", frozenset())
    assert c.endpoint is {"home": home, "next": nxt, "other": other}[chosen]
    assert c.initial is home and not c.fallback
    assert g.recent[hash64("tenant-2")][0] == c.endpoint.key, "the next request of the key follows its cache"


def test_prefix_hash_follows_the_key_to_where_it_went_last():
    g = _group(3)
    home, nxt = _home_and_next(g, "tenant-6")
    third = next(k[3:] for k in g.endpoints if k not in (home.key, nxt.key))
    _report(g, **{home.key[3:]: S(running=20), nxt.key[3:]: S(running=4), third: S(running=10)})
    first = g.choose_prefix("tenant-6", 64, 125, "", frozenset())
    assert first.endpoint is nxt  # the home is too busy for a new key
    # the home has room again, but the key's prefix is cached where it went: it stays there within HOME_SLACK
    _report(g, **{k[3:]: S(running=10) for k in g.endpoints} | {nxt.key[3:]: S(running=10 + HOME_SLACK)})
    c = g.choose_prefix("tenant-6", 64, 125, "", frozenset())
    assert c.endpoint is nxt and c.initial is nxt
    # that endpoint went away: the ring's home again
    g.remove(nxt.key)
    assert g.choose_prefix("tenant-6", 64, 125, "", frozenset()).endpoint is home


def test_prefix_hash_key_memory_is_bounded():
    g = _group(2)
    _report(g)
    for i in range(RECENT_KEYS + 50):
        g.choose_prefix(f"k{i}", 64, 125, "", frozenset())
    assert len(g.recent) == RECENT_KEYS and hash64("k0") not in g.recent and hash64(f"k{RECENT_KEYS + 49}") in g.recent


@pytest.mark.parametrize("home, least, cached, ok", [
    (10.0, 10.0, 0, True), (10.0, 10.0, None, True),
    (10.0 + HOME_SLACK, 10.0, 0, True), (10.0 + HOME_SLACK + 0.01, 10.0, 0, False),
    (10.0 + NEW_SLACK, 10.0, None, True), (10.0 + NEW_SLACK + 0.01, 10.0, None, False),
    (0.0, 0.0, 0, True),
    # a long conversation's last turn (16,000 bytes = 4,000 tokens) went to the home: 4 more units of slack
    (10.0 + HOME_SLACK + 4, 10.0, 16000, True), (10.0 + HOME_SLACK + 4.01, 10.0, 16000, False),
    # capped: a huge cached prompt never pins a key to a home beyond SLACK_MAX
    (10.0 + SLACK_MAX, 10.0, 10**9, True), (10.0 + SLACK_MAX + 0.01, 10.0, 10**9, False),
])
def test_home_acceptable_table(home, least, cached, ok):
    assert TOKENS_PER_LOAD == 1000 and BYTES_PER_TOKEN == 4, "the table's sizes assume the documented constants"
    assert home_acceptable(home, least, cached) is ok
    assert NEW_SLACK < HOME_SLACK < SLACK_MAX, "a cached prefix is worth more queue than a new one"


def test_home_slack_grows_with_the_cached_prompt():
    sizes = [0, 1000, 4000, 16000, 64000, 10**6]
    slacks = [home_slack(n) for n in sizes]
    assert slacks == sorted(slacks) and slacks[0] == HOME_SLACK and slacks[-1] == SLACK_MAX
    assert home_slack(None) == NEW_SLACK


def test_prefix_hash_keeps_a_long_conversation_home_and_moves_a_short_one():
    g = _group(3)
    home, _ = _home_and_next(g, "long")
    _report(g, **{k[3:]: S(running=10) for k in g.endpoints})
    g.acquire(home, 2000)  # two requests of ours wait for their first token at the home: 3,000 tokens to prefill
    g.acquire(home, 1000)
    assert home_load(home, time.monotonic()) - 10 * HOME_W_RUNNING == pytest.approx(2 * HOME_W_PENDING + 3 * W_PREFILL)
    g._remember(hash64("long"), home.key, 16000)  # its last turn: 4,000 prompt tokens, cached at the home
    assert g.choose_prefix("long", 64, 125, "", frozenset(), 16400).endpoint is home
    g._remember(hash64("short"), home.key, 400)  # a short exchange: little to lose, so it moves
    assert g.choose_prefix("short", 64, 125, "", frozenset(), 800).endpoint is not home
    assert g.recent[hash64("long")] == (home.key, 16400), "the size remembered is the request just routed"


def test_prefix_hash_counts_what_this_replica_sent_since_the_scrape():
    g = _group(3)
    home, _ = _home_and_next(g, "tenant-4")
    _report(g)  # every engine reported 4 running
    g._remember(hash64("tenant-4"), home.key)
    sent = []
    for _ in range(12):  # a burst between two scrapes, no first token back yet
        sent.append(g.acquire(g.choose_prefix("tenant-4", 64, 125, "", frozenset()).endpoint))
    each = HOME_W_RUNNING * W_LOCAL + HOME_W_PENDING  # a request without a first token, as the home is compared
    first = int(HOME_SLACK // each) + 1  # the home takes what its slack allows, then the least loaded do
    assert sent[:first] == [home] * first and sent[first] is not home
    loads = [endpoint_load(e, time.monotonic()) for e in g.endpoints.values()]
    assert max(loads) - min(loads) <= (W_LOCAL + W_PENDING) * first
    # first tokens came back for everything sent: each counts as one running request again
    for e in sent:
        g.answered(e)
    assert [endpoint_load(e, time.monotonic()) for e in g.endpoints.values()] == [4 + W_LOCAL * e.in_flight for e in g.endpoints.values()]


def test_prefix_hash_skips_tried_and_incapable_endpoints():
    g = Group()
    for i in range(3):
        g.upsert(Endpoint(f"ns/p{i}", f"10.0.0.{i}:8000", frozenset({"l"}) if i else frozenset()))
    _report(g, p0=S(), p1=S(running=20), p2=S(running=20))
    c = g.choose_prefix("tenant-5", 64, 125, "l", frozenset())
    assert c.endpoint.key != "ns/p0"  # idle, but it does not serve the adapter
    tried = c.endpoint.key
    c = g.choose_prefix("tenant-5", 64, 125, "l", frozenset({tried}))
    assert c.endpoint.key not in (tried, "ns/p0")


def test_prefix_hash_without_reports_is_kubeai():
    g = _group(3)
    home, nxt = _home_and_next(g, "tenant-3")
    for e in g.endpoints.values():
        for _ in range(30 if e is home else 10):
            g.acquire(e)
    # stale reports are ignored: over the 125 % bound, the home spills to the next ring position, as KubeAI's
    _report(g, **{home.key[3:]: S()})
    for e in g.endpoints.values():
        e.engine_until = 0.0
    c = g.choose_prefix("tenant-3", 64, 125, "", frozenset())
    assert c.endpoint is nxt and c.initial is home


def test_pending_prompt_tokens_weigh_by_length():
    g = _group(2)
    _report(g)  # both engines: 4 running
    a, b = g.endpoints.values()
    g.acquire(a, 8000)  # one 8,000-token document queued for prefill here
    for _ in range(2):
        g.acquire(b, 100)  # two short questions there
    now = time.monotonic()
    assert endpoint_load(a, now) == pytest.approx(4 + W_LOCAL + W_PENDING + W_PREFILL * 8000 / TOKENS_PER_LOAD)
    assert endpoint_load(b, now) == pytest.approx(4 + 2 * W_LOCAL + 2 * W_PENDING + W_PREFILL * 200 / TOKENS_PER_LOAD)
    assert least_load(g.endpoints.values(), now=now) is b, "the long prefill delays the next first token more"
    g.answered(a, 8000)
    assert a.pending == 0 and a.pending_tokens == 0
    for _ in range(2):
        g.answered(b, 100)
    assert b.pending_tokens == 0
    # the proxy's own counts (no fresh report) know nothing of tokens: KubeAI's measure
    for e in g.endpoints.values():
        e.engine_until = 0.0
    g.acquire(a, 8000)
    assert endpoint_load(a, time.monotonic()) == 2.0


def test_prefix_choice_tells_how_much_the_endpoint_caches():
    g = _group(3)
    _report(g)
    first = g.choose_prefix("conv", 64, 125, "", frozenset(), 12000)
    assert first.cached == 0, "a new key is cached nowhere"
    again = g.choose_prefix("conv", 64, 125, "", frozenset(), 13000)
    assert again.endpoint is first.endpoint and again.cached == 12000, "its last request's body is cached where it went"
    # a spill goes where nothing of it is cached
    _report(g, **{first.endpoint.key[3:]: S(running=4, waiting=1)})  # it queues: the cache saves no wait there
    spilled = g.choose_prefix("conv", 64, 125, "", frozenset(), 14000)
    assert spilled.endpoint is not first.endpoint and spilled.cached == 0


def test_admitting_table():
    assert admitting(None), "no report: nothing known against the home"
    assert admitting(S(running=40, kv=HOME_MAX_KV))
    assert not admitting(S(running=40, waiting=1))
    assert not admitting(S(running=40, kv=HOME_MAX_KV + 0.01))


def test_home_load_counts_what_delays_a_first_token():
    assert HOME_W_RUNNING < W_RUNNING and HOME_W_PENDING < W_PENDING
    busy = ep("a", in_flight=6, sample=S(running=40, waiting=1, kv=0.5), base=4, pending=2)
    busy.pending_tokens = 3000
    expected = (W_WAITING + HOME_W_RUNNING * (40 + 2 * W_LOCAL) + 0.5 * W_KV + 2 * HOME_W_PENDING
                + W_PREFILL * 3000 / TOKENS_PER_LOAD)
    assert home_load(busy, NOW) == pytest.approx(expected)
    # forty more decoding requests weigh HOME_W_RUNNING each; one more request of ours in prefill weighs more
    assert home_load(ep("b", sample=S(running=80)), NOW) - home_load(ep("c", sample=S(running=40)), NOW) == 40 * HOME_W_RUNNING
    assert home_load(ep("d", sample=S(), in_flight=1, base=1, pending=1), NOW) > home_load(ep("e", sample=S(running=1)), NOW)
    # no fresh report: KubeAI's measure, as for every load
    assert home_load(ep("f", in_flight=3, pending=2), NOW) == 3.0


def test_an_engine_reporting_a_huge_batch_keeps_only_what_it_caches():
    """A model Pod that lies about its running count (the most the parse accepts) under a cached-home rule that ignores running
    requests: it keeps the conversation it caches while it admits, gets no new key, and loses the cached one once it
    reports a queue."""
    g = _group(3)
    liar, _ = _home_and_next(g, "cached")
    _report(g, **{k[3:]: S(running=4) for k in g.endpoints} | {liar.key[3:]: S(running=MAX_REQUESTS)})
    g._remember(hash64("cached"), liar.key, 8000)
    assert g.choose_prefix("cached", 64, 125, "", frozenset(), 8400).endpoint is liar
    new_keys = [f"new-{i}" for i in range(200) if g.ring.choose(f"new-{i}", g.endpoints, 0, 125).endpoint is liar]
    assert new_keys, "some new keys hash to the liar"
    assert all(g.choose_prefix(k, 64, 125, "", frozenset()).endpoint is not liar for k in new_keys)
    _report(g, **{k[3:]: S(running=4) for k in g.endpoints} | {liar.key[3:]: S(running=MAX_REQUESTS, waiting=1)})
    assert g.choose_prefix("cached", 64, 125, "", frozenset(), 8800).endpoint is not liar
