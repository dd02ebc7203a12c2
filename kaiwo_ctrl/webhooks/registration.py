"""The webhook configurations kaiwo-ctrl owns, and keeping them current.

Two objects: ``<prefix>-mutating-webhook-configuration`` and
``<prefix>-validating-webhook-configuration``. Every webhook in them

* fails open (``failurePolicy: Ignore``) with a timeout of at most 5 s, so a
  stopped or slow operator never blocks the cluster; the reconcilers keep
  their own validation, so nothing depends on a webhook having run. The only
  exception is the enforcement pair, whose failure policy the admin chooses
  (``Fail`` by default: enforcement that a stopped operator lifts is no
  enforcement);
* uses ``matchPolicy: Equivalent`` and ``sideEffects: NoneOnDryRun`` where it
  writes (the writes are skipped on dry-run), ``None`` elsewhere;
* sees only what it must: the Job webhooks have an ``objectSelector`` on
  ``kaiwo.silogen.ai/managed: "true"``, so unlabelled Jobs never reach the
  operator. The enforcement webhooks (only with enforcement on) have the
  opposite object selector, a ``namespaceSelector`` that always leaves out
  ``kube-system`` and the operator's own namespace, and a CEL
  ``matchCondition`` that sends only Jobs naming a GPU resource.

In a cluster the configurations come from ``config/webhook`` (generated from
this module) and point at the webhook Service; the leader patches in the CA
bundle and the enforcement webhooks. Out of cluster they point at a URL and
the operator creates them.
"""

from __future__ import annotations

import argparse
import base64
import logging
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kaiwo_ctrl.runtime.objects.apply import contains
from kaiwo_ctrl.runtime.api.client import Client, Resource
from kaiwo_ctrl.runtime.objects.labelselector import label_selector

log = logging.getLogger("kaiwo_ctrl.webhooks.registration")

MUTATING = Resource("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations", "MutatingWebhookConfiguration", False)
VALIDATING = Resource("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations", "ValidatingWebhookConfiguration", False)

MANAGED_LABEL = "kaiwo.silogen.ai/managed"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
MAX_TIMEOUT_SECONDS = 5

JOB_MUTATE_PATH = "/mutate-batch-v1-job"
JOB_VALIDATE_PATH = "/validate-batch-v1-job"

#: Our kinds: (group, version, plural, kind) -> validation path, controller-runtime style.
OWN_KINDS: tuple[tuple[str, str, str, str], ...] = (
    ("kaiwo.silogen.ai", "v1alpha1", "kaiwojobs", "KaiwoJob"),
    ("kaiwo.silogen.ai", "v1alpha1", "kaiwoservices", "KaiwoService"),
    ("kaiwo.silogen.ai", "v1alpha1", "kaiwoqueueconfigs", "KaiwoQueueConfig"),
    ("config.kaiwo.silogen.ai", "v1alpha1", "aimnamespaceconfigs", "AIMNamespaceConfig"),
    ("kubeai.org", "v1", "models", "Model"),
)


def validate_path(group: str, version: str, kind: str) -> str:
    return f"/validate-{group.replace('.', '-')}-{version}-{kind.lower()}"


@dataclass(frozen=True)
class RegistrationOptions:
    prefix: str = "kaiwo"
    #: In cluster: the webhook Service (namespace, name, port).
    service: tuple[str, str, int] | None = None
    #: Out of cluster: ``https://host:port`` the apiserver calls instead.
    url_base: str | None = None
    operator_namespace: str = "kaiwo-system"
    enforce: bool = False
    enforcement_namespace_selector: str = ""
    enforcement_failure_policy: str = "Fail"
    timeout_seconds: int = MAX_TIMEOUT_SECONDS
    #: GPU resource names besides amd.com/gpu and nvidia.com/gpu (KaiwoConfig's defaultGpuResourceKey)
    gpu_resource_keys: tuple[str, ...] = ()
    labels: dict[str, str] = field(default_factory=lambda: {"app.kubernetes.io/name": "kaiwo-ctrl"})

    @property
    def mutating_name(self) -> str:
        return f"{self.prefix}-mutating-webhook-configuration"

    @property
    def validating_name(self) -> str:
        return f"{self.prefix}-validating-webhook-configuration"


def enforcement_namespace_selector(opts: RegistrationOptions) -> dict[str, Any]:
    """The admin's selector plus, always, "not kube-system, not our own namespace"."""
    sel = label_selector(opts.enforcement_namespace_selector)
    excluded = sorted({"kube-system", opts.operator_namespace})
    sel.setdefault("matchExpressions", []).append({"key": NAMESPACE_NAME_LABEL, "operator": "NotIn", "values": excluded})
    return sel


