"""GPU resource monitoring (idle GPUs flag their workload): pure decisions in :mod:`.gpu`, the
leader-only runnable and its environment in :mod:`.monitor`."""

from .monitor import MonitoringConfigError, ResourceMonitor, read_env, setup

__all__ = ["MonitoringConfigError", "ResourceMonitor", "read_env", "setup"]
