"""The Model's status: replica counts and conditions.

KubeAI writes only ``replicas`` and ``cache``. Beyond that, three conditions
explain what the controller is doing:

* ``ConfigValid``: False names the field that stops Pods being built (an
  unknown resource profile, a missing cache profile, a failing JSON patch).
* ``CacheLoaded``: only with a cache profile; True once the loader finished,
  False/``LoaderFailed`` naming the Job when the loader Job failed.
* ``AdaptersLoaded``: only for a Model with adapters (or a Pod still carrying
  one): False/``Loading`` naming the adapters and Pods being synced,
  False/``LoadFailed`` naming the adapter, the Pod and the error (retried with
  a backoff), ``Waiting`` while a loader sidecar is not Ready, True once every
  server Pod has them. Adapters never change ``Ready`` (the base model serves).
* ``Ready``: True when at least ``spec.replicas`` Pods are Ready.
* ``QuotaReserved``: only for a Model under Kueue (:mod:`.admission`); False
  with Kueue's message while a replica waits for quota (or its LocalQueue
  cannot be made), True when every replica is admitted, Unknown
  (``NotManagedByKueue``) when Kueue's webhook did not take the Pods (its pod
  integration is off), so they run outside any quota.

``replicas.all`` counts live Pods (not failed, not being deleted), unlike
KubeAI which counts failed and terminating Pods too [quirk]. ``replicas.ready``
counts admitted, Ready Pods (a Pod still behind Kueue's admission gate is
never counted Ready).
"""

from __future__ import annotations

import copy
from datetime import datetime, timezone
from collections.abc import Mapping
from typing import Any

from kaiwo_ctrl.kinds import MODELS
from kaiwo_ctrl.runtime.observe.conditions import remove_condition, set_condition
from kaiwo_ctrl.runtime.api.deepjson import ENCODE_LIMIT
from kaiwo_ctrl.runtime.manager.manager import Manager
from kaiwo_ctrl.runtime.manager.skipreport import SkippedObjectReporter

from kaiwo_ctrl.serving.model.adapters import AdapterState
from kaiwo_ctrl.serving.model.admission import Quota, is_gated
from kaiwo_ctrl.serving.model.rollout import is_finished, is_ready, is_terminating

CONFIG_VALID = "ConfigValid"
CACHE_LOADED = "CacheLoaded"
QUOTA_RESERVED = "QuotaReserved"
ADAPTERS_LOADED = "AdaptersLoaded"
READY = "Ready"
MESSAGE_MAX = 1024


def replica_counts(pods: list[dict[str, Any]]) -> dict[str, int]:
    live = [p for p in pods if not is_finished(p) and not is_terminating(p)]
    return {"all": len(live), "ready": sum(1 for p in live if is_ready(p) and not is_gated(p))}


