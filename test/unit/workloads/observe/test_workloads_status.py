"""The status machine: observation precedence, state transitions, conditions,
child status mapping, storage propagation, preemption and termination."""

from datetime import datetime, timedelta, timezone

import pytest

from kaiwo_ctrl.workloads.base.childstatus import UnknownChildStatus
from kaiwo_ctrl.workloads.kinds.batchjob.status import batch_job_status
from kaiwo_ctrl.workloads.kinds.deployment.status import deployment_status
from kaiwo_ctrl.workloads.kinds.rayjob.status import ray_job_status
from kaiwo_ctrl.workloads.observe.status import (
    ObservedChildren,
    download_succeeded,
    has_gpu_demand,
    observe,
    requeue_after,
    status_events,
    sweep_expired,
)
from kaiwo_ctrl.workloads.kinds import WORKLOAD_KINDS
from kaiwo_ctrl.workloads.kinds.rayservice import CHILD as RAYSERVICE
from kaiwo_ctrl.workloads.kinds.storage import DATA_PVC, DOWNLOAD_CONFIGMAP, DOWNLOAD_JOB, HF_PVC
from kaiwo_ctrl.workloads.base.world import World

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
T0S = "2026-01-01T12:00:00Z"
NODES = [{"metadata": {"name": f"g{i}", "labels": {"kaiwo/nodepool": "nvidia-k80-8gpu-28core-200gi"}},
          "status": {"allocatable": {"nvidia.com/gpu": "8"}}} for i in range(4)]
WORLD = World.from_dicts(nodes=NODES, queue_config={"clusterQueues": [{"name": "kaiwo"}]})

ADMITTED = {"status": {"conditions": [{"type": "Admitted", "status": "True"}]}}
NOT_ADMITTED = {"status": {"conditions": [{"type": "QuotaReserved", "status": "False"}]}}


def kjob(status=None, generation=1, **spec):
    return {"apiVersion": "kaiwo.silogen.ai/v1alpha1", "kind": "KaiwoJob",
            "metadata": {"name": "j", "namespace": "ns", "uid": "u", "generation": generation},
            "spec": spec, **({"status": status} if status is not None else {})}


def ksvc(status=None, **spec):
    return {**kjob(status, **spec), "kind": "KaiwoService"}


def job(conditions=(), **status):
    return {"kind": "Job", "metadata": {"name": "j"}, "status": {"conditions": list(conditions), **status}}


def cond_map(status):
    return {c["type"]: (c["status"], c["reason"], c["message"]) for c in status.get("conditions", [])}


def run(obj, children=ObservedChildren(), workload=None, now=T0, world=WORLD):
    kind = obj["kind"]
    return observe(kind, obj, world, children, workload, now)


# --------------------------------------------------------------------------- basic flow

def test_new_job_becomes_pending_with_schedulable_and_admitted_false():
    st = run(kjob())
    assert st["status"] == "PENDING"
    assert st["observedGeneration"] == 1
    assert cond_map(st) == {
        "Schedulable": ("True", "Schedulable", "Workload does not require GPU resources"),
        "Admitted": ("False", "Pending", "Workload is pending admission into 'kaiwo'"),
    }
    assert all(c["lastTransitionTime"] == T0S and c["observedGeneration"] == 1 for c in st["conditions"])
    assert "startTime" not in st and "completionTime" not in st and "duration" not in st


def test_observe_is_idempotent():
    first = run(kjob(gpus=8, gpuVendor="nvidia"))
    again = run(kjob(first, gpus=8, gpuVendor="nvidia"), now=T0 + timedelta(hours=1))
    assert again == first
    running = run(kjob(first), ObservedChildren(main=job(ready=1)), ADMITTED, now=T0 + timedelta(minutes=1))
    later = run(kjob(running), ObservedChildren(main=job(ready=1)), ADMITTED, now=T0 + timedelta(minutes=9))
    assert later == running  # duration is not refreshed between writes


