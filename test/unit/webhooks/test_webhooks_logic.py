"""Pure parts of the admission webhooks: certificate planning, the webhook
configurations, the Job mutation and the checks for our own kinds."""

from __future__ import annotations

import base64
import datetime as dt

import pytest
from cryptography import x509

from kaiwo_ctrl.runtime.objects.fielderrors import FieldError
from kaiwo_ctrl.webhooks import registration as reg
from kaiwo_ctrl.webhooks.jobs import FINALIZER, mutation, tracking_kaiwojob
from kaiwo_ctrl.webhooks.server import MAX_LISTED_ERRORS, Verdict
from kaiwo_ctrl.webhooks.tls import CA_SETTLE, Material, TLSOptions, plan_secret
from kaiwo_ctrl.webhooks.validate import model_profile_errors, queue_config_errors, workload_errors
from kaiwo_ctrl.workloads.base.world import World

NOW = dt.datetime(2026, 6, 1, tzinfo=dt.timezone.utc)
OPTS = TLSOptions("ops", dns_names=("svc.ops.svc",), cert_validity=dt.timedelta(hours=3), ca_validity=dt.timedelta(days=30))


# ------------------------------------------------------------------ TLS


def secret_of(plan, annotations=None) -> dict:
    return {"type": "kubernetes.io/tls", "data": plan.data, "metadata": {"annotations": annotations or plan.annotations or {}}}


def cert(data: dict) -> x509.Certificate:
    return x509.load_pem_x509_certificate(base64.b64decode(data["tls.crt"]))


def test_missing_secret_gets_a_ca_and_a_certificate_with_the_service_names():
    plan = plan_secret(Material.from_secret(None), OPTS, NOW)
    assert plan.data is not None and "new CA" in plan.reason
    c = cert(plan.data)
    sans = c.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["svc.ops.svc"]
    ca = x509.load_pem_x509_certificate(base64.b64decode(plan.data["ca.crt"]))
    c.verify_directly_issued_by(ca)


def test_a_current_secret_is_left_alone_until_a_third_of_its_life_is_left():
    first = plan_secret(Material.from_secret(None), OPTS, dt.datetime.now(dt.timezone.utc))
    m = Material.from_secret(secret_of(first))
    now = dt.datetime.now(dt.timezone.utc)
    quiet = plan_secret(m, OPTS, now)
    assert quiet.data is None and quiet.next_check is not None
    renew = plan_secret(m, OPTS, quiet.next_check)
    assert renew.reason == "certificate renewal"
    assert cert(renew.data).serial_number != m.cert.serial_number
    assert renew.data["ca.crt"] == first.data["ca.crt"], "same CA: the apiserver's caBundle does not change"


def test_changed_names_reissue_the_certificate():
    first = plan_secret(Material.from_secret(None), OPTS, dt.datetime.now(dt.timezone.utc))
    other = TLSOptions("ops", ip_addresses=("127.0.0.1",), cert_validity=OPTS.cert_validity, ca_validity=OPTS.ca_validity)
    plan = plan_secret(Material.from_secret(secret_of(first)), other, dt.datetime.now(dt.timezone.utc))
    assert plan.reason == "certificate names changed"


def test_ca_renewal_adds_the_new_ca_first_and_moves_the_certificate_later():
    now = dt.datetime.now(dt.timezone.utc)
    first = plan_secret(Material.from_secret(None), OPTS, now)
    m = Material.from_secret(secret_of(first))
    late = m.ca.pair.cert.not_valid_after_utc - dt.timedelta(days=1)
    step1 = plan_secret(m, OPTS, late)
    assert step1.reason == "CA renewal"
    bundle = x509.load_pem_x509_certificates(base64.b64decode(step1.data["ca.crt"]))
    assert len(bundle) == 2, "old and new CA are both trusted"
    assert step1.data["tls.crt"] == first.data["tls.crt"], "the served certificate does not change yet"
    m1 = Material.from_secret(secret_of(step1))
    wait = plan_secret(m1, OPTS, late + CA_SETTLE / 2)
    assert wait.data is None and wait.next_check == m1.ca_rotated_at + CA_SETTLE
    step2 = plan_secret(m1, OPTS, late + CA_SETTLE)
    assert step2.reason == "certificate moves to the new CA"
    cert(step2.data).verify_directly_issued_by(bundle[0])


def test_unreadable_secret_is_replaced():
    bad = {"data": {"tls.crt": base64.b64encode(b"nope").decode()}}
    assert plan_secret(Material.from_secret(bad), OPTS, NOW).data is not None