_GPU_KEYS = ("amd.com/gpu", "nvidia.com/gpu")
#: a qualified resource name (``[prefix/]name``): nothing that could end a CEL string
_RESOURCE_NAME = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def gpu_keys(extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The GPU resource names the enforcement match condition names: the two
    vendors' and the configured default key (a malformed one is ignored)."""
    return tuple(dict.fromkeys((*_GPU_KEYS, *(k for k in extra if k and len(k) <= 253 and _RESOURCE_NAME.match(k)))))


def _gpu_match_condition(extra: tuple[str, ...] = ()) -> dict[str, str]:
    """CEL the apiserver evaluates before calling an enforcement webhook: only
    Jobs with a container that names a GPU resource are sent. CPU Jobs never
    wait for the operator, even when enforcement fails closed."""
    def names_gpu(part: str) -> str:
        keys = " || ".join(f"'{k}' in c.resources.{part}" for k in gpu_keys(extra))
        return f"(has(c.resources.{part}) && ({keys}))"

    per_container = f"has(c.resources) && ({names_gpu('limits')} || {names_gpu('requests')})"
    pod = "object.spec.template.spec"
    expr = (
        f"{pod}.containers.exists(c, {per_container})"
        f" || (has({pod}.initContainers) && {pod}.initContainers.exists(c, {per_container}))"
    )
    return {"name": "requests-gpu", "expression": expr}


def _client_config(opts: RegistrationOptions, path: str, ca_bundle: bytes | None) -> dict[str, Any]:
    if opts.url_base:
        cfg: dict[str, Any] = {"url": opts.url_base.rstrip("/") + path}
    else:
        ns, name, port = opts.service or (opts.operator_namespace, f"{opts.prefix}-webhook-service", 443)
        cfg = {"service": {"namespace": ns, "name": name, "path": path, "port": port}}
    if ca_bundle:
        cfg["caBundle"] = base64.b64encode(ca_bundle).decode()
    return cfg


def _webhook(opts: RegistrationOptions, name: str, path: str, rules: list[dict], ca: bytes | None, *,
             writes: bool = False, object_selector: dict | None = None, namespace_selector: dict | None = None,
             failure_policy: str = "Ignore", match_conditions: list[dict] | None = None) -> dict[str, Any]:
    hook: dict[str, Any] = {
        "name": name,
        "admissionReviewVersions": ["v1"],
        "clientConfig": _client_config(opts, path, ca),
        "rules": rules,
        "failurePolicy": failure_policy,
        "matchPolicy": "Equivalent",
        "sideEffects": "NoneOnDryRun" if writes else "None",
        "timeoutSeconds": min(opts.timeout_seconds, MAX_TIMEOUT_SECONDS),
    }
    if object_selector is not None:
        hook["objectSelector"] = object_selector
    if namespace_selector is not None:
        hook["namespaceSelector"] = namespace_selector
    if match_conditions:
        hook["matchConditions"] = match_conditions
    return hook


def _rule(group: str, version: str, plural: str, ops: list[str]) -> dict[str, Any]:
    return {"apiGroups": [group], "apiVersions": [version], "resources": [plural], "operations": ops, "scope": "*"}


_MANAGED = {"matchLabels": {MANAGED_LABEL: "true"}}
_JOBS = ("batch", "v1", "jobs")


def desired_configurations(opts: RegistrationOptions, ca_bundle: bytes | None = None) -> tuple[dict, dict]:
    """The MutatingWebhookConfiguration and ValidatingWebhookConfiguration we own."""
    mutating = [
        _webhook(opts, "mutate-jobs.kaiwo.silogen.ai", JOB_MUTATE_PATH, [_rule(*_JOBS, ["CREATE"])], ca_bundle,
                 writes=True, object_selector=_MANAGED),
    ]
    validating = [
        _webhook(opts, "validate-jobs.kaiwo.silogen.ai", JOB_VALIDATE_PATH, [_rule(*_JOBS, ["DELETE"])], ca_bundle,
                 writes=True, object_selector=_MANAGED),
    ]
    for group, version, plural, kind in OWN_KINDS:
        validating.append(
            _webhook(opts, f"validate-{kind.lower()}.kaiwo.silogen.ai", validate_path(group, version, kind),
                     [_rule(group, version, plural, ["CREATE", "UPDATE"])], ca_bundle)
        )
    if opts.enforce:
        ns_sel = enforcement_namespace_selector(opts)
        unlabelled = {"matchExpressions": [{"key": MANAGED_LABEL, "operator": "DoesNotExist"}]}
        not_managed = {"matchExpressions": [{"key": MANAGED_LABEL, "operator": "NotIn", "values": ["true"]}]}
        mutating.append(
            _webhook(opts, "enforce-mutate-jobs.kaiwo.silogen.ai", JOB_MUTATE_PATH, [_rule(*_JOBS, ["CREATE"])], ca_bundle,
                     writes=True, object_selector=unlabelled, namespace_selector=ns_sel,
                     failure_policy=opts.enforcement_failure_policy, match_conditions=[_gpu_match_condition(opts.gpu_resource_keys)])
        )
        validating.append(
            _webhook(opts, "enforce-validate-jobs.kaiwo.silogen.ai", JOB_VALIDATE_PATH, [_rule(*_JOBS, ["CREATE"])], ca_bundle,
                     object_selector=not_managed, namespace_selector=ns_sel, failure_policy=opts.enforcement_failure_policy,
                     match_conditions=[_gpu_match_condition(opts.gpu_resource_keys)])
        )
    for hook in mutating:
        hook["reinvocationPolicy"] = "Never"
    meta = {"labels": dict(opts.labels)}
    return (
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": MUTATING.kind,
         "metadata": {"name": opts.mutating_name, **meta}, "webhooks": mutating},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": VALIDATING.kind,
         "metadata": {"name": opts.validating_name, **meta}, "webhooks": validating},
    )


