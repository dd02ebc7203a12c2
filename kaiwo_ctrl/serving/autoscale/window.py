"""Pure parts of the autoscaler: the moving window and the scaling rule."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field


class Window:
    """A fixed-length moving window of samples; starts filled with ``fill``."""

    def __init__(self, size: int, fill: float = 0.0, samples: Iterable[float] | None = None) -> None:
        self.size = max(1, size)
        self.samples: deque[float] = deque([fill] * self.size, maxlen=self.size)
        if samples is not None:
            for s in list(samples)[-self.size:]:
                self.samples.append(float(s))

    def push(self, value: float) -> None:
        self.samples.append(float(value))

    def mean(self) -> float:
        return sum(self.samples) / self.size


def window_size(time_window: float, interval: float) -> int:
    return max(1, math.ceil(time_window / interval))


@dataclass
class ModelScaling:
    """Per-Model autoscaler state."""

    window: Window
    down_ticks: int = 0
    saved: list[float] = field(default_factory=list)  # the samples last persisted


def target_replicas(avg: float, target_requests: int, min_replicas: int, max_replicas: int | None) -> int:
    target = math.ceil(round(avg, 9) / max(1, target_requests))
    target = max(target, min_replicas)
    if max_replicas is not None:
        target = min(target, max_replicas)
    return target


def decide(current: int, target: int, down_ticks: int, required_down_ticks: int) -> tuple[int | None, int]:
    """(replicas to set or None, new down-tick count).

    A lower target acts once it has been seen on ``required_down_ticks`` earlier
    consecutive ticks (so the scale-down delay has passed since the first).
    """
    if target < current:
        if down_ticks < required_down_ticks:
            return None, down_ticks + 1
        return target, 0
    return (target if target != current else None), 0