# ----------------------------------------------------------- registration


def test_every_webhook_fails_open_within_five_seconds_except_enforcement():
    opts = reg.RegistrationOptions(url_base="https://127.0.0.1:9443", enforce=True, operator_namespace="ops")
    for cfg in reg.desired_configurations(opts, b"CA"):
        for hook in cfg["webhooks"]:
            assert hook["timeoutSeconds"] <= 5 and hook["matchPolicy"] == "Equivalent"
            assert hook["clientConfig"]["url"].startswith("https://127.0.0.1:9443/")
            assert base64.b64decode(hook["clientConfig"]["caBundle"]) == b"CA"
            enforcement = hook["name"].startswith("enforce-")
            assert hook["failurePolicy"] == ("Fail" if enforcement else "Ignore"), hook["name"]
            if enforcement:
                assert hook["matchConditions"][0]["name"] == "requests-gpu"
                exprs = hook["namespaceSelector"]["matchExpressions"]
                assert {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "ops"]} in exprs
            elif "jobs" in hook["name"]:
                assert hook["objectSelector"] == {"matchLabels": {"kaiwo.silogen.ai/managed": "true"}}
                assert hook["sideEffects"] == "NoneOnDryRun"
            else:
                assert hook["sideEffects"] == "None"


def test_enforcement_webhooks_exist_only_with_enforcement():
    names = {h["name"] for c in reg.desired_configurations(reg.RegistrationOptions()) for h in c["webhooks"]}
    assert not any(n.startswith("enforce-") for n in names)
    assert {"mutate-jobs.kaiwo.silogen.ai", "validate-jobs.kaiwo.silogen.ai", "validate-model.kaiwo.silogen.ai"} <= names


def test_config_webhook_manifests_are_generated():
    assert reg.MANIFEST.read_text() == reg.manifest_text(), "run python -m kaiwo_ctrl.webhooks.registration"


# ------------------------------------------------------------------ Jobs


SETTINGS = World.from_dicts().settings


def job(labels=None, gpu=None, **pod):
    c = {"name": "c", "image": "busybox"}
    if gpu:
        c["resources"] = {"requests": {gpu: "1"}}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "ns", "labels": labels or {}},
            "spec": {"template": {"spec": {"containers": [c], **pod}}}}


def test_managed_job_gets_labels_finalizer_and_grace_period():
    mutated, ops = mutation(job({"kaiwo.silogen.ai/managed": "true"}), SETTINGS, "a@b.com", enforce=False)
    labels = mutated["metadata"]["labels"]
    assert labels["kueue.x-k8s.io/queue-name"] == "kaiwo" and labels["kaiwo.silogen.ai/user"] == "a-b.com"
    paths = {o["path"]: o for o in ops}
    assert paths["/metadata/finalizers"]["value"] == [FINALIZER]
    assert paths["/spec/template/spec/terminationGracePeriodSeconds"] == {
        "op": "add", "path": "/spec/template/spec/terminationGracePeriodSeconds", "value": 0}


def test_an_explicit_grace_period_and_queue_are_kept():
    j = job({"kaiwo.silogen.ai/managed": "true", "kueue.x-k8s.io/queue-name": "team"}, terminationGracePeriodSeconds=30)
    mutated, ops = mutation(j, SETTINGS, "u", enforce=False)
    assert mutated["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team"
    assert not any("terminationGracePeriodSeconds" in o["path"] for o in ops)


@pytest.mark.parametrize(("labels", "gpu", "enforce", "managed"), [
    ({}, None, False, False),
    ({}, "amd.com/gpu", False, False),
    ({}, "amd.com/gpu", True, True),
    ({}, None, True, False),
    ({"kaiwo.silogen.ai/managed": "false"}, "nvidia.com/gpu", True, False),
])
def test_who_is_managed(labels, gpu, enforce, managed):
    assert (mutation(job(labels, gpu), SETTINGS, "u", enforce) is not None) == managed


def test_jobs_the_operator_made_for_a_kaiwojob_are_left_alone():
    j = job({"kaiwo.silogen.ai/managed": "true"})
    j["metadata"]["ownerReferences"] = [{"kind": "KaiwoJob", "name": "j", "uid": "1", "controller": True}]
    assert mutation(j, SETTINGS, "u", enforce=True) is None


def test_tracking_kaiwojob_follows_the_stored_job():
    mutated, _ = mutation(job({"kaiwo.silogen.ai/managed": "true"}), SETTINGS, "u", enforce=False)
    mutated["metadata"].update(uid="abc", resourceVersion="7", finalizers=[FINALIZER])
    mutated["status"] = {"active": 1}
    kj = tracking_kaiwojob(mutated, "alice")
    assert kj["spec"]["user"] == "alice" and kj["spec"]["clusterQueue"] == "kaiwo"
    assert kj["metadata"]["ownerReferences"] == [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "abc"}]
    assert set(kj["spec"]["job"]["metadata"]) == {"name", "namespace", "labels"} and "status" not in kj["spec"]["job"]


