"""Manager lifecycle without an API server round trip: runnables of each kind, singletons."""

import asyncio

import pytest

from kaiwo_ctrl.runtime.api.client import Client, RestConfig
from kaiwo_ctrl.runtime.manager.manager import Manager
from kaiwo_ctrl.runtime.observe.metrics import Metrics


def manager() -> Manager:
    # no informers are registered, so the manager never talks to this address
    return Manager(Client(RestConfig(host="http://127.0.0.1:9")), metrics=Metrics(), metrics_addr=None, health_addr=None)


async def test_a_runnable_that_finishes_does_not_stop_the_manager():
    mgr = manager()
    finished, still_running = asyncio.Event(), asyncio.Event()

    async def one_shot():
        finished.set()

    async def forever():
        still_running.set()
        await asyncio.Event().wait()

    mgr.add_runnable("one-shot", one_shot, leader=True)
    mgr.add_runnable("forever", forever, leader=True)
    stop = asyncio.Event()
    task = asyncio.create_task(mgr.run(stop))
    await asyncio.wait_for(finished.wait(), 5)
    await asyncio.wait_for(still_running.wait(), 5)
    await asyncio.sleep(0.1)
    assert not task.done(), "the manager must keep running after a runnable returns"
    stop.set()
    await asyncio.wait_for(task, 10)


async def test_a_runnable_that_fails_stops_the_manager_with_its_error():
    mgr = manager()

    async def broken():
        raise RuntimeError("boom")

    mgr.add_runnable("broken", broken, leader=True)
    with pytest.raises(RuntimeError, match="boom"):
        await asyncio.wait_for(mgr.run(asyncio.Event()), 10)


async def test_runnables_start_by_kind_and_the_early_one_stops_last():
    """before_caches: up before the caches and down after everything else (a webhook server);
    default: every replica after the caches (a proxy); leader: with the controllers."""
    mgr = manager()
    events: list[str] = []

    def runnable(name: str):
        async def run():
            events.append(f"start {name}")
            try:
                await asyncio.Event().wait()
            finally:
                events.append(f"stop {name}")
        return run

    mgr.add_runnable("leader", runnable("leader"), leader=True)
    mgr.add_runnable("replica", runnable("replica"))
    mgr.add_runnable("early", runnable("early"), before_caches=True)
    stop = asyncio.Event()
    task = asyncio.create_task(mgr.run(stop))
    await asyncio.wait_for(mgr.is_leader.wait(), 5)
    while len(events) < 3:
        await asyncio.sleep(0.01)
    assert events == ["start early", "start replica", "start leader"]
    stop.set()
    await asyncio.wait_for(task, 10)
    assert set(events[3:5]) == {"stop leader", "stop replica"} and events[5:] == ["stop early"]


@pytest.mark.parametrize("kind", [{}, {"before_caches": True}])
async def test_a_failing_runnable_of_any_replica_stops_the_manager_with_its_error(kind):
    mgr = manager()
    stopped = asyncio.Event()

    async def broken():
        raise OSError("address in use")

    async def leader_work():
        try:
            await asyncio.Event().wait()
        finally:
            stopped.set()

    mgr.add_runnable("broken", broken, **kind)
    mgr.add_runnable("leader-work", leader_work, leader=True)
    with pytest.raises(OSError, match="address in use"):
        await asyncio.wait_for(mgr.run(asyncio.Event()), 10)
    assert stopped.is_set(), "the leader work was stopped, not left running"


def test_runnable_names_are_unique_and_a_leader_one_waits_for_the_caches():
    mgr = manager()

    async def fn():
        return None

    mgr.add_runnable("a", fn)
    with pytest.raises(ValueError, match="duplicate"):
        mgr.add_runnable("a", fn, leader=True)
    with pytest.raises(ValueError, match="waits for the caches"):
        mgr.add_runnable("b", fn, leader=True, before_caches=True)


def test_a_singleton_is_made_once_per_manager():
    one, two = manager(), manager()
    made: list[object] = []

    def make():
        made.append(object())
        return made[-1]

    assert one.singleton(list, make) is one.singleton(list, make)
    assert two.singleton(list, make) is not one.singleton(list, make)
    assert len(made) == 2
