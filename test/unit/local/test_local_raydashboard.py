"""The simulated Ray dashboard's answers (kaiwo_ctrl.local.raydashboard) and the
KubeRay/AppWrapper component settings (kaiwo_ctrl.local.ray), without a plane."""

from __future__ import annotations

from pathlib import Path

from kaiwo_ctrl.local import ray
from kaiwo_ctrl.local.raydashboard import FAIL_ANNOTATION, job_info, split_target

RAY_JOB = {"metadata": {"name": "j"}, "spec": {"entrypoint": "python x.py"}, "status": {"jobId": "j-abc"}}


def pod(phase: str, annotations: dict | None = None) -> dict:
    return {"metadata": {"annotations": annotations or {}}, "status": {"phase": phase, "startTime": "2026-01-01T00:00:00Z"}}


class FakeRequest:
    def __init__(self, path: str, host: str = "") -> None:
        self.path, self._host = path, host.encode()

    def header(self, name: bytes) -> bytes | None:
        return self._host if name == b"host" else None


def test_proxied_absolute_target_names_the_head_service():
    req = FakeRequest("http://rc-head-svc.team-a.svc.cluster.local:8265/api/jobs/j-abc", "ignored:1")
    assert split_target(req) == ("team-a", "rc-head-svc", "/api/jobs/j-abc")  # type: ignore[arg-type]
    # origin form: the Host header names it
    assert split_target(FakeRequest("/api/jobs/", "s.ns.svc.cluster.local:8265")) == ("ns", "s", "/api/jobs/")  # type: ignore[arg-type]
    # anything else (an IP, a bare name) names no head Service
    assert split_target(FakeRequest("/api/jobs/", "127.0.0.1:8265"))[0] == ""  # type: ignore[arg-type]


def test_job_status_follows_the_submitter_pod():
    head = pod("Running")
    assert job_info(RAY_JOB, None, head, False) is None  # not submitted: the dashboard answers 404
    assert job_info(RAY_JOB, pod("Pending"), head, False) is None
    running = job_info(RAY_JOB, pod("Running"), head, False)
    assert running and running["status"] == "RUNNING" and running["job_id"] == "j-abc" and "end_time" not in running
    assert running["start_time"] == 1767225600000
    done = job_info(RAY_JOB, pod("Succeeded"), head, False)
    assert done and done["status"] == "SUCCEEDED" and done["end_time"] > 0
    failed = job_info(RAY_JOB, pod("Failed"), head, False)
    assert failed and failed["status"] == "FAILED"


def test_job_fails_with_its_head_or_by_the_knob_and_stops_when_stopped():
    assert (job_info(RAY_JOB, pod("Running"), None, False) or {})["status"] == "FAILED"
    assert (job_info(RAY_JOB, pod("Running"), pod("Failed"), False) or {})["status"] == "FAILED"
    knob = pod("Running", {FAIL_ANNOTATION: "fail"})
    # the knob is the entrypoint's exit: it shows once the submitter finished
    assert (job_info(RAY_JOB, pod("Running"), knob, False) or {})["status"] == "RUNNING"
    assert (job_info(RAY_JOB, pod("Succeeded"), knob, False) or {})["status"] == "FAILED"
    assert (job_info(RAY_JOB, pod("Running"), pod("Running"), True) or {})["status"] == "STOPPED"


def test_kuberay_reaches_only_the_dashboard_through_the_proxy_and_listens_on_loopback():
    env = ray.kuberay_env(Path("/k"), 4242)
    assert env["HTTP_PROXY"] == env["http_proxy"] == "http://127.0.0.1:4242"
    child = ray.child_env(env)
    assert "HTTPS_PROXY" not in child and "NO_PROXY" not in child and child["KUBECONFIG"] == "/k"
    args = ray.kuberay_args(Path("/bin/kuberay"), 1, 2)
    assert "--metrics-addr=127.0.0.1:1" in args and "--health-probe-bind-address=127.0.0.1:2" in args
    assert "--enable-leader-election=false" in args


def test_appwrapper_runs_without_webhooks_or_leader_election_on_loopback():
    cfg = ray.appwrapper_config(1, 2)
    assert cfg["webhooksEnabled"] is False
    cm = cfg["controllerManager"]
    assert cm == {"metrics": {"bindAddress": "127.0.0.1:1"}, "health": {"bindAddress": "127.0.0.1:2"}, "leaderElection": False}
