"""KubeAI 0.23 ``proxy.mode`` with ``kaiwo-ctrl run`` as a process on a real apiserver:
``external`` runs no proxy and no autoscaler and gives each Model a headless Service
(KubeAI's name ``<model>-<uid[:6]>``) selecting its server Pods, and flags the Models
that rely on scale-from-zero; ``internal`` serves the proxy and removes those Services."""

from __future__ import annotations

import socket

import httpx
import pytest
import yaml

from support import eventually
from support.operator import OperatorProcess
from test_serving_support import MERGE, TEST_CONFIG, condition, create_model, get_model, list_pods, models_url

pytestmark = pytest.mark.integration


def refused(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(2)
        return s.connect_ex(("127.0.0.1", port)) != 0


def service(admin, ns: str, name: str) -> dict | None:
    r = admin.get(f"/api/v1/namespaces/{ns}/services/{name}")
    return r.json() if r.status_code == 200 else None


def events(admin, ns: str, reason: str) -> list[dict]:
    items = admin.get(f"/api/v1/namespaces/{ns}/events").json()["items"]
    return [e for e in items if e.get("reason") == reason]


def proxy_answers(port: int) -> bool:
    try:
        # serving: it answers; a listing without a token is refused (--proxy-auth kubernetes, the default)
        return httpx.get(f"http://127.0.0.1:{port}/openai/v1/models", timeout=2).status_code == 401
    except httpx.HTTPError:
        return False


async def test_external_mode_headless_services_no_proxy_then_internal_again(control_plane, admin, namespace, tmp_path):
    kc = str(control_plane.kubeconfig)
    path = tmp_path / "model-config.yaml"
    path.write_text(yaml.safe_dump({**TEST_CONFIG, "proxy": {"mode": "external"}}))
    ext = create_model(admin, namespace, "ext", minReplicas=1)
    zero = create_model(admin, namespace, "zero", minReplicas=0, maxReplicas=2)
    ext_svc, zero_svc = f"ext-{ext['metadata']['uid'][:6]}", f"zero-{zero['metadata']['uid'][:6]}"
    # a Service of the headless name that is not the Model's (the tenant's own): never touched
    taken = create_model(admin, namespace, "taken", minReplicas=1)
    taken_svc = f"taken-{taken['metadata']['uid'][:6]}"
    foreign = {"metadata": {"name": taken_svc, "labels": {"app": "model", "model": "taken"}},
               "spec": {"selector": {"app": "mine"}, "ports": [{"port": 9000}]}}
    r = admin.post(f"/api/v1/namespaces/{namespace}/services", json=foreign)
    assert r.status_code == 201, r.text
    foreign_uid = r.json()["metadata"]["uid"]

    op = OperatorProcess(kc, tmp_path / "external.log", f"--model-config={path}")
    try:
        await eventually(op.ready, timeout=120, what="operator ready")
        await eventually(lambda: service(admin, namespace, ext_svc), timeout=60, what="headless Service of ext")
        # no proxy listens in this process, on either listener, and no autoscaler runs
        assert refused(op.proxy_port) and refused(op.proxy_gateway_port)
        assert "proxy.mode external: no proxy listener and no autoscaler" in op.log_text()
        svc = service(admin, namespace, ext_svc)
        assert svc["spec"]["clusterIP"] == "None"
        assert svc["spec"]["selector"] == {"app": "model", "model": "ext"}
        assert [(p["port"], p["targetPort"]) for p in svc["spec"]["ports"]] == [(8000, 8000)]
        (ref,) = svc["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["name"], ref["uid"], ref["controller"]) == ("Model", "ext", ext["metadata"]["uid"], True)
        # the Service selects the server Pod the operator made for ext (what a Gateway routes to)
        await eventually(lambda: list_pods(admin, namespace, "ext"), timeout=60, what="ext's server Pod")
        selector = ",".join(f"{k}={v}" for k, v in svc["spec"]["selector"].items())
        selected = admin.get(f"/api/v1/namespaces/{namespace}/pods", params={"labelSelector": selector}).json()["items"]
        assert [p["metadata"]["name"] for p in selected] == [p["metadata"]["name"] for p in list_pods(admin, namespace, "ext")]
        assert service(admin, namespace, zero_svc) is not None
        await eventually(lambda: events(admin, namespace, "ServiceNameTaken"), timeout=30, what="ServiceNameTaken event")
        kept = service(admin, namespace, taken_svc)
        assert kept["metadata"]["uid"] == foreign_uid and not kept["metadata"].get("ownerReferences")
        assert kept["spec"]["selector"] == {"app": "mine"} and kept["spec"]["clusterIP"] != "None"
        # a Model left at minReplicas 0 would wait for a scale-from-zero nothing does: said on the Model
        await eventually(lambda: condition(get_model(admin, namespace, "zero"), "ScaleFromZero"), timeout=60,
                         what="ScaleFromZero condition")
        status, reason, message = condition(get_model(admin, namespace, "zero"), "ScaleFromZero")
        assert (status, reason) == ("False", "NoProxy") and "minReplicas" in message
        await eventually(lambda: events(admin, namespace, "ScaleFromZeroUnavailable"), timeout=30, what="Warning event")
        assert {e["involvedObject"]["name"] for e in events(admin, namespace, "ScaleFromZeroUnavailable")} == {"zero"}
        assert condition(get_model(admin, namespace, "ext"), "ScaleFromZero") is None
        # it goes once the Model keeps a replica
        r = admin.patch(models_url(namespace, "zero"), json={"spec": {"minReplicas": 1}}, headers=MERGE)
        assert r.status_code == 200, r.text
        await eventually(lambda: condition(get_model(admin, namespace, "zero"), "ScaleFromZero") is None, timeout=60,
                         what="condition gone at minReplicas 1")
        r = admin.patch(models_url(namespace, "zero"), json={"spec": {"minReplicas": 0}}, headers=MERGE)
        assert r.status_code == 200, r.text
        await eventually(lambda: condition(get_model(admin, namespace, "zero"), "ScaleFromZero"), timeout=60,
                         what="condition back at minReplicas 0")
    finally:
        assert op.stop() == 0, op.log_text()[-3000:]

    # internal (KubeAI's default): the proxy serves again, the headless Services go, the condition too
    path.write_text(yaml.safe_dump({**TEST_CONFIG, "proxy": {"mode": "internal"}}))
    op = OperatorProcess(kc, tmp_path / "internal.log", f"--model-config={path}")
    try:
        await eventually(op.ready, timeout=120, what="operator ready")
        await eventually(lambda: proxy_answers(op.proxy_port), timeout=60, what="proxy serving")
        await eventually(lambda: service(admin, namespace, ext_svc) is None and service(admin, namespace, zero_svc) is None,
                         timeout=60, what="headless Services deleted")
        await eventually(lambda: condition(get_model(admin, namespace, "zero"), "ScaleFromZero") is None, timeout=60,
                         what="condition removed in internal mode")
        assert service(admin, namespace, taken_svc)["metadata"]["uid"] == foreign_uid, "the tenant's Service stays"
    finally:
        assert op.stop() == 0, op.log_text()[-3000:]