@pytest.mark.parametrize("job_obj,previous,expected", [
    (job([{"type": "Suspended", "status": "True"}]), "PENDING", "PENDING"),
    (job(active=1), "PENDING", "STARTING"),
    (job(active=1, ready=1), "STARTING", "RUNNING"),
    (job(active=1), "RUNNING", "RUNNING"),
    (job([{"type": "SuccessCriteriaMet", "status": "True"}, {"type": "Complete", "status": "True"}]), "RUNNING", "COMPLETE"),
    (job([{"type": "Complete", "status": "True"}]), "RUNNING", "COMPLETE"),
    (job([{"type": "Failed", "status": "True"}]), "RUNNING", "FAILED"),
    (job(failed=1), "RUNNING", "FAILED"),
    (job([{"type": "Complete", "status": "False"}]), "STARTING", "PENDING"),
    (job(), "STARTING", "PENDING"),
])
def test_batch_job_status_mapping(job_obj, previous, expected):
    assert batch_job_status(job_obj, previous) == expected


def test_job_lifecycle_times():
    st = run(kjob())
    st = run(kjob(st), ObservedChildren(main=job(active=1)), ADMITTED, now=T0 + timedelta(seconds=10))
    assert st["status"] == "STARTING" and cond_map(st)["Admitted"] == ("True", "Admitted", "Workload is admitted")
    assert "startTime" not in st
    st = run(kjob(st), ObservedChildren(main=job(active=1, ready=1)), ADMITTED, now=T0 + timedelta(seconds=20))
    assert st["status"] == "RUNNING" and st["startTime"] == "2026-01-01T12:00:20Z" and st["duration"] == 0
    done = job([{"type": "Complete", "status": "True"}], succeeded=1)
    st = run(kjob(st), ObservedChildren(main=done), ADMITTED, now=T0 + timedelta(seconds=95))
    assert st["status"] == "COMPLETE"
    assert st["completionTime"] == "2026-01-01T12:01:35Z" and st["duration"] == 75
    # terminal: nothing changes any more
    assert run(kjob(st), ObservedChildren(), None, now=T0 + timedelta(days=1)) == st


def test_job_failed_sets_completion_time():
    st = run(kjob({"status": "RUNNING", "startTime": T0S}), ObservedChildren(main=job(failed=1)), ADMITTED,
             now=T0 + timedelta(seconds=5))
    assert (st["status"], st["completionTime"], st["duration"]) == ("FAILED", "2026-01-01T12:00:05Z", 5)


def test_finished_job_is_final_even_if_kueue_workload_is_gone():
    done = job([{"type": "Complete", "status": "True"}])
    st = run(kjob({"status": "RUNNING", "startTime": T0S}), ObservedChildren(main=done), None)
    assert st["status"] == "COMPLETE"


def test_admission_requires_true_on_every_workload():
    ch = ObservedChildren(main=job(active=1))
    assert run(kjob(), ch, NOT_ADMITTED)["status"] == "PENDING"
    assert run(kjob(), ch, [ADMITTED, NOT_ADMITTED])["status"] == "PENDING"
    unknown = {"status": {"conditions": [{"type": "Admitted", "status": "Unknown"}]}}
    assert run(kjob(), ch, unknown)["status"] == "PENDING"
    assert run(kjob(), ch, [ADMITTED, ADMITTED])["status"] == "STARTING"
    assert run(kjob(), ObservedChildren(), ADMITTED)["status"] == "STARTING"  # "" -> STARTING when admitted


def test_last_transition_time_kept_unless_status_flips():
    st = run(kjob())
    st2 = run(kjob(st), ObservedChildren(main=job(active=1)), ADMITTED, now=T0 + timedelta(minutes=1))
    by_type = {c["type"]: c for c in st2["conditions"]}
    assert by_type["Schedulable"]["lastTransitionTime"] == T0S
    assert by_type["Admitted"]["lastTransitionTime"] == "2026-01-01T12:01:00Z"


