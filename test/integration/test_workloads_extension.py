"""The extension point: a child kind added through one ``ChildSpec`` entry
(its builder and condition mapper) and one registry line is created, observed and garbage-collected
by the generic reconciler, with no other change, on the real kube-apiserver."""

from __future__ import annotations

from typing import Any

import pytest

from kaiwo_ctrl.runtime.api.resources import CONFIGMAPS
from kaiwo_ctrl.workloads.kinds import CHILD_KINDS, OWNS_ANY, ChildSpec, workload_kinds
from kaiwo_ctrl.workloads.builders.plan import WorkloadPlan
from test_workloads_support import (  # noqa: F401 - fixtures
    MERGE,
    conditions,
    create_kaiwo,
    eventually,
    garbage_collector,
    get,
    job_url,
    kaiwo_url,
    operator,
    status_of,
    wait_object,
)

pytestmark = pytest.mark.integration

CONDITION = "NotesReady"
STATE = "example.com/state"


def build_notes(b: WorkloadPlan) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": b.o.child_metadata(name=f"{b.o.name}-notes"),
        "data": {"note": "hello"},
    }


def notes_condition(cm: dict | None) -> tuple[str, str, str, str]:
    if cm is None:
        return (CONDITION, "False", "Missing", "no notes yet")
    state = ((cm.get("metadata") or {}).get("annotations") or {}).get(STATE, "new")
    return (CONDITION, "True", "Present", f"state: {state}")


NOTES = ChildSpec(CONFIGMAPS, build=build_notes, condition=notes_condition, suffix="notes", watch=OWNS_ANY,
                  terminate=True)


#: what the ``operator`` fixture runs: KaiwoJob with the one extra registry line
WORKLOAD_KINDS = (workload_kinds(CHILD_KINDS + (("KaiwoJob", NOTES),))["KaiwoJob"],)


def cm_url(ns: str, name: str) -> str:
    return f"/api/v1/namespaces/{ns}/configmaps/{name}"


async def test_a_child_kind_added_by_one_childspec_is_created_observed_and_collected(
    operator, admin, namespace, garbage_collector
):
    create_kaiwo(admin, "KaiwoJob", namespace, "noted", image="busybox", entrypoint="sleep 1")
    cm = await wait_object(admin, cm_url(namespace, "noted-notes"))
    job = await wait_object(admin, job_url(namespace, "noted"))
    owner = get(admin, kaiwo_url("KaiwoJob", namespace, "noted"))
    (ref,) = cm["metadata"]["ownerReferences"]
    assert (ref["kind"], ref["uid"], ref["controller"]) == ("KaiwoJob", owner["metadata"]["uid"], True)
    assert job["metadata"]["ownerReferences"][0]["uid"] == owner["metadata"]["uid"]

    # observed: its mapper's condition reaches the status, and follows a change
    def condition() -> tuple | None:
        return conditions(status_of(admin, "KaiwoJob", namespace, "noted")).get(CONDITION)

    await eventually(lambda: condition() == ("True", "Present", "state: new"), what="condition from the new child")
    r = admin.patch(cm_url(namespace, "noted-notes"), json={"metadata": {"annotations": {STATE: "checked"}}},
                    headers=MERGE)
    assert r.status_code == 200, r.text
    await eventually(lambda: condition() == ("True", "Present", "state: checked"), what="condition follows the child")
    # and a change to what the builder owns is put back
    r = admin.patch(cm_url(namespace, "noted-notes"), json={"data": {"note": "edited"}}, headers=MERGE)
    assert r.status_code == 200, r.text
    await eventually(lambda: get(admin, cm_url(namespace, "noted-notes"))["data"] == {"note": "hello"},
                     what="drift on the new child repaired")

    # garbage-collected with its workload
    r = admin.delete(kaiwo_url("KaiwoJob", namespace, "noted"))
    assert r.status_code == 200, r.text
    await eventually(lambda: get(admin, cm_url(namespace, "noted-notes")) is None, timeout=60,
                     what="new child garbage-collected")
    await eventually(lambda: get(admin, job_url(namespace, "noted")) is None, timeout=60, what="Job garbage-collected")
