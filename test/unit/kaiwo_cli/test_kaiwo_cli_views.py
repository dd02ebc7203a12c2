"""kaiwo monitor / status gpus|queues / submit's first run: the pure parts."""

from __future__ import annotations

import pytest
import yaml

from kaiwo_ctrl.kaiwo_cli import gpustats, views
from kaiwo_ctrl.kaiwo_cli.config import first_run
from kaiwo_ctrl.kaiwo_cli.errors import USAGE, CliError

EXPOSITION = """# TYPE gpu_gfx_activity gauge
gpu_gfx_activity{gpu_id="1",gpu_partition_id="0",namespace="ml",pod="train-0",container="main"} 40
gpu_gfx_activity{gpu_id="0",gpu_partition_id="0",namespace="ml",pod="train-0",container="main"} 90.5
gpu_gfx_activity{gpu_id="2",gpu_partition_id="0"} 3
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="3",UUID="GPU-x",Hostname="n1",namespace="ml",pod="serve-0",container="vllm"} 17
# TYPE gpu_power_usage gauge
gpu_power_usage{gpu_id="0"} 320
"""


def test_utilisation_from_amd_and_nvidia_exporters():
    got = gpustats.parse_utilisation(EXPOSITION)
    assert [(u.pod, u.gpu, u.vendor, u.percent) for u in got] == [
        ("serve-0", "3", "nvidia", 17.0), ("train-0", "0", "amd", 90.5), ("train-0", "1", "amd", 40.0)]
    assert [u.pod for u in gpustats.for_pods(got, "ml", ["train-0"])] == ["train-0", "train-0"]
    assert gpustats.for_pods(got, "other", ["train-0"]) == []
    with pytest.raises(ValueError):
        gpustats.parse_utilisation("gpu_gfx_activity{broken 1\n")


def _node(name: str, gpus: int, vendor: str = "amd", cordoned: bool = False) -> dict:
    labels = ({"beta.amd.com/gpu.family.AI": str(gpus), "amd.com/gpu.product-name": "MI300X"} if vendor == "amd"
              else {"nvidia.com/gpu.count": str(gpus), "nvidia.com/gpu.product": "H100"})
    res = {"cpu": "64", "memory": "512Gi", f"{vendor}.com/gpu": str(gpus)}
    return {"metadata": {"name": name, "labels": labels}, "spec": {"unschedulable": cordoned},
            "status": {"capacity": res, "allocatable": res}}


def _pod(node: str | None, gpus: int, phase: str = "Running", init: int = 0, res: str = "amd.com/gpu") -> dict:
    return {"spec": {"nodeName": node, "containers": [{"resources": {"limits": {res: str(gpus)}}}, {}],
                     "initContainers": [{"resources": {"requests": {res: str(init)}}}] if init else []},
            "status": {"phase": phase}}


def test_pools_count_capacity_allocated_and_free():
    nodes = [_node("a", 8), _node("b", 8), _node("c", 4, "nvidia"), _node("d", 8, cordoned=True),
             {"metadata": {"name": "cpu"}, "status": {"capacity": {"cpu": "8", "memory": "32Gi"}}}]
    pods = [_pod("a", 4), _pod("b", 2, init=3), _pod("a", 8, phase="Succeeded"), _pod(None, 8),
            _pod("c", 1, res="nvidia.com/gpu"), _pod("d", 8)]
    rows = {r["vendor"]: r for r in gpustats.pool_rows(nodes, pods)}
    assert set(rows) == {"amd", "nvidia"}  # the CPU-only pool has no GPU row; the cordoned node joins no pool
    assert {k: rows["amd"][k] for k in ("nodes", "capacity", "allocated", "free")} == \
        {"nodes": 2, "capacity": 16, "allocated": 7, "free": 9}
    assert (rows["nvidia"]["capacity"], rows["nvidia"]["allocated"], rows["nvidia"]["resource"]) == (4, 1, "nvidia.com/gpu")