def test_other_condition_types_are_kept():
    prev = {"status": "PENDING", "conditions": [{"type": "Custom", "status": "True", "reason": "X", "message": "",
                                                 "lastTransitionTime": T0S, "observedGeneration": 1}]}
    st = run(kjob(prev), ObservedChildren(main=job(active=1)), ADMITTED)
    assert [c["type"] for c in st["conditions"]] == ["Custom", "Schedulable", "Admitted"]


# --------------------------------------------------------------------------- Schedulable / spec errors

def test_unschedulable_is_error_and_recovers():
    st = run(kjob(gpus=1))
    assert st["status"] == "ERROR"
    assert cond_map(st) == {"Schedulable": ("False", "NoGPUs", "Cluster has 0 GPUs (vendor: amd)")}
    st2 = run(kjob(st, generation=2, gpus=1, gpuVendor="nvidia"), now=T0 + timedelta(minutes=1))
    assert st2["status"] == "PENDING" and st2["observedGeneration"] == 2
    assert cond_map(st2)["Schedulable"] == ("True", "Schedulable", "Cluster has sufficient GPU resources")


def test_insufficient_gpus_and_queue_problems():
    assert cond_map(run(kjob(gpus=40, gpuVendor="NVIDIA")))["Schedulable"][1] == "InsufficientGPUs"
    assert cond_map(run(kjob(clusterQueue="x")))["Schedulable"][1] == "ClusterQueueNotFound"
    no_qc = World.from_dicts(nodes=NODES, queue_config=None)
    assert run(kjob(), world=no_qc)["status"] == "ERROR"


def test_spec_error_reported_and_cleared():
    st = run(kjob(gpusPerReplica=2))
    assert st["status"] == "ERROR"
    assert cond_map(st)["SpecValid"] == (
        "False", "InvalidSpec", "spec.gpusPerReplica: gpusPerReplica is set but replicas is not: set replicas as well")
    st2 = run(kjob(st, generation=2, replicas=2, gpusPerReplica=2, gpuVendor="nvidia"))
    assert "SpecValid" not in cond_map(st2) and st2["status"] == "PENDING"


def test_spec_not_fitting_the_api_types_is_an_error_not_an_exception():
    st = run(kjob(gpus="many"))
    assert st["status"] == "ERROR" and cond_map(st)["SpecValid"][2].startswith("spec.gpus:")


# --------------------------------------------------------------------------- storage / downloads

STORAGE = {"storageEnabled": True, "data": {"storageSize": "1Gi", "download": {"git": [{"repository": "r", "targetPath": "t"}]}}}


def pvc(phase):
    return {"kind": "PersistentVolumeClaim", "metadata": {"name": "j-data"}, "status": {"phase": phase} if phase else {}}


def storage_children(job_obj, phase="Bound", **extra):
    return ObservedChildren(data_pvc=pvc(phase), download_configmap={"kind": "ConfigMap"}, download_job=job_obj, **extra)


def test_downloads_objects_missing_is_downloading_without_storage_conditions():
    st = run(kjob(storage=STORAGE))
    assert st["status"] == "DOWNLOADING"
    assert set(cond_map(st)) == {"Schedulable"}


@pytest.mark.parametrize("dl,phase,status,pvc_cond,dl_cond", [
    (job(), "Pending", "DOWNLOADING", ("False", "Pending", ""), ("False", "JobPending", "Download job pending")),
    (job(active=1), None, "DOWNLOADING", ("Unknown", "Unknown", ""), ("False", "JobInProgress", "Download job starting")),
    (job(active=1, ready=1), "Bound", "DOWNLOADING", ("True", "Bound", ""), ("False", "JobInProgress", "Download job in progress")),
    (job([{"type": "Failed", "status": "True"}]), "Bound", "FAILED", ("True", "Bound", ""), ("False", "JobFailed", "Download job failed")),
    (job([{"type": "Complete", "status": "True"}]), "Bound", "PENDING", ("True", "Bound", ""), ("True", "JobCompleted", "Download job succeeded")),
])
def test_download_job_propagation(dl, phase, status, pvc_cond, dl_cond):
    st = run(kjob(storage=STORAGE), storage_children(dl, phase))
    assert st["status"] == status
    c = cond_map(st)
    assert c["PvcReady"] == pvc_cond and c["DownloadJobSucceeded"] == dl_cond
    assert download_succeeded(st) == (dl_cond[0] == "True")


