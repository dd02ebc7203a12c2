import pytest

from kaiwo_ctrl.runtime.control.ratelimit import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    ItemFastSlowRateLimiter,
    MaxOfRateLimiter,
    WithMaxWaitRateLimiter,
    default_controller_rate_limiter,
)


class FakeClock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, dt: float) -> None:
        self.t += dt


# --- exponential -----------------------------------------------------------


def test_exponential_worked_sequence_and_cap():
    rl = ItemExponentialFailureRateLimiter()
    got = [rl.when("k") for _ in range(21)]
    expected = [0.005 * 2**n for n in range(18)]  # 5 ms ... 655.36 s
    assert got[:18] == pytest.approx(expected)
    assert got[0] == pytest.approx(0.005)
    assert got[7] == pytest.approx(0.64)
    assert got[17] == pytest.approx(655.36)
    # the 19th failure and every later one is capped
    assert got[18:] == [1000.0, 1000.0, 1000.0]
    assert rl.num_requeues("k") == 21


def test_exponential_cumulative_wait_before_cap_is_about_22_minutes():
    rl = ItemExponentialFailureRateLimiter()
    total = sum(rl.when("k") for _ in range(18))
    assert 21 * 60 < total < 23 * 60


def test_exponential_is_per_item_and_forget_resets():
    rl = ItemExponentialFailureRateLimiter(base=0.001, cap=10)
    assert rl.when("a") == pytest.approx(0.001)
    assert rl.when("a") == pytest.approx(0.002)
    assert rl.when("b") == pytest.approx(0.001)
    assert rl.num_requeues("a") == 2
    assert rl.num_requeues("b") == 1
    rl.forget("a")
    assert rl.num_requeues("a") == 0
    assert rl.when("a") == pytest.approx(0.001)
    assert rl.num_requeues("b") == 1
    rl.forget("never-seen")  # no error


def test_exponential_huge_failure_count_does_not_overflow():
    rl = ItemExponentialFailureRateLimiter(base=0.005, cap=1000)
    for _ in range(5000):
        d = rl.when("k")
    assert d == 1000.0


# --- token bucket -------------------------------------------------------------


def test_bucket_starts_full_then_spaces_requests():
    clock = FakeClock()
    rl = BucketRateLimiter(qps=10, burst=100, clock=clock)
    # the first 100 are free, for any mix of keys
    assert all(rl.when(i) == 0.0 for i in range(100))
    # then each reservation is 100 ms further out
    assert rl.when("x") == pytest.approx(0.1)
    assert rl.when("y") == pytest.approx(0.2)
    assert rl.when("x") == pytest.approx(0.3)


def test_bucket_refills_with_time_up_to_burst():
    clock = FakeClock()
    rl = BucketRateLimiter(qps=10, burst=5, clock=clock)
    for _ in range(5):
        assert rl.when("k") == 0.0
    assert rl.when("k") == pytest.approx(0.1)  # reserved a future token
    clock.advance(0.35)  # pays back the reservation, +2.5 tokens
    assert rl.when("k") == 0.0
    assert rl.when("k") == 0.0
    assert rl.when("k") == pytest.approx(0.05)
    clock.advance(3600)  # refill is capped at burst
    assert [rl.when("k") for _ in range(5)] == [0.0] * 5
    assert rl.when("k") == pytest.approx(0.1)


def test_bucket_does_not_track_items():
    rl = BucketRateLimiter(qps=1, burst=1, clock=FakeClock())
    rl.when("a")
    rl.when("a")
    assert rl.num_requeues("a") == 0
    rl.forget("a")
    # forget did not give the token back
    assert rl.when("a") == pytest.approx(2.0)


def test_bucket_rejects_bad_parameters():
    with pytest.raises(ValueError):
        BucketRateLimiter(qps=0)
    with pytest.raises(ValueError):
        BucketRateLimiter(burst=0)


# --- max-of -------------------------------------------------------------------


def test_max_of_takes_largest_delay_and_forwards_forget():
    clock = FakeClock()
    exp = ItemExponentialFailureRateLimiter(base=0.01, cap=100)
    bucket = BucketRateLimiter(qps=1, burst=2, clock=clock)
    rl = MaxOfRateLimiter(exp, bucket)
    assert rl.when("k") == pytest.approx(0.01)  # bucket free, exp 10 ms
    assert rl.when("k") == pytest.approx(0.02)
    assert rl.when("k") == pytest.approx(1.0)  # bucket empty: 1 s > 40 ms
    assert rl.num_requeues("k") == 3
    rl.forget("k")
    assert rl.num_requeues("k") == 0
    assert exp.num_requeues("k") == 0


def test_max_of_num_requeues_is_max_of_children():
    a = ItemFastSlowRateLimiter(0, 0, 1)
    b = ItemExponentialFailureRateLimiter()
    rl = MaxOfRateLimiter(a, b)
    b.when("k")
    b.when("k")
    a.when("k")
    assert rl.num_requeues("k") == 2


def test_max_of_needs_children():
    with pytest.raises(ValueError):
        MaxOfRateLimiter()


# --- fast/slow ----------------------------------------------------------------


def test_fast_slow():
    rl = ItemFastSlowRateLimiter(fast=0.1, slow=5.0, max_fast_attempts=3)
    assert [rl.when("k") for _ in range(5)] == [0.1, 0.1, 0.1, 5.0, 5.0]
    assert rl.when("other") == 0.1
    assert rl.num_requeues("k") == 5
    rl.forget("k")
    assert rl.num_requeues("k") == 0
    assert rl.when("k") == 0.1


# --- max wait -----------------------------------------------------------------


def test_with_max_wait_clamps_and_delegates():
    child = ItemExponentialFailureRateLimiter(base=1.0, cap=1000)
    rl = WithMaxWaitRateLimiter(child, max_wait=3.0)
    assert [rl.when("k") for _ in range(4)] == [1.0, 2.0, 3.0, 3.0]
    assert rl.num_requeues("k") == 4
    rl.forget("k")
    assert child.num_requeues("k") == 0
    assert rl.when("k") == 1.0


# --- defaults -----------------------------------------------------------------


def test_default_controller_rate_limiter_with_bucket():
    clock = FakeClock()
    rl = default_controller_rate_limiter(clock=clock)
    # per-key exponential part
    assert rl.when("k") == pytest.approx(0.005)
    assert rl.when("k") == pytest.approx(0.01)
    # the shared bucket (10 qps, burst 100) bites after 100 re-adds in a burst
    for i in range(98):
        rl.when(("other", i))
    assert rl.when("fresh") == pytest.approx(0.1)
    rl.forget("k")
    assert rl.num_requeues("k") == 0


def test_default_controller_rate_limiter_without_bucket():
    rl = default_controller_rate_limiter(bucket=False)
    assert isinstance(rl, ItemExponentialFailureRateLimiter)
    delays = [rl.when(i) for i in range(500)]
    assert delays == [0.005] * 500  # no bucket: a burst of distinct keys is never throttled