def desired_status(
    model: dict[str, Any],
    *,
    pods: list[dict[str, Any]] | None,
    config_error: str | None,
    cache_loaded: bool | None,
    pod_error: str | None = None,
    cache_error: str | None = None,
    quota: Quota | None = None,
    adapters: AdapterState | None = None,
    now: datetime | None = None,
) -> dict[str, Any]:
    """The status to write. ``pods=None`` keeps the current counts (not refreshed
    while the cache loads, as in KubeAI). ``quota``: the Kueue verdict of a Model
    under Kueue (None removes the condition)."""
    now = now or datetime.now(timezone.utc)
    current = model.get("status") or {}
    status = copy.deepcopy(current)
    gen = model["metadata"].get("generation") or 0
    conds: list[dict[str, Any]] = status.setdefault("conditions", [])
    if pods is not None:
        status["replicas"] = replica_counts(pods)
    if config_error:
        set_condition(conds, CONFIG_VALID, "False", "InvalidField", config_error[:MESSAGE_MAX], gen, now)
    else:
        set_condition(conds, CONFIG_VALID, "True", "Valid", "", gen, now)
    if cache_loaded is not None:
        status["cache"] = {"loaded": cache_loaded}
        if cache_loaded:
            set_condition(conds, CACHE_LOADED, "True", "Loaded", "", gen, now)
        elif cache_error:
            set_condition(conds, CACHE_LOADED, "False", "LoaderFailed", cache_error[:MESSAGE_MAX], gen, now)
        else:
            set_condition(conds, CACHE_LOADED, "False", "Loading", "the loader Job is downloading the model into the cache", gen, now)
    if quota is None:
        remove_condition(conds, QUOTA_RESERVED)
    else:
        set_condition(conds, QUOTA_RESERVED, quota.status, quota.reason, quota.message[:MESSAGE_MAX], gen, now)
    if adapters is not None:
        _adapters_condition(conds, adapters, gen, now)
    want = (model.get("spec") or {}).get("replicas") or 0
    ready = (status.get("replicas") or {}).get("ready") or 0
    if config_error:
        set_condition(conds, READY, "False", "ConfigInvalid", "no Pods can be built; see ConfigValid", gen, now)
    elif pod_error:
        set_condition(conds, READY, "False", "PodRejected", pod_error[:MESSAGE_MAX], gen, now)
    elif cache_loaded is False and cache_error:
        set_condition(conds, READY, "False", "CacheLoadFailed", "the model cache could not be loaded; see CacheLoaded", gen, now)
    elif cache_loaded is False:
        set_condition(conds, READY, "False", "CacheLoading", "waiting for the model cache", gen, now)
    elif ready >= want:
        reason = "ScaledToZero" if want == 0 else "PodsReady"
        set_condition(conds, READY, "True", reason, f"{ready}/{want} Pods ready", gen, now)
    elif quota is not None and quota.status == "False":
        set_condition(conds, READY, "False", "QuotaPending", f"{ready}/{want} Pods ready; see QuotaReserved", gen, now)
    else:
        set_condition(conds, READY, "False", "PodsNotReady", f"{ready}/{want} Pods ready", gen, now)
    return status


def _adapters_condition(conds: list[dict[str, Any]], a: AdapterState, gen: int, now: datetime) -> None:
    def listed(items: list[str]) -> str:
        return "; ".join(items[:5]) + (f"; and {len(items) - 5} more" if len(items) > 5 else "")

    if not a.wanted:
        remove_condition(conds, ADAPTERS_LOADED)
    elif a.failed:
        set_condition(conds, ADAPTERS_LOADED, "False", "LoadFailed", listed(a.failed)[:MESSAGE_MAX], gen, now)
    elif a.loading:
        set_condition(conds, ADAPTERS_LOADED, "False", "Loading", ("loading " + listed(a.loading))[:MESSAGE_MAX], gen, now)
    elif a.waiting:
        set_condition(conds, ADAPTERS_LOADED, "False", "Waiting", f"{a.waiting} Pod(s) wait for their loader sidecar to be Ready", gen, now)
    else:
        set_condition(conds, ADAPTERS_LOADED, "True", "Loaded", "", gen, now)


def too_deep_status(stub: Mapping[str, Any], path: str) -> dict[str, Any] | None:
    """The status of a Model the operator left out of its cache, nested too
    deeply to decode or encode (runtime/cache/informerskip.py): ``ConfigValid=False``
    naming the field; ``None`` when the stub carries it already."""
    message = f"{path}: nested deeper than {ENCODE_LIMIT} levels; the operator cannot read this Model"
    status = desired_status(dict(stub), pods=None, config_error=message, cache_loaded=None)
    return None if status == (stub.get("status") or {}) else status


def skipped_model_reporter(mgr: Manager) -> SkippedObjectReporter:
    return SkippedObjectReporter(
        mgr, "models", too_deep_status, lambda ns, name, patch: mgr.client.patch_status(MODELS, name, patch, ns, decode=False)
    )