def test_storage_without_downloads_does_not_block_but_lost_pvc_fails():
    storage = {"storageEnabled": True, "data": {"storageSize": "1Gi"}}
    assert run(kjob(storage=storage))["status"] == "PENDING"  # PVC not there yet: does not block
    assert run(kjob(storage=storage), ObservedChildren(data_pvc=pvc("Pending")))["status"] == "PENDING"
    st = run(kjob(storage=storage), ObservedChildren(data_pvc=pvc("Lost")))
    assert st["status"] == "FAILED" and cond_map(st)["PvcReady"] == ("False", "Lost", "")


def test_pvc_ready_summarises_data_then_hf():
    storage = {"storageEnabled": True, "data": {"storageSize": "1Gi"}, "huggingFace": {"storageSize": "1Gi"}}
    st = run(kjob(storage=storage), ObservedChildren(data_pvc=pvc("Bound"), hf_pvc=pvc("Pending")))
    assert cond_map(st)["PvcReady"] == ("False", "Pending", "")


# --------------------------------------------------------------------------- RayJob

@pytest.mark.parametrize("job_status,expected", [
    ("", "STARTING"), ("PENDING", "STARTING"), ("RUNNING", "RUNNING"),
    ("FAILED", "FAILED"), ("SUCCEEDED", "COMPLETE"), ("STOPPED", "TERMINATED"),
])
def test_ray_job_status_mapping(job_status, expected):
    rj = {"kind": "RayJob", "status": {"jobStatus": job_status}}
    assert ray_job_status(rj) == expected
    st = run(kjob(ray=True, entrypoint="x"), ObservedChildren(main=rj), ADMITTED)
    assert st["status"] == expected


def test_ray_job_deployment_failure_and_unknown_status():
    assert ray_job_status({"status": {"jobDeploymentStatus": "Failed"}}) == "FAILED"
    # KubeRay fails a started job (submitter Job failed, activeDeadlineSeconds passed) and leaves jobStatus RUNNING
    for reason in ("SubmissionFailed", "DeadlineExceeded"):
        rj = {"status": {"jobDeploymentStatus": "Failed", "jobStatus": "RUNNING", "reason": reason}}
        assert ray_job_status(rj) == "FAILED"
    assert ray_job_status({"status": {"jobDeploymentStatus": "Failed", "jobStatus": "STOPPED"}}) == "TERMINATED"
    with pytest.raises(UnknownChildStatus):
        ray_job_status({"metadata": {"name": "r"}, "status": {"jobStatus": "WEIRD"}})


# --------------------------------------------------------------------------- Deployment / RayService

def dep(replicas=2, available=0, ready=0, generation=1, observed=1, conditions=()):
    return {"kind": "Deployment", "metadata": {"name": "j", "generation": generation}, "spec": {"replicas": replicas},
            "status": {"availableReplicas": available, "readyReplicas": ready, "observedGeneration": observed,
                       "conditions": list(conditions)}}


@pytest.mark.parametrize("d,expected", [
    (dep(available=2, ready=2), "READY"),
    (dep(available=1, ready=1), "RUNNING"),
    (dep(), "STARTING"),
    (dep(available=2, ready=2, generation=2, observed=1), "STARTING"),
    (dep(conditions=[{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}]), "ERROR"),
    ({"kind": "Deployment", "metadata": {}, "spec": {}, "status": {"availableReplicas": 1}}, "READY"),
])
def test_deployment_status_mapping(d, expected):
    assert deployment_status(d) == expected


