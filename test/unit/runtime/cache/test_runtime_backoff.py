from kaiwo_ctrl.runtime.cache.informer import Backoff, strip_managed_fields
from kaiwo_ctrl.runtime.manager.leaderelection import micro_time


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


def test_strip_managed_fields_shares_equal_short_values_at_any_depth():
    import orjson

    raw = b'{"metadata":{"name":"a","labels":{"team":"vision-team"}},"spec":{"x":[{"image":"img:1"},["img:1"]]},"n":3}'
    long_value = "v" * 65
    a, b = orjson.loads(raw), orjson.loads(raw)
    a["spec"]["long"] = long_value
    b["spec"]["long"] = "".join(["v"] * 65)  # equal, not the same object
    a, b = strip_managed_fields(a), strip_managed_fields(b)
    assert a["metadata"]["labels"]["team"] is b["metadata"]["labels"]["team"]
    assert a["spec"]["x"][0]["image"] is b["spec"]["x"][0]["image"] is b["spec"]["x"][1][0]
    assert a["spec"]["long"] == b["spec"]["long"] and a["spec"]["long"] is not b["spec"]["long"]  # long values left alone
    assert a["n"] == 3 and orjson.loads(raw)["spec"] == {k: v for k, v in b["spec"].items() if k != "long"}
