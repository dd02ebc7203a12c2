"""The engine scraper against hostile and broken model Pods (raw sockets on loopback).

Attacks: an endless body, a body that drips slower than the timeout, a lying
Content-Length, garbage instead of HTTP, impossible values, a server that
never answers. Each must end in a counted error, the endpoint's sample
dropped (fallback), the scraper still running -- and an honest engine read
over one kept-alive connection.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from prometheus_client import CollectorRegistry

from kaiwo_ctrl.serving.routing.endpoints import EndpointTracker
from kaiwo_ctrl.serving.routing.scrape import EngineScraper, ScrapeConfig
from support import eventually

GOOD = b"vllm:num_requests_running 3\nvllm:num_requests_waiting 5\nvllm:kv_cache_usage_perc 0.5\n"


class RawServer:
    """Answers every request on a connection with ``answer(writer)``; counts connections and requests."""

    def __init__(self, answer) -> None:
        self.answer, self.connections, self.requests = answer, 0, 0

    async def start(self) -> RawServer:
        self.server = await asyncio.start_server(self._conn, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def _conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while await reader.readuntil(b"\r\n\r\n"):
                self.requests += 1
                await self.answer(writer)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    async def stop(self) -> None:
        self.server.close()


def ok(body: bytes, extra: bytes = b""):
    async def answer(w: asyncio.StreamWriter) -> None:
        w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n%s\r\n" % (len(body), extra) + body)
        await w.drain()
    return answer


async def endless(w: asyncio.StreamWriter) -> None:
    w.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    while True:
        w.write(b"4000\r\n" + b"vllm:num_requests_running 1\n".ljust(0x4000, b"#") + b"\r\n")
        await w.drain()


async def drip(w: asyncio.StreamWriter) -> None:
    w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 4000\r\n\r\n")  # within max_bytes, but never all of it in time
    for _ in range(100):
        w.write(b"vllm:num_requests_running 1\n")
        await w.drain()
        await asyncio.sleep(0.05)


async def lying_length(w: asyncio.StreamWriter) -> None:
    w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 999999999\r\n\r\n" + GOOD)
    await w.drain()


async def garbage(w: asyncio.StreamWriter) -> None:
    w.write(b"\x16\x03\x01garbage, not HTTP\r\n\r\n")
    await w.drain()


async def silent(w: asyncio.StreamWriter) -> None:
    await asyncio.sleep(3600)


def tracker_with(port: int) -> tuple[EndpointTracker, object]:
    t = EndpointTracker()
    t.on_add({"metadata": {"name": "p0", "namespace": "ns", "labels": {"app": "model", "model": "m"},
                           "annotations": {"model-pod-port": str(port)}},
              "status": {"podIP": "127.0.0.1", "conditions": [{"type": "Ready", "status": "True"}]}}, True)
    return t, t.groups[("ns", "m")].endpoints["ns/p0"]


def metric(reg: CollectorRegistry, name: str, **labels: str) -> float:
    return reg.get_sample_value(name, labels) or 0.0


async def run_scraper(answer, config: ScrapeConfig):
    server = await RawServer(answer).start()
    tracker, ep = tracker_with(server.port)
    reg = CollectorRegistry()
    scraper = EngineScraper(tracker, reg, config)
    task = asyncio.create_task(scraper.run())
    return server, ep, reg, scraper, task


async def stop(server, task) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await server.stop()


async def test_an_honest_engine_is_read_over_one_kept_alive_connection():
    server, ep, reg, scraper, task = await run_scraper(ok(GOOD), ScrapeConfig(interval=0.05, timeout=1))
    try:
        await eventually(lambda: server.requests >= 6, what="six scrapes")
        assert server.connections == 1
        assert (ep.engine.running, ep.engine.waiting, ep.engine.kv) == (3, 5, 0.5)
        labels = {"model_namespace": "ns", "model_name": "m", "pod": "p0"}
        assert metric(reg, "kaiwo_proxy_engine_requests_waiting", **labels) == 5
        assert metric(reg, "kaiwo_proxy_engine_data_age_seconds", **labels) < 1
        assert scraper.model_loads() == {"ns/m": 8.0}
    finally:
        await stop(server, task)


@pytest.mark.parametrize("answer, reason", [
    (endless, "too_large"),
    (ok(b"x" * 5000), "too_large"),
    (lying_length, "too_large"),
    (drip, "timeout"),
    (silent, "timeout"),
    (garbage, "connect"),
    (ok(b"vllm:num_requests_waiting -3\n"), "invalid"),
    (ok(b"# HELP nothing\nprocess_cpu_seconds_total 1\n"), "no_series"),
])
async def test_a_hostile_or_broken_answer_is_an_error_and_a_fallback(answer, reason):
    cfg = ScrapeConfig(interval=0.05, timeout=0.3, max_bytes=4096, max_backoff=0.1)
    server, ep, reg, scraper, task = await run_scraper(answer, cfg)
    try:
        from kaiwo_ctrl.serving.routing.score import EngineSample

        ep.engine, ep.engine_until = EngineSample(running=9), time.monotonic() + 60  # an earlier good report
        t0 = time.monotonic()
        await eventually(lambda: metric(reg, "kaiwo_proxy_engine_scrape_errors_total", model_namespace="ns", model_name="m",
                                        reason=reason) >= 2, what=f"two {reason} errors")
        assert ep.engine is None, "a failed read drops the report: back to the proxy's counts"
        assert time.monotonic() - t0 < 5, "each failure is bounded by the timeout"
        assert not task.done(), "the scraper survives"
        assert scraper.model_loads() == {}
    finally:
        await stop(server, task)


async def test_failures_back_off_and_a_recovered_engine_is_read_again():
    state = {"good": False}

    async def answer(w):
        await (ok(GOOD) if state["good"] else ok(b"", b"X: 1\r\n"))(w)

    cfg = ScrapeConfig(interval=0.05, timeout=0.5, max_backoff=0.4)
    server, ep, reg, scraper, task = await run_scraper(answer, cfg)
    try:
        await asyncio.sleep(1.5)
        # 0.05 s ticks for 1.5 s would be 30 reads; doubling back-off capped at 0.4 s allows about 6
        assert 2 <= server.requests <= 10, server.requests
        state["good"] = True
        await eventually(lambda: ep.engine is not None, timeout=5, what="read again after the back-off")
    finally:
        await stop(server, task)


async def test_a_pod_that_leaves_is_forgotten_with_its_series():
    server, ep, reg, scraper, task = await run_scraper(ok(GOOD), ScrapeConfig(interval=0.05, timeout=1))
    try:
        await eventually(lambda: ep.engine is not None, what="first read")
        scraper.tracker.on_delete({"metadata": {"name": "p0", "namespace": "ns", "labels": {"app": "model", "model": "m"}}}, False)
        await eventually(lambda: not scraper.pods, what="pod forgotten")
        assert reg.get_sample_value("kaiwo_proxy_engine_requests_running",
                                    {"model_namespace": "ns", "model_name": "m", "pod": "p0"}) is None
    finally:
        await stop(server, task)


async def test_the_scraper_runs_on_a_standby_replica_as_a_manager_runnable_and_stops_at_shutdown():
    """The scraper is the Manager's runnable of every replica (the proxy routes on standbys too):
    it ticks while this replica has not led (the Lease's API server is unreachable), and the
    manager's shutdown ends it (its connection pool closed)."""
    from kaiwo_ctrl.runtime.api.client import Client, RestConfig
    from kaiwo_ctrl.runtime.manager.manager import LeaderElectionConfig, Manager
    from kaiwo_ctrl.runtime.observe.metrics import Metrics
    from kaiwo_ctrl.serving.routing.scrape import attach_scraper

    mgr = Manager(Client(RestConfig(host="http://127.0.0.1:9")), metrics=Metrics(), metrics_addr=None, health_addr=None,
                  leader_election=LeaderElectionConfig(name="kaiwo-test", namespace="kaiwo-system", retry_period=0.05))
    assert attach_scraper(mgr, EndpointTracker(), ScrapeConfig(interval=0)) is None, "interval 0: no scraper"
    scraper = attach_scraper(mgr, EndpointTracker(), ScrapeConfig(interval=0.01))
    assert scraper is not None
    ticks, closed = [], asyncio.Event()
    tick, close = scraper.tick, scraper.pool.close

    def counting_tick() -> None:
        ticks.append(1)
        tick()

    async def recorded_close() -> None:
        await close()
        closed.set()

    scraper.tick, scraper.pool.close = counting_tick, recorded_close  # type: ignore[method-assign]
    stop = asyncio.Event()
    task = asyncio.create_task(mgr.run(stop))
    await eventually(lambda: len(ticks) >= 3, timeout=10, what="scraper ticks on a replica that does not lead")
    assert not mgr.is_leader.is_set() and not closed.is_set()
    stop.set()
    await asyncio.wait_for(task, 10)
    assert closed.is_set(), "the manager's shutdown must stop the scraper"
