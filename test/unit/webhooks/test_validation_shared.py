"""The admission webhook and the reconcilers run the same checks: one table
of bad specs (and their boundary values), called through both entry points,
must give the same field path and the same message."""

from __future__ import annotations

import datetime as dt

import pytest

from kaiwo_ctrl.aim.status import READY, Observed
from kaiwo_ctrl.aim.status import desired_status as aim_status
from kaiwo_ctrl.aim.validation import first_error as aim_first_error
from kaiwo_ctrl.runtime.objects.fielderrors import FieldError
from kaiwo_ctrl.serving.model.config import parse_config
from kaiwo_ctrl.serving.model.pods import build_pod
from kaiwo_ctrl.webhooks.validate import OwnKindValidator
from kaiwo_ctrl.workloads.reconcile.desired import load
from kaiwo_ctrl.workloads.builders.validation import MAX_ENTRYPOINT_BYTES, validate
from kaiwo_ctrl.workloads.base.world import World

MODEL_CONFIG = parse_config({
    "resourceProfiles": {"nvidia-gpu-l4": {"limits": {"nvidia.com/gpu": "1"}}, "cpu": {"requests": {"cpu": "1"}}},
    "cacheProfiles": {"standard": {"sharedFilesystem": {"storageClassName": "standard"}}},
})
WEBHOOK = OwnKindValidator(World.from_dicts, lambda: MODEL_CONFIG)
JOB = {"user": "u@example.com", "image": "busybox", "entrypoint": "true"}
MODEL = {"url": "hf://org/model", "engine": "VLLM", "features": ["TextGeneration"], "resourceProfile": "cpu:1"}


def doc(kind: str, spec: dict) -> dict:
    group = {"Model": "kubeai.org/v1", "AIMNamespaceConfig": "config.kaiwo.silogen.ai/v1alpha1"}
    return {"apiVersion": group.get(kind, "kaiwo.silogen.ai/v1alpha1"), "kind": kind,
            "metadata": {"name": "w", "namespace": "ns", "uid": "u1", "generation": 1}, "spec": spec}


def reconciler_message(kind: str, obj: dict) -> str | None:
    """The message of the condition the kind's reconciler writes (None: valid)."""
    if kind in ("KaiwoJob", "KaiwoService"):
        errors = validate(load(obj), World.from_dicts())  # what the status observes first
        return str(errors[0]) if errors else None  # SpecValid=False, status ERROR
    if kind == "Model":
        try:
            build_pod(obj, MODEL_CONFIG)
        except FieldError as e:
            return str(e)  # ConfigValid=False
        return None
    now = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    status = aim_status("w", None, Observed(generation=1, spec_error=aim_first_error(obj)), now)
    ready = next(c for c in status["conditions"] if c["type"] == READY)
    return ready["message"] if ready["reason"] == "InvalidSpec" else None


#: (kind, spec, field path refused, or None for a boundary value both accept)
CASES = [
    ("KaiwoJob", {**JOB, "gpus": 4, "replicas": 1, "gpusPerReplica": 5}, "spec.gpusPerReplica"),
    ("KaiwoService", {**JOB, "gpus": 2, "replicas": 1, "gpusPerReplica": 3}, "spec.gpusPerReplica"),
    ("KaiwoJob", {**JOB, "gpus": 4, "replicas": 1, "gpusPerReplica": 4}, None),
    ("KaiwoJob", {**JOB, "replicas": 2, "gpusPerReplica": 8}, None),  # without gpus, replicas x gpusPerReplica
    ("KaiwoJob", {**JOB, "entrypoint": "x" * (MAX_ENTRYPOINT_BYTES + 1)}, "spec.entrypoint"),
    ("KaiwoJob", {**JOB, "entrypoint": "x" * MAX_ENTRYPOINT_BYTES}, None),
    ("KaiwoJob", {**JOB, "ray": True, "entrypoint": "é" * (MAX_ENTRYPOINT_BYTES // 2 + 1)}, "spec.entrypoint"),
    ("KaiwoService", {**JOB, "entrypoint": "x" * (MAX_ENTRYPOINT_BYTES + 1)}, "spec.entrypoint"),
    ("Model", {**MODEL, "resourceProfile": "amd-gpu-mi300:1"}, "spec.resourceProfile"),
    ("Model", {**MODEL, "resourceProfile": "cpu"}, "spec.resourceProfile"),
    ("Model", {**MODEL, "resourceProfile": "cpu:x"}, "spec.resourceProfile"),
    ("Model", {**MODEL, "resourceProfile": "cpu:0"}, "spec.resourceProfile"),
    ("Model", {**MODEL, "cacheProfile": "fast"}, "spec.cacheProfile"),
    ("Model", {**MODEL, "resourceProfile": "nvidia-gpu-l4:2", "cacheProfile": "standard"}, None),
    ("AIMNamespaceConfig", {"credentials": {"huggingFaceToken": {"secretName": "hf"}}},
     "spec.credentials.huggingFaceToken.secretKey"),
    ("AIMNamespaceConfig", {"credentials": {"s3": [{"accessKeyId": {"secretName": "Bad_Name", "secretKey": "k"}}]}},
     "spec.credentials.s3[0].accessKeyId.secretName"),
    ("AIMNamespaceConfig", {"images": {"imagePullSecrets": ["ok", "NOT ok"]}}, "spec.images.imagePullSecrets[1]"),
    ("AIMNamespaceConfig", {"gateway": {"namespace": "gw-system"}}, "spec.gateway.name"),
    ("AIMNamespaceConfig", {"gateway": {"name": "gw"}}, None),  # the config's own namespace
    ("AIMNamespaceConfig", {"credentials": {"huggingFaceToken": {"secretName": "hf", "secretKey": "token"}}}, None),
]


@pytest.mark.parametrize(("kind", "spec", "path"), CASES, ids=[f"{c[0]}-{c[2]}-{i}" for i, c in enumerate(CASES)])
def test_webhook_and_reconciler_agree(kind, spec, path):
    obj = doc(kind, spec)
    refused = WEBHOOK.errors(kind, obj)
    status = reconciler_message(kind, obj)
    if path is None:
        assert refused == [] and status is None, (refused, status)
        return
    assert [e.path for e in refused] == [path], refused
    assert status is not None and status.startswith(f"{path}: "), status
    detail = status[len(path) + 2:]
    if kind in ("KaiwoJob", "KaiwoService"):
        # the webhook adds the field.ErrorType ("Invalid value: ", "Too long: ") before the same message
        assert refused[0].detail.endswith(": " + detail) and refused[0].detail.split(": ")[0] in (
            "Invalid value", "Too long", "Required value"), (refused[0].detail, detail)
    else:
        assert str(refused[0]) == status
