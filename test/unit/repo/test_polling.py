"""The suite's one polling helper: which errors end a wait and which only mean "not yet"."""

from __future__ import annotations

import pytest

from support import eventually, wait_until


class Busy(Exception):
    pass


def flaky(failures: int, exc: type[Exception] = Busy):
    """A probe that raises ``failures`` times, then answers 'done'."""
    calls = {"n": 0}

    def probe():
        calls["n"] += 1
        if calls["n"] <= failures:
            raise exc("not yet")
        return "done"

    return probe, calls


def test_a_transient_error_means_poll_again():
    probe, calls = flaky(3)
    assert wait_until(probe, timeout=5, interval=0.001, transient=lambda e: isinstance(e, Busy)) == "done"
    assert calls["n"] == 4


def test_an_error_not_called_transient_ends_the_wait_at_once():
    probe, calls = flaky(3, ValueError)
    with pytest.raises(ValueError):
        wait_until(probe, timeout=5, interval=0.001, transient=lambda e: isinstance(e, Busy))
    assert calls["n"] == 1


def test_without_a_transient_predicate_every_error_ends_the_wait():
    probe, calls = flaky(3)
    with pytest.raises(Busy):
        wait_until(probe, timeout=5, interval=0.001)
    assert calls["n"] == 1


def test_a_transient_error_past_the_deadline_is_reported():
    def probe():
        raise Busy("storage is (re)initializing")

    with pytest.raises(AssertionError, match=r"waiting for storage; last error: storage is \(re\)initializing"):
        wait_until(probe, timeout=0.02, interval=0.001, what="storage", transient=lambda e: True)


async def test_the_async_form_follows_the_same_rules():
    probe, calls = flaky(2)

    async def aprobe():
        return probe()

    assert await eventually(aprobe, timeout=5, interval=0.001, transient=lambda e: isinstance(e, Busy)) == "done"
    assert calls["n"] == 3
    with pytest.raises(ValueError):
        await eventually(flaky(1, ValueError)[0], timeout=5, interval=0.001, transient=lambda e: isinstance(e, Busy))