def test_service_ready_running_and_pod_admission():
    pods_admitted = [ADMITTED, ADMITTED]
    st = run(ksvc(), ObservedChildren(main=dep(available=2, ready=2)), pods_admitted)
    assert st["status"] == "READY" and st["startTime"] == T0S
    st2 = run(ksvc(st), ObservedChildren(main=dep(available=1, ready=1)), pods_admitted, now=T0 + timedelta(minutes=5))
    assert st2["status"] == "RUNNING" and st2["startTime"] == T0S  # READY -> RUNNING keeps startTime
    assert run(ksvc(), ObservedChildren(main=dep(available=2, ready=2)), [])["status"] == "PENDING"


def test_service_error_then_recovery_resets_start_time():
    bad = dep(conditions=[{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}])
    st = run(ksvc({"status": "RUNNING", "startTime": T0S}), ObservedChildren(main=bad), [ADMITTED])
    assert st["status"] == "ERROR"
    st2 = run(ksvc(st), ObservedChildren(main=dep(available=1, ready=1)), [ADMITTED], now=T0 + timedelta(minutes=3))
    assert st2["status"] == "RUNNING" and st2["startTime"] == "2026-01-01T12:03:00Z"


def rs(ready=False, apps=None):
    conds = [{"type": "Ready", "status": "True" if ready else "False"}]
    return {"kind": "RayService", "status": {"conditions": conds, "activeServiceStatus": {"applicationStatuses": apps or {}}}}


AW = {"kind": "AppWrapper", "metadata": {"name": "j"}, "status": {"phase": "Running"}}


@pytest.mark.parametrize("children,workload,expected", [
    (ObservedChildren(), None, "PENDING"),
    (ObservedChildren(main=AW), ADMITTED, "STARTING"),
    (ObservedChildren(main=AW, ray_service=rs(ready=True)), ADMITTED, "READY"),
    (ObservedChildren(main=AW, ray_service=rs(apps={"app": {"status": "RUNNING"}})), ADMITTED, "STARTING"),
    (ObservedChildren(main=AW, ray_service=rs(apps={"app": {"status": "DEPLOY_FAILED"}})), ADMITTED, "FAILED"),
    (ObservedChildren(main=AW, ray_service=rs(apps={"app": {"status": "UNHEALTHY"}})), ADMITTED, "FAILED"),
    (ObservedChildren(main={**AW, "status": {"phase": "Failed"}}), ADMITTED, "FAILED"),
])
def test_ray_service_status(children, workload, expected):
    assert run(ksvc(ray=True), children, workload)["status"] == expected


# --------------------------------------------------------------------------- duration / termination

def running(start=T0S, **extra):
    return {"status": "RUNNING", "startTime": start, **extra}


def test_preemptable_condition_and_self_preemption():
    ch = ObservedChildren(main=job(ready=1))
    st = run(kjob(running(), duration="1h"), ch, ADMITTED, now=T0 + timedelta(minutes=30))
    assert st["status"] == "RUNNING"
    assert cond_map(st)["Preemptable"] == ("False", "DurationNotExceeded",
                                           "Workload is running and the duration has not been exceeded")
    assert requeue_after(kjob(st, duration="1h"), T0 + timedelta(minutes=30)) == timedelta(minutes=30)
    st2 = run(kjob(st, duration="1h"), ch, ADMITTED, now=T0 + timedelta(hours=2))
    assert cond_map(st2)["Preemptable"] == ("True", "DurationExceeded", "Workload duration has exceeded")
    assert st2["status"] == "RUNNING"
    assert ("Normal", "Preemptable", "Workload has exceeded its duration") in status_events(st, st2)
    demand = ObservedChildren(main=job(ready=1), gpu_demand=True)
    st3 = run(kjob(st2, duration="1h"), demand, ADMITTED, now=T0 + timedelta(hours=2))
    assert st3["status"] == "TERMINATING"
    assert cond_map(st3)["WorkloadTerminatedEarly"] == (
        "False", "DurationExceededWithActiveGpuDemand", "Terminated since duration was exceeded and there is active GPU demand")
    st4 = run(kjob(st3, duration="1h"), demand, ADMITTED, now=T0 + timedelta(hours=2, seconds=1))
    assert st4["status"] == "TERMINATED"
    assert cond_map(st4)["WorkloadTerminatedEarly"][:2] == ("True", "DurationExceededWithActiveGpuDemand")
    assert ("Warning", "DurationExceededWithActiveGpuDemand",
            "Terminated since duration was exceeded and there is active GPU demand") in status_events(st3, st4)