# -------------------------------------------------------------- our kinds


def test_workload_errors_use_the_reconciler_validation():
    doc = {"apiVersion": "kaiwo.silogen.ai/v1alpha1", "kind": "KaiwoJob", "metadata": {"name": "w"},
           "spec": {"storage": {"storageEnabled": True, "data": {"storageSize": "lots"}}}}
    assert [e.path for e in workload_errors(doc, World.from_dicts())] == ["spec.storage.data.storageSize"]


def test_queue_config_with_an_undefined_flavor():
    spec = {"clusterQueues": [{"name": "q", "spec": {"resourceGroups": [
        {"coveredResources": ["cpu"], "flavors": [{"name": "x", "resources": [{"name": "cpu", "nominalQuota": "1"}]}]}]}}]}
    [err] = queue_config_errors({"spec": spec})
    assert err.path == "spec.clusterQueues[0].spec.resourceGroups[0].flavors[0].name"


def test_refusals_are_bounded():
    errors = [FieldError(f"spec.x[{i}]", "Invalid value: 1") for i in range(MAX_LISTED_ERRORS + 5)]
    v = Verdict.refuse(errors, "KaiwoJob", "w")
    assert not v.allowed and v.code == 403 and "and 5 more" in v.message
    assert v.message.count("spec.x[") == MAX_LISTED_ERRORS


def test_a_short_lived_certificate_is_not_rewritten_at_once():
    """The next renewal of a fresh 45 s certificate is 30 s away, not now."""
    short = TLSOptions("ops", ip_addresses=("127.0.0.1",), cert_validity=dt.timedelta(seconds=45))
    now = dt.datetime.now(dt.timezone.utc)
    first = plan_secret(Material.from_secret(None), short, now)
    again = plan_secret(Material.from_secret(secret_of(first)), short, now)
    assert again.data is None
    assert dt.timedelta(seconds=29) < again.next_check - now <= dt.timedelta(seconds=31)


def test_config_default_wires_the_webhooks_to_the_manager():
    from test_config import manager_container, one, render

    docs = render("default")
    svc = one(docs, "Service", "kaiwo-webhook-service")
    pod_labels = one(docs, "Deployment", "kaiwo-controller-manager")["spec"]["template"]["metadata"]["labels"]
    assert svc["metadata"]["namespace"] == "kaiwo-system"
    assert all(pod_labels.get(k) == v for k, v in svc["spec"]["selector"].items())
    ports = {p["name"]: p["containerPort"] for p in manager_container(docs)["ports"]}
    assert svc["spec"]["ports"][0]["targetPort"] == "webhook-server" and ports["webhook-server"] == 9443
    for kind, name in (("MutatingWebhookConfiguration", "kaiwo-mutating-webhook-configuration"),
                       ("ValidatingWebhookConfiguration", "kaiwo-validating-webhook-configuration")):
        for hook in one(docs, kind, name)["webhooks"]:
            assert hook["clientConfig"]["service"]["name"] == "kaiwo-webhook-service"
            assert hook["clientConfig"]["service"]["namespace"] == "kaiwo-system"
            assert hook["failurePolicy"] == "Ignore"


def test_profiles_follow_a_live_model_config_source():
    from types import SimpleNamespace

    from kaiwo_ctrl.serving.model.config import parse_config
    from kaiwo_ctrl.webhooks.validate import profiles_of

    source = SimpleNamespace(current=parse_config({"resourceProfiles": {"cpu": {}}}))
    lookup = profiles_of(source)
    assert [e.path for e in model_profile_errors({"resourceProfile": "gpu:1"}, lookup())] == ["spec.resourceProfile"]
    source.current = parse_config({"resourceProfiles": {"cpu": {}, "gpu": {}}})
    assert model_profile_errors({"resourceProfile": "gpu:1"}, lookup()) == []
    assert model_profile_errors({"resourceProfile": "whatever:1"}, None) == [], "no model config known: nothing checked"
