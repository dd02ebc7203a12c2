"""`local up --simulate`: the kwok rules that make logs, exec and port-forward work."""

from __future__ import annotations

import yaml

from kaiwo_ctrl.local import kwokstreams


def _by_kind(tmp_path, **kw) -> dict:
    stages = tmp_path / "stages.yaml"
    stages.write_text("apiVersion: kwok.x-k8s.io/v1alpha1\nkind: Stage\nmetadata: {name: s}\nspec: {}\n")
    cfg = kwokstreams.write_config(tmp_path / "kwok", stages, **kw)
    docs = [d for d in yaml.safe_load_all(cfg.read_text()) if d]
    assert docs[0]["kind"] == "Stage"  # the stages come first, unchanged
    return {d["kind"]: d for d in docs}


def test_every_pod_gets_the_log_file_the_exec_dir_and_the_loopback_forwards(tmp_path):
    docs = _by_kind(tmp_path)
    log = docs["ClusterLogs"]["spec"]["logs"][0]
    assert log == {"logsFile": str(tmp_path / "kwok" / "container.log"), "follow": True}
    first = (tmp_path / "kwok" / "container.log").read_text().splitlines()[0]
    assert first.endswith(" stdout F simulated container on a kwok node: no process runs here")
    import os

    local = docs["ClusterExec"]["spec"]["execs"][0]["local"]
    assert local["workDir"] == ("/tmp" if os.geteuid() == 0 else str(tmp_path / "kwok" / "exec"))
    forwards = docs["ClusterPortForward"]["spec"]["forwards"]
    assert {f["ports"][0]: (f["target"]["address"], f["target"]["port"]) for f in forwards} == {
        p: ("127.0.0.1", p) for p in (80, 8000, 8080, 8265, 8888)}


def test_forwards_can_be_chosen_and_exec_left_out(tmp_path):
    docs = _by_kind(tmp_path, forwards={8080: 18080}, exec_=False)
    assert "ClusterExec" not in docs
    assert docs["ClusterPortForward"]["spec"]["forwards"] == [{"ports": [8080], "target": {"address": "127.0.0.1", "port": 18080}}]


def test_cri_lines_and_the_api_server_flags(tmp_path):
    import datetime as dt

    when = dt.datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=dt.UTC)
    assert kwokstreams.cri_line("hi", when=when) == "2026-01-02T03:04:05.123456000Z stdout F hi\n"
    flags = kwokstreams.apiserver_args(tmp_path)
    assert f"--kubelet-certificate-authority={tmp_path / 'serving-ca.crt'}" in flags
    assert "--kubelet-preferred-address-types=InternalIP" in flags


def test_a_plane_started_as_root_execs_as_nobody(tmp_path):
    as_root = kwokstreams.rules(tmp_path, root=True)
    local = next(d for d in as_root if d["kind"] == "ClusterExec")["spec"]["execs"][0]["local"]
    assert local["securityContext"] == {"runAsUser": 65534, "runAsGroup": 65534} and local["workDir"] == "/tmp"
    as_user = kwokstreams.rules(tmp_path, root=False)
    local = next(d for d in as_user if d["kind"] == "ClusterExec")["spec"]["execs"][0]["local"]
    assert "securityContext" not in local and local["workDir"] == str(tmp_path / "exec")
