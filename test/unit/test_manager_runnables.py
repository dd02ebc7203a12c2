"""Manager lifecycle without an API server round trip: leader runnables."""

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

    mgr.add_leader_runnable("one-shot", one_shot)
    mgr.add_leader_runnable("forever", forever)
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

    mgr.add_leader_runnable("broken", broken)
    with pytest.raises(RuntimeError, match="boom"):
        await asyncio.wait_for(mgr.run(asyncio.Event()), 10)
