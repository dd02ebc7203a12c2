"""What the benchmark scripts read from /proc: a process's CPU seconds and memory."""

from __future__ import annotations

import os
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int | str = "self") -> float:
    """User + system CPU seconds the process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


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