def test_queue_rows_sum_quota_and_usage_over_flavors():
    cq = {"metadata": {"name": "b"}, "spec": {"resourceGroups": [
        {"coveredResources": ["cpu"], "flavors": [{"name": "f", "resources": [{"name": "cpu", "nominalQuota": "10"}]}]},
        {"coveredResources": ["amd.com/gpu"], "flavors": [
            {"name": "x", "resources": [{"name": "amd.com/gpu", "nominalQuota": 8}]},
            {"name": "y", "resources": [{"name": "amd.com/gpu", "nominalQuota": "16"}]}]}]},
        "status": {"pendingWorkloads": 2, "admittedWorkloads": 5,
                   "flavorsUsage": [{"name": "x", "resources": [{"name": "amd.com/gpu", "total": "8"}]},
                                    {"name": "y", "resources": [{"name": "amd.com/gpu", "total": "4"}]}]}}
    empty = {"metadata": {"name": "a"}, "spec": {}}
    a, b = gpustats.queue_rows([cq, empty])
    assert (a["name"], a["gpuResource"], a["pending"], a["admitted"]) == ("a", None, 0, 0)
    assert (b["gpuQuota"], b["gpuUsed"], b["pending"], b["admitted"], b["quota"]["cpu"]) == (24, 12, 2, 5, 10)


@pytest.mark.parametrize("url, path", [
    ("http://amd-exporter.kube-amd-gpu.svc:5000/metrics",
     "/api/v1/namespaces/kube-amd-gpu/services/http:amd-exporter:5000/proxy/metrics"),
    ("https://dcgm.gpu-operator.svc.cluster.local/metrics",
     "/api/v1/namespaces/gpu-operator/services/https:dcgm:443/proxy/metrics"),
    ("http://127.0.0.1:9400/metrics", None),
    ("http://exporter.example.com/metrics", None),
    ("http://a.b.svc.evil.com/metrics", None),
])
def test_in_cluster_exporters_are_read_through_the_service_proxy(url, path):
    assert views.service_proxy_path(url) == path


def test_endpoint_must_be_http(monkeypatch):
    monkeypatch.delenv(views.ENDPOINT_ENV, raising=False)
    monkeypatch.delenv(views.OPERATOR_ENDPOINT_ENV, raising=False)
    for bad in (None, "file:///etc/passwd", "exporter:9400"):
        with pytest.raises(CliError) as e:
            views.endpoint_of(bad)
        assert e.value.code == USAGE
    monkeypatch.setenv(views.OPERATOR_ENDPOINT_ENV, "http://x.y.svc:1/metrics")
    assert views.endpoint_of(None) == "http://x.y.svc:1/metrics"


def test_first_run_writes_the_user_file_once(tmp_path):
    env = {"HOME": str(tmp_path)}
    path = tmp_path / "kaiwo.yaml"
    answers = iter(["", "carol@example.com", "team-b"])
    assert first_run(lambda _: next(answers), env={"KAIWOCONFIG": str(path), **env}) == path
    assert yaml.safe_load(path.read_text()) == {"user": "carol@example.com", "clusterQueue": "team-b"}
    # an existing file is never overwritten, and nothing is asked
    assert first_run(lambda _: pytest.fail("asked again"), env={"KAIWOCONFIG": str(path)}) is None
    other = tmp_path / "other.yaml"
    answers = iter(["dave", ""])
    first_run(lambda _: next(answers), env={"KAIWOCONFIG": str(other)})
    assert yaml.safe_load(other.read_text()) == {"user": "dave"}
    with pytest.raises(CliError, match="not a ClusterQueue name"):
        answers = iter(["erin", "Bad Queue"])
        first_run(lambda _: next(answers), env={"KAIWOCONFIG": str(tmp_path / "third.yaml")})
    assert not (tmp_path / "third.yaml").exists()


async def test_manage_without_its_ui_library_says_how_to_install_it(monkeypatch):
    import argparse
    import sys

    from kaiwo_ctrl.kaiwo_cli import cmd_manage
    from kaiwo_ctrl.kaiwo_cli.config import Defaults

    monkeypatch.setitem(sys.modules, "kaiwo_ctrl.kaiwo_cli.tui", None)  # as if Textual were not installed
    args = argparse.Namespace(kubeconfig=None, context=None, namespace=None, all_users=False, user=None,
                              metrics_endpoint=None, refresh=3.0)
    with pytest.raises(CliError) as e:
        await cmd_manage.run(args, None, Defaults())  # type: ignore[arg-type]
    assert e.value.code == USAGE and "pip install 'kaiwo-ctrl[tui]'" in e.value.message


def test_every_command_is_listed_in_the_help(capsys):
    from kaiwo_ctrl.kaiwo_cli.main import main

    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for command in ("submit", "list", "status", "logs", "exec", "port-forward", "monitor", "manage", "delete"):
        assert f"    {command}" in out, command
    assert "9  exec / port-forward: the pod is not running" in out
