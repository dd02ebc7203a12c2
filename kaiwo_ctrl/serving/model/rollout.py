"""The Pod plan: how many server Pods to create and which to delete.

Pods carry the hash of the spec they were built from (label ``pod-hash``);
a Pod is up to date iff that equals the desired hash. The plan:

1. Sort the current Pods into deletion order: not Ready before Ready,
   unscheduled before scheduled, out of date before up to date, younger
   before older.
2. ``desired = replicas + surge`` while any Pod is out of date, else
   ``replicas``; create or delete (in deletion order) to reach it.
3. Walk the out-of-date Pods in deletion order: a not-Ready one is replaced
   at once; a Ready one only when every desired Pod is Ready, and then the
   walk stops (at most one Ready old Pod is replaced per pass, so capacity
   never drops below ``replicas`` Ready Pods when surge >= 1). Replacements
   are capped at (out-of-date Pods - surge), the surge Pods already counted.
   Under Kueue, a new Pod waiting for quota also lets one Ready old Pod go
   (the quota may be the old Pods' own).

Unlike KubeAI, Failed or Succeeded (e.g. evicted) Pods and Pods already being
deleted do not count as replicas: the failed ones are deleted and replaced,
the terminating ones are waited out [quirk: KubeAI counts them forever].
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kaiwo_ctrl.serving.podcontract import LABEL_POD_HASH


@dataclass
class Plan:
    create: int = 0
    delete: list[dict[str, Any]] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return self.create == 0 and not self.delete


def is_ready(pod: dict[str, Any]) -> bool:
    for c in (pod.get("status") or {}).get("conditions") or ():
        if c.get("type") == "Ready":
            return c.get("status") == "True"
    return False


def is_finished(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Failed", "Succeeded")


def is_terminating(pod: dict[str, Any]) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))


def _hash(pod: dict[str, Any]) -> str:
    return (pod["metadata"].get("labels") or {}).get(LABEL_POD_HASH, "")


def deletion_order(pods: list[dict[str, Any]], want_hash: str) -> list[dict[str, Any]]:
    # two stable sorts: younger first, then by (ready, scheduled, up to date)
    by_age = sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp") or "", reverse=True)
    return sorted(
        by_age,
        key=lambda p: (is_ready(p), bool((p.get("spec") or {}).get("nodeName")), _hash(p) == want_hash),
    )


def plan(pods: list[dict[str, Any]], want_hash: str, replicas: int, surge: int,
         quota_blocked: frozenset[str] = frozenset()) -> Plan:
    """``quota_blocked``: names of Pods Kueue keeps waiting for quota. When an up-to-date
    Pod is among them, the quota it needs may be held by the old Pods alone, so one Ready
    old Pod is replaced without waiting (capacity dips by one instead of the rollout
    stalling for ever); never while a Pod is still terminating, whose quota is on its way back."""
    result = Plan()
    result.delete = [p for p in pods if is_finished(p) and not is_terminating(p)]
    live = [p for p in pods if not is_finished(p) and not is_terminating(p)]
    ordered = deletion_order(live, want_hash)
    out_of_date = [p for p in ordered if _hash(p) != want_hash]
    desired = replicas + (surge if out_of_date else 0)
    diff = len(live) - desired
    if diff < 0:
        result.create = -diff
    elif diff > 0:
        result.delete += ordered[:diff]
        gone = {id(p) for p in ordered[:diff]}
        ordered = [p for p in ordered if id(p) not in gone]
        out_of_date = [p for p in out_of_date if id(p) not in gone]
    ready = sum(1 for p in ordered if is_ready(p))
    blocked = not any(is_terminating(p) for p in pods) and any(
        p["metadata"].get("name") in quota_blocked and _hash(p) == want_hash for p in ordered
    )
    replaced = 0
    cap = len(out_of_date) - surge
    for p in out_of_date:
        if not is_ready(p):
            result.delete.append(p)
            if replaced < cap:
                result.create += 1
                replaced += 1
            continue
        if ready == desired or blocked:
            result.delete.append(p)
            if replaced < cap:
                result.create += 1
                replaced += 1
            break
    return result
