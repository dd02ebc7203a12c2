"""The operator's environment is read in settings.environment; builders get the values passed in."""

from __future__ import annotations

import pytest

from kaiwo_ctrl.settings import environment as env
from kaiwo_ctrl.workloads.reconcile.desired import desired_children
from kaiwo_ctrl.workloads.base.world import World


def test_operator_image():
    assert env.operator_image({}) == env.DEFAULT_IMAGE
    assert env.operator_image({env.IMAGE_ENV: ""}) == env.DEFAULT_IMAGE
    assert env.operator_image({env.IMAGE_ENV: "registry.example/kaiwo-ctrl:v1"}) == "registry.example/kaiwo-ctrl:v1"


@pytest.mark.parametrize(("value", "want"), [
    (None, 86400), ("3600", 3600), ("0", 86400), ("-5", 86400), ("ten", 86400), ("1.5", 86400), ("", 86400),
])
def test_download_deadline(value, want):
    environ = {} if value is None else {env.DOWNLOAD_DEADLINE_ENV: value}
    assert env.download_deadline_seconds(environ) == want


def test_builders_take_the_deadline_and_image_from_the_world(monkeypatch):
    monkeypatch.setenv(env.DOWNLOAD_DEADLINE_ENV, "7")
    monkeypatch.setenv(env.IMAGE_ENV, "from-env")
    world = World.from_dicts(queue_config={"clusterQueues": [{"name": "kaiwo"}]}, downloader_image="img",
                             download_deadline_seconds=3600)
    job = {"apiVersion": "kaiwo.silogen.ai/v1alpha1", "kind": "KaiwoJob",
           "metadata": {"name": "j", "namespace": "ns", "uid": "u1", "generation": 1},
           "spec": {"user": "a@b.c", "image": "i", "storage": {"storageEnabled": True, "data": {
               "storageSize": "1Gi", "mountPath": "/data",
               "download": {"git": [{"repository": "https://g/r.git", "targetPath": "repo"}]}}}}}
    (download,) = [c for c in desired_children(job, world) if c["kind"] == "Job" and c["metadata"]["name"] == "j-download"]
    assert download["spec"]["activeDeadlineSeconds"] == 3600
    assert download["spec"]["template"]["spec"]["containers"][0]["image"] == "img"


def test_one_default_image_for_downloads_and_the_model_loader(monkeypatch):
    from kaiwo_ctrl.serving.model.config import parse_config

    monkeypatch.delenv(env.IMAGE_ENV, raising=False)
    assert parse_config(None).loader_image == env.DEFAULT_IMAGE == World().downloader_image
    monkeypatch.setenv(env.IMAGE_ENV, "registry.example/kaiwo-ctrl:v2")
    assert parse_config(None).loader_image == "registry.example/kaiwo-ctrl:v2"
    assert parse_config({"modelLoading": {"image": "own"}}).loader_image == "own"
