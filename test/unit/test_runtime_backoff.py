from kaiwo_ctrl.runtime.informer import Backoff, strip_managed_fields
from kaiwo_ctrl.runtime.leaderelection import micro_time


def test_backoff_grows_caps_and_resets():
    b = Backoff(initial=1.0, factor=2.0, cap=8.0, reset_after=100.0, jitter=0.0)
    seq = [b.next(now=t) for t in (1, 2, 3, 4, 5, 6)]
    assert seq == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert b.next(now=500) == 1.0  # healthy for longer than reset_after


def test_backoff_jitter_stays_within_bounds():
    b = Backoff(initial=0.8, factor=2, cap=30, jitter=1.0)
    for i in range(20):
        d = b.next(now=float(i))
        assert 0.8 <= d <= 60.0


def test_strip_managed_fields():
    o = {
        "metadata": {
            "name": "x",
            "managedFields": [{"manager": "m"}],
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"},
        }
    }
    assert strip_managed_fields(o) == {"metadata": {"name": "x"}}


def test_micro_time_is_utc_with_microseconds():
    import datetime as dt

    t = micro_time(dt.datetime(2026, 1, 2, 3, 4, 5, 678, tzinfo=dt.timezone.utc))
    assert t == "2026-01-02T03:04:05.000678Z"
