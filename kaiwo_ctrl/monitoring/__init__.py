"""GPU monitoring: one scrape of the GPU metrics exporter per interval feeds two leader-only
runnables. The older resource monitor (:mod:`.monitor`, pure decisions in :mod:`.gpu`) flags and
may terminate KaiwoJobs/KaiwoServices; idle-GPU reclaim (:mod:`.reclaimer`, pure functions in
:mod:`.owners`, :mod:`.reclaim`, :mod:`.reclaimstatus`, :mod:`.reclaimsettings`) tracks any
opted-in GPU workload in a GpuWorkload and deletes idle ones."""

from .monitor import MonitoringConfigError, ResourceMonitor, read_env, setup
from .reclaimsettings import ReclaimConfigError
from .reclaimsettings import read_env as read_reclaim_env

__all__ = ["MonitoringConfigError", "ReclaimConfigError", "ResourceMonitor", "read_env", "read_reclaim_env", "setup"]
