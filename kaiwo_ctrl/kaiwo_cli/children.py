"""What a workload made: child objects, their pods, Kueue Workloads and events.

Children are found by owner reference (the download Job carries no run-id
label) and pods by the ``kaiwo.silogen.ai/run-id`` label or by being owned by
a child Job. Kinds the cluster does not serve, or the user may not list, are
skipped: they are reported by name so the output says what is missing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kaiwo_ctrl.kinds import APPWRAPPERS, RAYJOBS, RAYSERVICES, WORKLOADS
from kaiwo_ctrl.runtime.api.client import ApiError, Client, Resource
from kaiwo_ctrl.runtime.api.resources import DEPLOYMENTS, EVENTS, JOBS, PODS, PVCS
from kaiwo_ctrl.workloads.base.labels import LABEL_KUEUE_JOB_UID, LABEL_RUN_ID

from .kube import explain

CHILD_KINDS: tuple[Resource, ...] = (JOBS, DEPLOYMENTS, PVCS, RAYJOBS, RAYSERVICES, APPWRAPPERS)


@dataclass
class Family:
    children: list[dict[str, Any]] = field(default_factory=list)
    pods: list[dict[str, Any]] = field(default_factory=list)
    workloads: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def uids(self) -> set[str]:
        return {o["metadata"]["uid"] for o in self.children + self.pods + self.workloads}


def _owned_by(obj: dict[str, Any], uids: set[str]) -> bool:
    return any(r.get("uid") in uids for r in obj["metadata"].get("ownerReferences") or [])


async def _list(client: Client, res: Resource, namespace: str, skipped: list[str], **kw: Any) -> list[dict]:
    try:
        return (await client.list(res, namespace, **kw)).get("items") or []
    except ApiError as e:
        if e.status in (403, 404):
            skipped.append(f"{res.plural}.{res.group or 'core'} ({'forbidden' if e.forbidden else 'not served'})")
            return []
        raise explain(e, client) from None


async def pods_of(client: Client, namespace: str, uid: str, child_uids: set[str], skipped: list[str]) -> list[dict]:
    pods = await _list(client, PODS, namespace, skipped)
    mine = [p for p in pods if (p["metadata"].get("labels") or {}).get(LABEL_RUN_ID) == uid or _owned_by(p, child_uids)]
    return sorted(mine, key=lambda p: (p["metadata"].get("creationTimestamp") or "", p["metadata"]["name"]))


async def workload_pods(client: Client, obj: dict[str, Any]) -> list[dict]:
    """The pods of a workload: labelled with its run id, or owned by a Job it owns (the download Job)."""
    ns, uid = obj["metadata"]["namespace"], obj["metadata"]["uid"]
    jobs = await _list(client, JOBS, ns, [])
    return await pods_of(client, ns, uid, {j["metadata"]["uid"] for j in jobs if _owned_by(j, {uid})} | {uid}, [])


async def family(client: Client, obj: dict[str, Any], *, with_workloads: bool = True) -> Family:
    ns, uid = obj["metadata"]["namespace"], obj["metadata"]["uid"]
    fam = Family()
    for res in CHILD_KINDS:
        for child in await _list(client, res, ns, fam.skipped):
            if _owned_by(child, {uid}):
                child.setdefault("kind", res.kind)
                fam.children.append(child)
    child_uids = {c["metadata"]["uid"] for c in fam.children} | {uid}
    fam.pods = await pods_of(client, ns, uid, child_uids, fam.skipped)
    if with_workloads:
        for wl in await _list(client, WORKLOADS, ns, fam.skipped):
            label = (wl["metadata"].get("labels") or {}).get(LABEL_KUEUE_JOB_UID)
            pod_uids = {p["metadata"]["uid"] for p in fam.pods}
            if label in child_uids | pod_uids or _owned_by(wl, child_uids | pod_uids):
                fam.workloads.append(wl)
    return fam


async def events_of(client: Client, namespace: str, uids: set[str], skipped: list[str], limit: int = 15) -> list[dict]:
    items = [e for e in await _list(client, EVENTS, namespace, skipped) if (e.get("involvedObject") or {}).get("uid") in uids]
    items.sort(key=event_time)
    return items[-limit:]


def event_time(e: dict[str, Any]) -> str:
    return e.get("lastTimestamp") or e.get("eventTime") or e.get("firstTimestamp") or e["metadata"].get("creationTimestamp") or ""


def child_state(obj: dict[str, Any]) -> str:
    """A one-line state of a child object, in the words ``kubectl get`` uses."""
    kind, st, spec = obj.get("kind"), obj.get("status") or {}, obj.get("spec") or {}
    if kind == "Job":
        conds = {c["type"] for c in st.get("conditions") or [] if c.get("status") == "True"}
        for done in ("Complete", "Failed", "Suspended"):
            if done in conds:
                return done
        if spec.get("suspend"):
            return "Suspended"
        return f"active={st.get('active', 0)} succeeded={st.get('succeeded', 0)} failed={st.get('failed', 0)}"
    if kind == "Deployment":
        return f"ready {st.get('readyReplicas', 0)}/{spec.get('replicas', 1)}"
    if kind == "PersistentVolumeClaim":
        return st.get("phase") or "Pending"
    if kind == "RayJob":
        return st.get("jobDeploymentStatus") or st.get("jobStatus") or "-"
    if kind == "RayService":
        return st.get("serviceStatus") or "-"
    if kind == "AppWrapper":
        return st.get("phase") or "-"
    return "-"


def pod_state(pod: dict[str, Any]) -> str:
    st = pod.get("status") or {}
    for cs in st.get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting")
        if waiting and waiting.get("reason"):
            return waiting["reason"]
    return st.get("phase") or "Pending"


def admission(wl: dict[str, Any]) -> tuple[str, str, str]:
    """(admitted True/False/-, cluster queue, message) of a Kueue Workload."""
    st = wl.get("status") or {}
    cond: dict[str, Any] | None = next((c for c in st.get("conditions") or [] if c.get("type") == "Admitted"), None)
    if cond is None:
        cond = next((c for c in st.get("conditions") or [] if c.get("type") == "QuotaReserved"), {})
    cq = (st.get("admission") or {}).get("clusterQueue") or "-"
    return cond.get("status", "-"), cq, cond.get("message", "")
