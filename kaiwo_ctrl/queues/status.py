"""Desired KaiwoQueueConfig status: ``status`` READY/FAILED plus conditions.

Conditions (``metav1.Condition`` shape):

* ``Valid`` - False (reason ``InvalidItems``) when validation found bad items; the
  message lists each one by its spec path.
* ``InSync`` - False (reason ``OutOfSync``) when some Kueue object could not be
  written or is still waiting (e.g. a LocalQueue whose ClusterQueue does not exist
  yet); the message names each object and why.
* ``Ready`` - True only when both are True; ``status`` is then ``READY``, else ``FAILED``.

The function is pure and idempotent: ``lastTransitionTime`` is carried over from
the previous status while a condition's status does not change, so computing the
status again from the same inputs yields an identical dict and the reconciler
skips the write.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from typing import Any

READY = "READY"
FAILED = "FAILED"
MESSAGE_MAX = 32768


def _format_time(moment: datetime | str | None) -> str:
    if isinstance(moment, str):
        return moment
    moment = moment or datetime.now(timezone.utc)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _truncate(text: str) -> str:
    if len(text) > MESSAGE_MAX:
        text = text[: MESSAGE_MAX - 3] + "..."
    return text


def _condition(
    type_: str,
    ok: bool,
    reason_ok: str,
    reason_bad: str,
    message: str,
    previous: Mapping[str, Mapping[str, Any]],
    now: str,
    generation: int | None,
) -> dict[str, Any]:
    status = "True" if ok else "False"
    prev = previous.get(type_)
    changed = prev is None or prev.get("status") != status
    cond: dict[str, Any] = {
        "type": type_,
        "status": status,
        "reason": reason_ok if ok else reason_bad,
        "message": _truncate(message),
        "lastTransitionTime": now if prev is None or changed else prev.get("lastTransitionTime", now),
    }
    if generation is not None:
        cond["observedGeneration"] = generation
    return cond


def desired_status(
    previous: Mapping[str, Any] | None,
    *,
    problems: Iterable[Any] = (),
    out_of_sync: Iterable[str] = (),
    generation: int | None = None,
    now: datetime | str | None = None,
) -> dict[str, Any]:
    """Status for the queue config.

    ``previous`` is the current ``.status`` (or ``None``); ``problems`` the validation
    problems (anything whose ``str()`` names the item); ``out_of_sync`` one line per
    Kueue object that is not as desired, e.g. ``"ClusterQueue team-a: update failed:
    <error>"``; ``generation`` the queue config's ``metadata.generation``.
    """
    problems = [str(p) for p in problems]
    out_of_sync = [str(s) for s in out_of_sync]
    now_text = _format_time(now)
    prev_conditions = {c.get("type"): c for c in (previous or {}).get("conditions") or []}

    valid = not problems
    in_sync = not out_of_sync
    valid_msg = (
        "all items are valid" if valid else f"{len(problems)} invalid item(s) not synced: " + "; ".join(problems)
    )
    sync_msg = (
        "all Kueue objects match the spec"
        if in_sync
        else f"{len(out_of_sync)} Kueue object(s) out of sync: " + "; ".join(out_of_sync)
    )
    ready = valid and in_sync
    if ready:
        ready_msg = "all Kueue objects are in sync with the spec"
    else:
        parts = []
        if not valid:
            parts.append(f"{len(problems)} invalid item(s)")
        if not in_sync:
            parts.append(f"{len(out_of_sync)} object(s) out of sync")
        ready_msg = ", ".join(parts) + " (see the Valid and InSync conditions)"

    conditions = [
        _condition("Ready", ready, "Synced", "NotReady", ready_msg, prev_conditions, now_text, generation),
        _condition("Valid", valid, "SpecValid", "InvalidItems", valid_msg, prev_conditions, now_text, generation),
        _condition("InSync", in_sync, "Synced", "OutOfSync", sync_msg, prev_conditions, now_text, generation),
    ]
    return {"status": READY if ready else FAILED, "conditions": conditions}


def status_changed(current: Mapping[str, Any] | None, desired: Mapping[str, Any]) -> bool:
    """Whether the status write is needed (only ``status`` and ``conditions`` are compared)."""
    current = current or {}
    return current.get("status") != desired.get("status") or (current.get("conditions") or []) != desired.get(
        "conditions"
    )