def test_terminating_without_reason_becomes_early_termination():
    st = run(kjob({"status": "TERMINATING"}))
    assert st["status"] == "TERMINATED"
    assert cond_map(st)["WorkloadTerminatedEarly"] == (
        "True", "EarlyTermination", "Workload terminated early (check events and other conditions for likely causes)")


def test_gpu_demand_and_sweep():
    me = kjob(running(), gpus=1, gpuVendor="nvidia", duration="1s")
    old = T0 - timedelta(minutes=10)

    def pending(vendor="nvidia", created=old, queue=None, gpus=2, uid="p"):
        o = kjob({"status": "PENDING"}, gpus=gpus, gpuVendor=vendor, **({"clusterQueue": queue} if queue else {}))
        o["metadata"].update(uid=uid, creationTimestamp=created.strftime("%Y-%m-%dT%H:%M:%SZ"))
        return o

    assert has_gpu_demand(me, [pending()], WORLD, T0)
    assert has_gpu_demand(me, [pending(vendor="NVIDIA")], WORLD, T0)
    assert not has_gpu_demand(me, [pending(vendor="amd")], WORLD, T0)
    assert not has_gpu_demand(me, [pending(created=T0 - timedelta(minutes=1))], WORLD, T0)
    assert not has_gpu_demand(me, [pending(queue="other")], WORLD, T0)
    assert not has_gpu_demand(me, [pending(gpus=0)], WORLD, T0)

    expired = kjob(running(conditions=[{"type": "Preemptable", "status": "True", "reason": "DurationExceeded",
                                        "message": "", "lastTransitionTime": T0S, "observedGeneration": 1}]))
    fresh = kjob(running())
    out = sweep_expired([expired, fresh], T0)
    assert len(out) == 1
    _, new = out[0]
    assert new["status"] == "TERMINATING"
    assert cond_map(new)["WorkloadTerminatedEarly"] == (
        "False", "DurationExceeded", "Workload is terminating due to exceeding its duration and active GPU demand")


# --------------------------------------------------------------------------- priority / unapplied changes / events

def test_priority_class_not_found_condition():
    w = World.from_dicts(nodes=NODES, queue_config={"clusterQueues": [{"name": "kaiwo"}]}, workload_priority_classes=["wl"])
    st = run(kjob(priorityClass="nope"), world=w)
    assert cond_map(st)["PriorityClassNotFound"] == (
        "True", "PriorityClassNotFound", "Neither a WorkloadPriorityClass nor a PriorityClass named 'nope' exists")
    assert ("Warning", "PriorityClassNotFound",
            "Neither a WorkloadPriorityClass nor a PriorityClass named 'nope' exists") in status_events({}, st)
    st2 = run(kjob(st, priorityClass="wl"), world=w)
    assert cond_map(st2)["PriorityClassNotFound"][:2] == ("False", "PriorityClassFound")
    st3 = run(kjob(st2), world=w)
    assert "PriorityClassNotFound" not in cond_map(st3)


def test_spec_change_not_applied_condition():
    ch = ObservedChildren(main=job(active=1), unapplied_fields=("spec.template",))
    st = run(kjob(), ch, ADMITTED)
    assert cond_map(st)["SpecChangeNotApplied"] == (
        "True", "ImmutableFieldChanged",
        "These fields changed in the spec but cannot be changed on the existing object: spec.template")
    st2 = run(kjob(st), ObservedChildren(main=job(active=1)), ADMITTED)
    assert "SpecChangeNotApplied" not in cond_map(st2)


