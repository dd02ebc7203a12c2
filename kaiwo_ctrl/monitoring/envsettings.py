"""The metrics endpoint and polling interval of a monitoring loop, read from the environment.

Shared by the older resource monitor (``RESOURCE_MONITORING_*``, :mod:`.monitor`) and idle-GPU
reclaim (``GPU_PREEMPTION_*``, :mod:`.reclaimsettings`): a bad value stops start-up, naming the
variable, instead of falling back silently.
"""

from __future__ import annotations

from collections.abc import Mapping

from api.meta import parse_duration
from kaiwo_ctrl.runtime.net.fetch import split_url


def endpoint_and_interval(
    env: Mapping[str, str], enabled: str, endpoint_var: str, interval_var: str, default_interval: str | None,
    error: type[ValueError],
) -> tuple[str, float]:
    """The endpoint (an http(s) URL with a host) and the interval in seconds (a positive duration;
    required when ``default_interval`` is None); else ``error`` naming the variable."""
    endpoint = (env.get(endpoint_var) or "").strip()
    if not endpoint:
        raise error(f"{endpoint_var} must be set when {enabled}=true")
    try:
        split_url(endpoint)
    except ValueError as e:
        raise error(f"{endpoint_var}={endpoint!r} must be an http:// or https:// URL with a host: {e}") from e
    raw = (env.get(interval_var) or default_interval or "").strip()
    if not raw:
        raise error(f"{interval_var} must be set when {enabled}=true (a duration such as 10s, 1m, 1h30m)")
    try:
        interval = parse_duration(raw).total_seconds()
    except ValueError as e:
        raise error(f"{interval_var}={raw!r} is not a duration (use e.g. 10s, 1m, 1h30m)") from e
    if interval <= 0:
        raise error(f"{interval_var}={raw!r} must be longer than zero")
    return endpoint, interval