def _webhooks_by_name(obj: Mapping[str, Any]) -> dict[str, Any]:
    return {w.get("name"): w for w in obj.get("webhooks") or []}


async def ensure_configurations(client: Client, opts: RegistrationOptions, ca_bundle: bytes | None, *, create: bool) -> int:
    """Bring both configurations to the desired state; returns the number of writes.

    Nothing is written when they already match. ``create`` (out of cluster)
    creates a missing configuration; in a cluster a missing one is reported
    (it belongs to the installed manifests).
    """
    writes = 0
    desired = dict(zip((MUTATING.kind, VALIDATING.kind), desired_configurations(opts, ca_bundle)))
    for res in (MUTATING, VALIDATING):
        want = desired[res.kind]
        name = want["metadata"]["name"]
        have = await client.get_or_none(res, name)
        if have is None:
            if not create:
                log.error("webhook configuration missing: apply config/default", extra={"object": name})
                continue
            await client.create(res, want)
            writes += 1
            log.info("webhook configuration created", extra={"object": name})
            continue
        current = _webhooks_by_name(have)
        wanted = _webhooks_by_name(want)
        if current.keys() == wanted.keys() and all(contains(current[n], w) for n, w in wanted.items()):
            continue
        body = dict(have)
        body["webhooks"] = want["webhooks"]
        await client.replace(res, body)
        writes += 1
        log.info("webhook configuration updated", extra={"object": name})
    return writes


# ------------------------------------------------------------- manifests


HEADER = "# Generated by python -m kaiwo_ctrl.webhooks.registration from kaiwo_ctrl/webhooks/registration.py. Do not edit.\n"
MANIFEST = Path(__file__).resolve().parents[2] / "config" / "webhook" / "manifests.yaml"


def manifest_text() -> str:
    """config/webhook/manifests.yaml: the configurations as installed (Service clientConfig, no CA yet)."""
    opts = RegistrationOptions(prefix="webhook", service=("system", "webhook-service", 443), operator_namespace="system")
    docs = desired_configurations(opts)
    for d in docs:
        d["metadata"]["name"] = d["metadata"]["name"].removeprefix("webhook-")
    return HEADER + yaml.safe_dump_all(docs, sort_keys=False)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kaiwo_ctrl.webhooks.registration")
    p.add_argument("--check", action="store_true", help="exit 1 when config/webhook/manifests.yaml is stale")
    args = p.parse_args(argv)
    text = manifest_text()
    if args.check:
        stale = not MANIFEST.exists() or MANIFEST.read_text() != text
        if stale:
            print(f"{MANIFEST} is stale: run python -m kaiwo_ctrl.webhooks.registration", file=sys.stderr)
        return 1 if stale else 0
    MANIFEST.parent.mkdir(parents=True, exist_ok=True)
    MANIFEST.write_text(text)
    print(f"wrote {MANIFEST}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
