"""Source-independent parts of the downloader: placement, retries, logging, runner."""

from __future__ import annotations

import io
import json
import threading

import pytest

from kaiwo_ctrl.download.placement import already_present, atomic_destination, safe_join
from kaiwo_ctrl.download.transfer import (
    AuthError,
    ConfigError,
    DownloadError,
    EventLog,
    ExitCode,
    NotFoundError,
    RetryPolicy,
    Runner,
    Task,
    TransientError,
    with_retries,
)


def test_atomic_destination_renames_only_on_success(tmp_path):
    dest = tmp_path / "sub" / "f.bin"
    with atomic_destination(dest, expected_size=3) as tmp:
        assert tmp.parent == dest.parent and tmp.name.startswith(".f.bin.kaiwo-partial-")
        tmp.write_bytes(b"abc")
        assert not dest.exists()
    assert dest.read_bytes() == b"abc"

    with pytest.raises(RuntimeError):
        with atomic_destination(dest) as tmp:
            tmp.write_bytes(b"half")
            raise RuntimeError("connection dropped")
    assert dest.read_bytes() == b"abc"
    assert [p.name for p in dest.parent.iterdir()] == ["f.bin"]


def test_atomic_destination_refuses_short_body_and_clears_stale(tmp_path):
    dest = tmp_path / "f"
    stale = tmp_path / ".f.kaiwo-partial-deadbeef0000"
    stale.write_bytes(b"left by a killed run")
    with pytest.raises(TransientError, match="got 2 of 5 bytes"):
        with atomic_destination(dest, expected_size=5) as tmp:
            tmp.write_bytes(b"ab")
    assert list(tmp_path.iterdir()) == []


def test_already_present(tmp_path):
    f = tmp_path / "x"
    assert not already_present(f, 1)
    f.write_bytes(b"12345")
    assert already_present(f, 5)
    assert not already_present(f, 4)
    assert not already_present(f, None)
    assert not already_present(tmp_path, 0)


def test_safe_join(tmp_path):
    assert safe_join(tmp_path, "a/b.txt") == tmp_path / "a" / "b.txt"
    assert safe_join(tmp_path, "/a/b.txt") == tmp_path / "a" / "b.txt"
    with pytest.raises(ConfigError):
        safe_join(tmp_path, "../x")
    with pytest.raises(ConfigError):
        safe_join(tmp_path, "a/../../x")


def test_retries_transient_then_succeeds_with_backoff():
    log_stream = io.StringIO()
    log = EventLog(log_stream)
    sleeps: list[float] = []
    calls = {"n": 0}

    def flaky():
        calls["n"] += 1
        if calls["n"] < 3:
            raise ConnectionResetError("reset")
        return "ok"

    out = with_retries(
        flaky,
        item="s3[0] b/k",
        policy=RetryPolicy(attempts=5, base_delay=1.0, max_delay=3.0),
        log=log,
        classify=lambda e: TransientError(str(e)),
        sleep=sleeps.append,
    )
    assert out == "ok" and calls["n"] == 3
    assert len(sleeps) == 2 and 0.5 <= sleeps[0] <= 1.0 and 1.0 <= sleeps[1] <= 2.0
    events = [json.loads(line) for line in log_stream.getvalue().splitlines()]
    assert [e["event"] for e in events] == ["retry", "retry"]
    assert events[0]["item"] == "s3[0] b/k"


def test_retries_give_up_and_permanent_errors_are_not_retried():
    log = EventLog(io.StringIO())
    with pytest.raises(TransientError) as err:
        with_retries(lambda: (_ for _ in ()).throw(TransientError("down")), item="i", policy=RetryPolicy(attempts=3, base_delay=0), log=log, sleep=lambda s: None)
    assert "gave up after 3 attempts" in str(err.value) and err.value.item == "i"
    calls = {"n": 0}

    def denied():
        calls["n"] += 1
        raise AuthError("denied")

    with pytest.raises(AuthError):
        with_retries(denied, item="i", policy=RetryPolicy(attempts=5, base_delay=0), log=log, sleep=lambda s: None)
    assert calls["n"] == 1


def test_event_log_scrubs_secrets():
    stream = io.StringIO()
    log = EventLog(stream)
    log.add_secret("s3cr3t/value+x")
    log.error("failed", error="server said: bad key s3cr3t/value+x and s3cr3t%2Fvalue%2Bx")
    line = stream.getvalue()
    assert "s3cr3t" not in line and line.count("***") == 2
    assert json.loads(line)["event"] == "failed"


def test_runner_bounds_parallelism_follows_up_and_stops_after_failure():
    log = EventLog(io.StringIO())
    active = {"now": 0, "max": 0}
    lock = threading.Lock()
    barrier = threading.Event()

    def work():
        with lock:
            active["now"] += 1
            active["max"] = max(active["max"], active["now"])
        barrier.wait(0.05)
        with lock:
            active["now"] -= 1

    def lister():
        return [Task(item="folder", run=work) for _ in range(10)]

    res = Runner(log, parallel=3).run([Task(item="folder", run=lister)] + [Task(item=f"f{i}", run=work) for i in range(5)])
    assert res.exit_code == 0 and res.tasks_done == 16
    assert active["max"] <= 3

    ran = []

    def fail():
        raise NotFoundError("object missing")

    res = Runner(log, parallel=1).run([Task(item="bad", run=fail)] + [Task(item=f"later{i}", run=lambda i=i: ran.append(i)) for i in range(5)])
    assert res.exit_code == ExitCode.NOT_FOUND == 4
    assert res.failures[0].item == "bad"
    assert len(ran) < 5  # queued work is dropped after the first failure

    res = Runner(log, parallel=2).run([Task(item="boom", run=lambda: 1 / 0)])
    assert res.exit_code == 1 and isinstance(res.failures[0], DownloadError)
