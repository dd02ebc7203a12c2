"""``kaiwo-ctrl render`` on the README's command and on KaiwoJob/KaiwoService
examples in the style of upstream Kaiwo's ``workloads/`` directory (our own
text, in fixtures/examples), with the sample kwok Nodes as the cluster.

Offline Nodes carry neither a Ready condition nor the pool labels the operator
writes in a cluster; render must count them as the file describes them. A spec
the cluster cannot run is one line on stderr naming the field, exit code 2.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kaiwo_ctrl.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = Path(__file__).parent / "fixtures" / "examples"
NODES = ROOT / "config" / "samples" / "nodes_kwok.yaml"
GPU = "amd.com/gpu"


def pod_templates(obj: dict) -> list[tuple[dict, int]]:
    """(pod template, replicas) of every pod a rendered child would run."""
    spec = obj.get("spec") or {}
    kind = obj["kind"]
    if kind == "AppWrapper":
        return [t for c in spec["components"] for t in pod_templates(c["template"])]
    if kind in ("RayJob", "RayService"):
        cluster = spec.get("rayClusterSpec") or spec.get("rayClusterConfig")
        out = [(cluster["headGroupSpec"]["template"], 1)]
        return out + [(g["template"], g.get("replicas", 1)) for g in cluster.get("workerGroupSpecs") or []]
    if kind in ("Job", "Deployment"):
        return [(spec["template"], spec.get("parallelism", spec.get("replicas", 1)))]
    return []


def gpus_requested(children: list[dict]) -> int:
    total = 0
    for child in children:
        if child["kind"] == "Job" and child["metadata"]["name"].endswith("-download"):
            continue
        for template, replicas in pod_templates(child):
            for c in template["spec"]["containers"]:
                total += int(((c.get("resources") or {}).get("limits") or {}).get(GPU, 0)) * replicas
    return total


def render_cli(capsys, *args: str) -> tuple[int, list[dict], str]:
    rc = main(["render", *args])
    out, err = capsys.readouterr()
    docs = [d for d in yaml.safe_load_all(out) if d] if rc == 0 else []
    return rc, docs, err


def test_readme_render_command():
    """The README's command, run as a user runs it (a separate process)."""
    out = subprocess.run(
        [sys.executable, "-m", "kaiwo_ctrl", "render", "config/samples/kaiwo_v1alpha1_kaiwojob.yaml",
         "--nodes", "config/samples/nodes_kwok.yaml"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr
    (job,) = [d for d in yaml.safe_load_all(out.stdout) if d]
    assert (job["kind"], job["metadata"]["name"]) == ("Job", "hello-job")
    assert gpus_requested([job]) == 1


@pytest.mark.parametrize(
    ("example", "kinds", "gpus"),
    [
        ("batch-eval-job.yaml", ["Job"], 8),
        ("ray-finetune-job.yaml", ["PersistentVolumeClaim", "PersistentVolumeClaim", "ConfigMap", "Job", "RayJob"], 16),
        ("ray-serve-service.yaml", ["PersistentVolumeClaim", "ConfigMap", "Job", "AppWrapper"], 4),
        ("web-service.yaml", ["Deployment"], 1),
    ],
)
def test_upstream_style_examples_render_on_the_sample_nodes(capsys, example, kinds, gpus):
    rc, children, err = render_cli(capsys, str(EXAMPLES / example), "--nodes", str(NODES))
    assert rc == 0, err
    assert sorted(c["kind"] for c in children) == sorted(kinds), [(c["kind"], c["metadata"]["name"]) for c in children]
    assert gpus_requested(children) == gpus


def test_multinode_ray_job_splits_over_the_8_gpu_nodes(capsys):
    rc, children, err = render_cli(capsys, str(EXAMPLES / "ray-finetune-job.yaml"), "--nodes", str(NODES))
    assert rc == 0, err
    (ray_job,) = [c for c in children if c["kind"] == "RayJob"]
    (workers,) = ray_job["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    assert workers["replicas"] == 2
    assert workers["template"]["spec"]["containers"][0]["resources"]["limits"][GPU] == "8"


def test_a_spec_the_cluster_cannot_run_is_one_line_naming_the_field(capsys, tmp_path):
    doc = yaml.safe_load((EXAMPLES / "batch-eval-job.yaml").read_text())
    doc["spec"]["gpus"] = 64
    path = tmp_path / "too-big.yaml"
    path.write_text(yaml.safe_dump(doc))
    rc, _, err = render_cli(capsys, str(path), "--nodes", str(NODES))
    assert rc == 2
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "KaiwoJob/batch-eval-example" in lines[0] and "spec.gpus" in lines[0], lines[0]


def test_an_unreadable_file_is_one_line(capsys, tmp_path):
    rc, _, err = render_cli(capsys, str(tmp_path / "missing.yaml"))
    assert rc == 2 and "missing.yaml" in err and len(err.strip().splitlines()) == 1, err
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: [unclosed\n")
    rc, _, err = render_cli(capsys, str(bad))
    assert rc == 2 and "Traceback" not in err, err
