"""What the benchmark scripts read from /proc: a process's CPU seconds and memory."""

from __future__ import annotations

import os
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int | str = "self") -> float:
    """User + system CPU seconds the process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def cpu_seconds_fine(pid: int | str = "self") -> float:
    """CPU seconds (user + system) the process's threads have run, in nanoseconds' resolution
    (their ``schedstat``): a clock tick is 10 ms, as much as hundreds of proxied requests
    take. Threads that have exited are not counted, so compare readings of long-lived
    processes only; falls back to :func:`cpu_seconds` when schedstat is unavailable."""
    total = 0
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                total += int((task / "schedstat").read_text().split()[0])
            except (OSError, IndexError, ValueError):
                pass  # the thread ended meanwhile
    except OSError:
        return cpu_seconds(pid)
    return total / 1e9 if total else cpu_seconds(pid)


def status_kib(field: str, pid: int | str = "self") -> int:
    """A ``VmRSS``/``VmHWM``-style line of /proc/<pid>/status, in KiB (0 when absent)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def rss_mib(pid: int | str = "self") -> float:
    return status_kib("VmRSS", pid) / 1024


def peak_rss_mib(pid: int | str = "self") -> float:
    return status_kib("VmHWM", pid) / 1024