@pytest.mark.parametrize("old,new,event", [
    ("", "PENDING", ("Normal", "WorkloadPending", "Workload is pending admission")),
    ("PENDING", "STARTING", ("Normal", "WorkloadStarting", "Workload was admitted, starting")),
    ("STARTING", "RUNNING", ("Normal", "WorkloadRunning", "Workload has started")),
    ("RUNNING", "COMPLETE", ("Normal", "WorkloadComplete", "Workload has completed")),
    ("RUNNING", "FAILED", ("Warning", "WorkloadFailed", "Workload has failed")),
    ("RUNNING", "TERMINATING", ("Normal", "WorkloadTermination", "Workload has been flagged for termination")),
])
def test_status_events(old, new, event):
    assert status_events({"status": old}, {"status": new})[0] == event


@pytest.mark.parametrize("new", ["", "DOWNLOADING", "ERROR"])
def test_no_status_event(new):
    assert status_events({"status": "PENDING"}, {"status": new}) == []


def test_workload_kind_sorts_observed_children_into_slots():
    objects = [
        {"kind": "PersistentVolumeClaim", "metadata": {"name": "j-data"}},
        {"kind": "PersistentVolumeClaim", "metadata": {"name": "j-hf"}},
        {"kind": "ConfigMap", "metadata": {"name": "j-download"}},
        {"kind": "Job", "metadata": {"name": "j-download"}},
        {"kind": "Job", "metadata": {"name": "j"}},
        {"kind": "Job", "metadata": {"name": "unrelated"}},
    ]
    ch = WORKLOAD_KINDS["KaiwoJob"].observed(kjob(), objects, gpu_demand=True)
    assert ch.main["metadata"]["name"] == "j" and ch.get(DOWNLOAD_JOB.slot)["metadata"]["name"] == "j-download"
    assert ch.get(DATA_PVC.slot) and ch.get(HF_PVC.slot) and ch.get(DOWNLOAD_CONFIGMAP.slot) and ch.gpu_demand
    svc = WORKLOAD_KINDS["KaiwoService"].observed(ksvc(ray=True), [{"kind": "AppWrapper", "metadata": {"name": "j"}},
                                                                 {"kind": "RayService", "metadata": {"name": "j"}}])
    assert svc.main["kind"] == "AppWrapper" and svc.get(RAYSERVICE.slot)["kind"] == "RayService"


def test_typed_model_input_gives_same_status():
    from api.kaiwo.v1alpha1 import KaiwoJob
    obj = kjob(gpus=8, gpuVendor="nvidia")
    assert observe("KaiwoJob", KaiwoJob.model_validate(obj), WORLD, ObservedChildren(), None, T0) == run(obj)


def test_requeue_after_only_for_current_generation_false_preemptable():
    cond = {"type": "Preemptable", "status": "False", "reason": "DurationNotExceeded", "message": "",
            "lastTransitionTime": T0S, "observedGeneration": 1}
    obj = kjob(running(conditions=[cond]), duration="10m")
    assert requeue_after(obj, T0 + timedelta(minutes=4)) == timedelta(minutes=6)
    assert requeue_after(kjob(running(conditions=[cond]), generation=2, duration="10m"), T0) is None
    assert requeue_after(kjob(running(conditions=[cond])), T0) is None  # no duration
    assert requeue_after(kjob({"status": "PENDING", "conditions": [cond]}, duration="10m"), T0) is None
    assert requeue_after(kjob(running(conditions=[cond]), gpus="x", duration="10m"), T0) is None


def test_ready_service_is_also_subject_to_its_duration():
    st = run(ksvc({"status": "READY", "startTime": T0S}, duration="1m"),
             ObservedChildren(main=dep(available=2, ready=2)), [ADMITTED], now=T0 + timedelta(minutes=2))
    assert st["status"] == "READY" and cond_map(st)["Preemptable"][0] == "True"
