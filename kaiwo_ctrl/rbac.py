"""The permissions the operator needs, and the RBAC manifests generated from them.

Every rule below names the code that needs it. ``hack/gen-rbac``
(``python -m kaiwo_ctrl.rbac``) writes ``config/rbac/role.yaml`` (the
ClusterRole), ``config/rbac/leader_election_role.yaml`` (the namespaced Role)
and the editor/viewer ClusterRoles for users; ``--check`` only compares.

``test/unit/test_rbac.py`` keeps this list honest: a static scan of
``kaiwo_ctrl/`` finds every client call and informer with the resource it
touches, and fails when a used verb is not granted here or a granted verb is
not used. The e2e suite then runs the operator as the ServiceAccount of
``config/default`` (bound to exactly these roles) and requires no 403.

Verb mapping (what the apiserver authorizes for each client method):
``get``/``get_or_none`` -> get; ``list``/``list_all``/``list_stream`` -> list; ``watch`` ->
watch; informers -> list + watch; ``create`` -> create; ``replace`` ->
update; ``patch`` -> patch; ``apply`` (server-side apply) -> patch, plus
create because applying an object that does not exist creates it;
``delete`` -> delete. A ``subresource=`` (or the ``*_status`` helpers)
targets ``<resource>/<subresource>``.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
RBAC_DIR = REPO_ROOT / "config" / "rbac"

VERB_ORDER = ("get", "list", "watch", "create", "update", "patch", "delete")


@dataclass(frozen=True)
class Rule:
    """One resource (or subresource) of one API group and the verbs needed on it."""

    group: str
    resource: str
    verbs: tuple[str, ...]
    why: str
    #: For ``<kind>/finalizers`` only: (file, text) proving an owner reference
    #: with ``blockOwnerDeletion: true`` is built there (checked by the tests).
    evidence: tuple[tuple[str, str], ...] = ()
    #: Restrict every verb but ``create`` to these object names (RBAC cannot
    #: restrict ``create`` by name: the name is not known when it authorizes).
    resource_names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        unknown = set(self.verbs) - set(VERB_ORDER)
        if unknown:
            raise ValueError(f"unknown verbs {sorted(unknown)} for {self.resource}")
        if "*" in self.resource or "*" in self.group:
            raise ValueError("no wildcards")


KAIWO = "kaiwo.silogen.ai"
CONFIG = "config.kaiwo.silogen.ai"
KUEUE = "kueue.x-k8s.io"
KUBEAI = "kubeai.org"
GATEWAY = "gateway.networking.k8s.io"

#: The ClusterRole of the operator (``config/rbac/role.yaml``).
CLUSTER_RULES: tuple[Rule, ...] = (
    # --- core ---------------------------------------------------------------
    Rule("", "events", ("create", "patch"), "runtime/observe/events.py EventRecorder: create an Event, patch count/lastTimestamp of a repeat"),
    Rule(
        "",
        "nodes",
        ("get", "list", "watch", "patch"),
        "nodes.py node_informer (list/watch); queues/controller.py node label/taint patches and the re-read after a conflict (get)",
    ),
    Rule("", "namespaces", ("get", "list", "watch"), "queues/controller.py: Namespace informer (a LocalQueue is created only in a namespace that exists; a new namespace triggers the sync); "
         "aim/fence.py RouteFence and aim/controller.py: the namespace UIDs route tokens bind; "
         "monitoring/reclaimer.py: a namespace's gpu-preemption annotations (get, when a GPU workload is first seen)"),
    Rule(
        "",
        "pods",
        ("get", "list", "watch", "create", "patch", "delete"),
        "workloads/reconcile/controller.py and monitoring/monitor.py: Pod informer (GPU demand, Deployment Pods' Workloads, GPU utilisation); "
        "monitoring/reclaimer.py: GPU Pod informer, a bare GPU Pod as its own root owner (get, delete on reclaim); "
        "serving/model/controller.py: Model server Pods (informer on app=model, create, delete in rollouts); "
        "serving/model/adapters.py: adapter.kubeai.org/<name> labels (patch)",
    ),
    Rule(
        "",
        "configmaps",
        ("get", "list", "watch", "create", "update", "patch", "delete"),
        "workloads/reconcile/children.py: the download ConfigMap (informer, create, merge patch of a drifted child); "
        "serving/model/controller.py: files ConfigMap model-<name>-files (get after AlreadyExists, update, delete when files are removed)",
    ),
    Rule(
        "",
        "services",
        ("list", "watch", "create", "delete"),
        "serving/model/external.py: a Model's headless Service <model>-<uid[:6]> under proxy.mode external (informer on app=model, "
        "create), deleted again under internal; Services the Model does not control are never touched",
    ),
    Rule(
        "",
        "persistentvolumeclaims",
        ("list", "watch", "create", "patch", "delete"),
        "workloads/reconcile/children.py: data/HF PVCs (informer, create, merge patch, deleted on early termination); "
        "serving/model/cache.py: shared model cache PVC (create, patch of its per-Model annotation)",
    ),
    # --- workload children --------------------------------------------------
    Rule(
        "batch",
        "jobs",
        ("get", "list", "watch", "create", "patch", "delete"),
        "workloads/reconcile/children.py: batch and download Jobs (informer, create, merge patch, deleted on early termination); "
        "serving/model/cache.py: cache loader and evict Jobs; "
        "webhooks/jobs.py: re-read and patch to release the finalizer of an adopted Job",
    ),
    Rule(
        "apps",
        "deployments",
        ("get", "list", "watch", "create", "patch", "delete"),
        "workloads/reconcile/children.py: KaiwoService Deployments (informer, create, merge patch, deleted on early termination); "
        "monitoring/reclaimer.py: owner chain of a GPU Pod (get) and reclaim (delete)",
    ),
    Rule("apps", "replicasets", ("get", "delete"), "monitoring/reclaimer.py: owner chain of a GPU Pod (get) and reclaim of a bare ReplicaSet (delete)"),
    Rule("apps", "statefulsets", ("get", "delete"), "monitoring/reclaimer.py: owner chain of a GPU Pod (get) and reclaim (delete)"),
    Rule("ray.io", "rayclusters", ("get", "delete"), "monitoring/reclaimer.py: owner chain of a GPU Pod (get) and reclaim of a bare RayCluster (delete)"),
    Rule("ray.io", "rayjobs", ("get", "list", "watch", "create", "patch", "delete"), "workloads/reconcile/children.py: Ray KaiwoJobs; monitoring/reclaimer.py: owner chain (get)"),
    Rule("ray.io", "rayservices", ("get", "list", "watch", "create", "patch", "delete"), "workloads/reconcile/children.py: Ray KaiwoServices; monitoring/reclaimer.py: owner chain (get)"),
    Rule(
        "workload.codeflare.dev",
        "appwrappers",
        ("get", "list", "watch", "create", "patch", "delete"),
        "workloads/reconcile/children.py: AppWrappers around Ray services; monitoring/reclaimer.py: owner chain (get)",
    ),
    Rule("scheduling.k8s.io", "priorityclasses", ("list", "watch"), "workloads/reconcile/controller.py: PriorityClass informer (spec.priorityClass); serving/model/controller.py: a created PriorityClass enqueues the Models naming it"),
    Rule(
        "apiextensions.k8s.io",
        "customresourcedefinitions",
        ("get",),
        "runtime/api/defaulting.py installed_schema: queues/controller.py compares the queue config with the installed CRD's defaults applied",
    ),
    # --- our own kinds ------------------------------------------------------
    Rule(
        CONFIG,
        "kaiwoconfigs",
        ("get", "list", "watch", "create"),
        "settings/__init__.py: ensure_config reads and creates KaiwoConfig/kaiwo at start-up; Settings informer",
    ),
    Rule(
        KAIWO,
        "kaiwoqueueconfigs",
        ("list", "watch", "create", "patch"),
        "queues/controller.py: informer; creates the default queue config and patches its spec",
    ),
    Rule(KAIWO, "kaiwoqueueconfigs/status", ("patch",), "queues/controller.py: status patch"),
    Rule(
        KAIWO,
        "kaiwoqueueconfigs/finalizers",
        ("update",),
        "queues/kueue.py: Kueue objects carry a controller owner reference (blockOwnerDeletion) to the queue config",
        evidence=(("kaiwo_ctrl/runtime/objects/ownership.py", "block_owner_deletion: bool = True"), ("kaiwo_ctrl/queues/kueue.py", "ownership.owner_reference("), ("kaiwo_ctrl/queues/kueue.py", "QUEUE_CONFIG_KIND")),
    ),
    Rule(
        KAIWO,
        "kaiwojobs",
        ("get", "list", "watch", "create", "delete"),
        "workloads/reconcile/controller.py: KaiwoJob informer; webhooks/jobs.py: creates the KaiwoJob tracking an adopted Job; "
        "webhooks/jobdelete.py: reads it (is it the one tracking the deleted Job?) and deletes it with the Job",
    ),
    Rule(KAIWO, "kaiwojobs/status", ("patch",), "workloads/reconcile/statuswrite.py: status patch (reconcile); monitoring/monitor.py: termination"),
    Rule(
        KAIWO,
        "kaiwojobs/finalizers",
        ("update",),
        "workloads/base/kaiwoobject.py: children carry a controller owner reference (blockOwnerDeletion) to their KaiwoJob",
        evidence=(("kaiwo_ctrl/runtime/objects/ownership.py", "block_owner_deletion: bool = True"), ("kaiwo_ctrl/workloads/base/kaiwoobject.py", "return owner_reference(owner)")),
    ),
    Rule(KAIWO, "kaiwoservices", ("get", "list", "watch", "delete"), "workloads/reconcile/controller.py: KaiwoService informer; monitoring/reclaimer.py: owner chain (get) and reclaim (delete)"),
    Rule(KAIWO, "gpuworkloads", ("list", "watch", "create", "delete"), "monitoring/reclaimer.py: GpuWorkload informer, a record per opted-in GPU workload, deleted after its TTL"),
    Rule(KAIWO, "gpuworkloads/status", ("patch",), "monitoring/reclaimer.py: phase, samples, reclaim"),
    Rule(KAIWO, "kaiwoservices/status", ("patch",), "workloads/reconcile/statuswrite.py: status patch (reconcile); monitoring/monitor.py: termination"),
    Rule(
        KAIWO,
        "kaiwoservices/finalizers",
        ("update",),
        "workloads/base/kaiwoobject.py: children carry a controller owner reference (blockOwnerDeletion) to their KaiwoService",
        evidence=(("kaiwo_ctrl/runtime/objects/ownership.py", "block_owner_deletion: bool = True"), ("kaiwo_ctrl/workloads/base/kaiwoobject.py", "return owner_reference(owner)")),
    ),
    Rule(CONFIG, "aimnamespaceconfigs", ("list", "watch"), "aim/controller.py: AIMNamespaceConfig informer; workloads and serving read the effective config"),
    Rule(CONFIG, "aimnamespaceconfigs/status", ("patch",), "aim/controller.py: status patch"),
    # --- KubeAI and Gateway API (AIMNamespaceConfig gateway exposure) ----------
    # (models list/watch and models/finalizers: see the KubeAI section below)
    Rule(GATEWAY, "gateways", ("list", "watch"), "aim/controller.py: Gateway informer (GatewayFound; only existence is read)"),
    Rule(GATEWAY, "httproutes", ("get", "list", "watch", "create", "patch", "delete"), "aim/controller.py: one HTTPRoute per Model (get: whose is a route name already taken)"),
    Rule(
        "inference.networking.k8s.io",
        "inferencepools",
        ("list", "watch", "create", "update", "delete"),
        "serving/inferencepool.py: one InferencePool per Model when KaiwoConfig spec.models.inferencePools is on",
    ),
    # --- admission webhooks ---------------------------------------------------
    Rule(
        "admissionregistration.k8s.io",
        "mutatingwebhookconfigurations",
        ("get", "create", "update"),
        "webhooks/registration.py: read, update (caBundle, enforcement webhooks) and, out of cluster only, create our configuration",
    ),
    Rule(
        "admissionregistration.k8s.io",
        "validatingwebhookconfigurations",
        ("get", "create", "update"),
        "webhooks/registration.py: read, update (caBundle, enforcement webhooks) and, out of cluster only, create our configuration",
    ),
    # --- Kueue --------------------------------------------------------------
    Rule(KUEUE, "resourceflavors", ("list", "watch", "create", "update", "delete"), "queues/controller.py: informer + sync"),
    Rule(KUEUE, "clusterqueues", ("list", "watch", "create", "update", "delete"), "queues/controller.py: informer + sync"),
    Rule(
        KUEUE,
        "clusterqueues/finalizers",
        ("update",),
        "queues/kueue.py: queue-config LocalQueues carry a controller owner reference (blockOwnerDeletion) to their ClusterQueue",
        evidence=(("kaiwo_ctrl/runtime/objects/ownership.py", "block_owner_deletion: bool = True"), ("kaiwo_ctrl/queues/kueue.py", "ownership.owner_reference("), ("kaiwo_ctrl/queues/kueue.py", "CLUSTER_QUEUE")),
    ),
    Rule(
        KUEUE,
        "localqueues",
        ("list", "watch", "create", "update", "patch", "delete"),
        "queues/controller.py: informer + sync; workloads/reconcile/children.py creates a workload's missing LocalQueue "
        "(patch: its child update call serves every child resource, LocalQueue included)",
    ),
    Rule(KUEUE, "workloadpriorityclasses", ("list", "watch", "create", "update", "delete"), "queues/controller.py: informer + sync"),
    Rule(KUEUE, "topologies", ("list", "watch", "create", "update", "delete"), "queues/controller.py: informer + sync"),
    Rule(KUEUE, "workloads", ("list", "watch"), "workloads/reconcile/controller.py: Kueue Workload informer (admission of a workload)"),
    # --- KubeAI Models (serving/) --------------------------------------------
    Rule(
        KUBEAI,
        "models",
        ("list", "watch", "patch"),
        "serving/model/controller.py: Model informer; feature labels, replica bounds and the cache finalizer (patch); "
        "serving/proxy/server.py and serving/autoscale/setup.py: Model informer (routing, autoscaling); "
        "serving/proxy/scale.py: spec.replicas of a Model whose replicas are unset (no scale subresource then); "
        "aim/controller.py: Model informer (one HTTPRoute per Model)",
    ),
    Rule(KUBEAI, "models/status", ("patch",), "serving/model/controller.py: replicas, cache and conditions"),
    Rule(
        KUBEAI,
        "models/scale",
        ("patch",),
        "serving/proxy/scale.py set_replicas: scale from zero (proxy) and replicas from load (autoscaler)",
    ),
    Rule(
        KUBEAI,
        "models/finalizers",
        ("update",),
        "serving/: server Pods, files ConfigMaps and cache Jobs, and aim/routes.py: HTTPRoutes, carry a controller owner "
        "reference (blockOwnerDeletion) to their Model",
        evidence=(
            ("kaiwo_ctrl/runtime/objects/ownership.py", "block_owner_deletion: bool = True"),
            ("kaiwo_ctrl/serving/model/pods.py", "LABEL_MODEL"),
            ("kaiwo_ctrl/aim/routes.py", "owner_reference(dict(model))"),
        ),
    ),
    # --- secure metrics -----------------------------------------------------
    Rule("authentication.k8s.io", "tokenreviews", ("create",), "runtime/observe/metricsauth.py: who is scraping /metrics (--metrics-secure); "
         "serving/proxy/auth.py: who calls the proxy (--proxy-auth kubernetes)"),
    Rule(
        "authorization.k8s.io",
        "subjectaccessreviews",
        ("create",),
        "runtime/observe/metricsauth.py: may the scraper get the /metrics URL (--metrics-secure); "
        "serving/proxy/auth.py: may the caller create models/proxy of the Model (--proxy-auth kubernetes)",
    ),
)

#: Name of the leader-election Lease (``kaiwo-ctrl run --leader-election-id``);
#: the Role grants get/update on this Lease only.
LEADER_ELECTION_ID = "83fc2279.silogen.ai"

#: The namespaced Role for leader election (``config/rbac/leader_election_role.yaml``),
#: bound in the operator's namespace.
LEADER_ELECTION_RULES: tuple[Rule, ...] = (
    Rule(
        "coordination.k8s.io",
        "leases",
        ("get", "create", "update"),
        "runtime/manager/leaderelection.py: read the Lease, create it when missing, renew/release it with a PUT",
        resource_names=(LEADER_ELECTION_ID,),
    ),
    Rule("", "events", ("create", "patch"), "runtime/observe/events.py EventRecorder (events in the operator's own namespace)"),
    Rule(
        "",
        "configmaps",
        ("get", "list", "watch", "create", "patch"),
        "serving/autoscale/autoscaler.py: the autoscaler state ConfigMap (read at take-over, created if missing, patched); "
        "aim/controller.py: the kaiwo-aim-gateways ConfigMap (watched by name, created, patched)",
    ),
    # ReferenceGrants are only ever made in the operator's namespace (they admit routes to its proxy Service)
    Rule(GATEWAY, "referencegrants", ("list", "watch", "create", "patch", "delete"), "aim/controller.py: one ReferenceGrant per tenant namespace in the operator namespace"),
    Rule(
        "",
        "secrets",
        ("get", "list", "watch", "create", "update"),
        "webhooks/tls.py: the webhook certificate Secret in the operator's own namespace (every replica watches it, the leader writes it); "
        "aim/fence.py: the route-token key Secret there (read, created if missing)",
    ),
)

#: The proxy's own ServiceAccount (``kaiwo-proxy``, the ``kaiwo-ctrl proxy`` Deployment of
#: config/default): only what serving a request needs, so a compromised proxy Pod cannot
#: reconcile, create workloads or read the operator's Secrets (``config/rbac/proxy_role.yaml``).
PROXY_CLUSTER_RULES: tuple[Rule, ...] = (
    Rule(KUBEAI, "models", ("list", "watch", "patch"),
         "serving/proxy/server.py: Model informer (routing); serving/proxy/scale.py: spec.replicas of a Model whose replicas are unset"),
    Rule(KUBEAI, "models/scale", ("patch",), "serving/proxy/scale.py set_replicas: scale from zero"),
    Rule("", "pods", ("list", "watch"), "serving/routing/endpoints.py: model server Pod informer (label app=model): the endpoints"),
    Rule("", "namespaces", ("list", "watch"), "runtime/api/resources.py namespace_exists: aim/fence.py checks the operator namespace before "
         "creating the route key; aim/fence.py RouteFence: Namespace informer (route tokens bind each namespace's UID); "
         "serving/routing/weights.py: the same informer (trimmed: settings/namespaces.py), a namespace's fair-queue weight"),
    Rule(KAIWO, "kaiwoqueueconfigs", ("list", "watch"), "serving/routing/weights.py: a namespace's fair-queue weight from its "
         "ClusterQueue's fairSharing.weight in the KaiwoQueueConfig (with --proxy-fair-queuing on)"),
    Rule("", "events", ("create", "patch"), "serving/routing/fairevents.py: Saturated / SaturationCleared Events on a Model, in its "
         "namespace (runtime/observe/events.py EventRecorder: create, patch count/lastTimestamp of a repeat)"),
    Rule("authentication.k8s.io", "tokenreviews", ("create",), "runtime/observe/metricsauth.py: who is scraping /metrics (--metrics-secure)"),
    Rule("authorization.k8s.io", "subjectaccessreviews", ("create",), "runtime/observe/metricsauth.py: may the scraper get /metrics"),
)

#: The proxy's namespaced Role in the operator's namespace (``config/rbac/proxy_namespace_role.yaml``):
#: the route-token key of the Gateway listener, read by name (created if missing; RBAC cannot
#: restrict ``create`` by name).
PROXY_NAMESPACE_RULES: tuple[Rule, ...] = (
    Rule("", "secrets", ("get", "list", "watch", "create"),
         "aim/fence.py ensure_route_key: the route-token key Secret (read, created if missing); RouteFence: its informer "
         "(field selector metadata.name, which RBAC authorizes by resource name: a key rotation is picked up without a restart)",
         resource_names=("kaiwo-route-key",)),
)

#: Kinds users work with: (group, plural, kind label used in file/role names).
USER_KINDS: tuple[tuple[str, str, str], ...] = (
    (KAIWO, "kaiwojobs", "kaiwojob"),
    (KAIWO, "kaiwoservices", "kaiwoservice"),
    (KAIWO, "kaiwoqueueconfigs", "kaiwoqueueconfig"),
    (CONFIG, "kaiwoconfigs", "kaiwoconfig"),
)

HEADER = "# Generated by hack/gen-rbac (python -m kaiwo_ctrl.rbac) from kaiwo_ctrl/rbac.py. Do not edit.\n"


def _sorted_verbs(verbs: Iterable[str]) -> list[str]:
    return sorted(set(verbs), key=VERB_ORDER.index)


def policy_rules(rules: Iterable[Rule]) -> list[dict]:
    """Rules merged the way RBAC reads them: one entry per (group, verbs), resources
    sorted; rules with resource names get entries of their own."""
    rules = list(rules)
    named = [r for r in rules if r.resource_names]
    by_resource: dict[tuple[str, str], set[str]] = {}
    for r in rules:
        verbs = {"create"} & set(r.verbs) if r.resource_names else set(r.verbs)
        if verbs:
            by_resource.setdefault((r.group, r.resource), set()).update(verbs)
    grouped: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for (group, resource), verbs in by_resource.items():
        grouped.setdefault((group, tuple(_sorted_verbs(verbs))), []).append(resource)
    out = []
    for (group, group_verbs), resources in sorted(grouped.items(), key=lambda kv: (kv[0][0], sorted(kv[1])[0])):
        out.append({"apiGroups": [group], "resources": sorted(resources), "verbs": list(group_verbs)})
    for r in named:
        named_verbs = [v for v in _sorted_verbs(r.verbs) if v != "create"]
        if named_verbs:
            out.append({"apiGroups": [r.group], "resources": [r.resource], "resourceNames": list(r.resource_names),
                        "verbs": named_verbs})
    return out


def granted(rules: Iterable[Rule]) -> set[tuple[str, str, str]]:
    """(group, resource, verb) triples the rules grant."""
    return {(r.group, r.resource, v) for r in rules for v in r.verbs}


def _dump(doc: dict) -> str:
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)


def cluster_role() -> dict:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "manager-role", "labels": {"app.kubernetes.io/name": "kaiwo-ctrl"}},
        "rules": policy_rules(CLUSTER_RULES),
    }


def leader_election_role() -> dict:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "leader-election-role", "labels": {"app.kubernetes.io/name": "kaiwo-ctrl"}},
        "rules": policy_rules(LEADER_ELECTION_RULES),
    }


def proxy_roles() -> dict[str, dict]:
    """The proxy's ClusterRole and its Role in the operator's namespace."""
    labels = {"app.kubernetes.io/name": "kaiwo-ctrl", "app.kubernetes.io/component": "proxy"}
    return {
        "proxy_role.yaml": {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                            "metadata": {"name": "proxy-role", "labels": labels}, "rules": policy_rules(PROXY_CLUSTER_RULES)},
        "proxy_namespace_role.yaml": {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                                      "metadata": {"name": "proxy-namespace-role", "labels": labels},
                                      "rules": policy_rules(PROXY_NAMESPACE_RULES)},
    }


def metrics_reader_role() -> dict:
    """For scrapers of the secure metrics endpoint: bind it to Prometheus' ServiceAccount."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "metrics-reader", "labels": {"app.kubernetes.io/name": "kaiwo-ctrl"}},
        "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}],
    }


#: Name of the ClusterRole that lets a user call Models through the proxy (serving/proxy/auth.py).
MODEL_USER_ROLE = "kaiwo-model-user"


def model_user_role() -> dict:
    """Use a namespace's Models through the proxy (``create`` on ``kubeai.org`` ``models/proxy``); aggregates
    into ``edit`` and ``admin``, so a namespace's members use its Models without a grant of their own. Bind it
    with a RoleBinding for one namespace (``resourceNames`` in a Role of your own narrows it to some Models)."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": MODEL_USER_ROLE, "labels": {
            "app.kubernetes.io/name": "kaiwo-ctrl",
            "rbac.authorization.k8s.io/aggregate-to-admin": "true", "rbac.authorization.k8s.io/aggregate-to-edit": "true"}},
        "rules": [{"apiGroups": [KUBEAI], "resources": ["models/proxy"], "verbs": ["create"]}],
    }


def user_roles(kind_label: str, group: str, plural: str) -> dict[str, dict]:
    """Editor and viewer ClusterRoles for one kind (namespaced kinds aggregate into edit/view)."""
    namespaced = plural in ("kaiwojobs", "kaiwoservices")
    editor_labels = {"app.kubernetes.io/name": "kaiwo-ctrl"}
    viewer_labels = {"app.kubernetes.io/name": "kaiwo-ctrl"}
    if namespaced:
        editor_labels.update(
            {"rbac.authorization.k8s.io/aggregate-to-admin": "true", "rbac.authorization.k8s.io/aggregate-to-edit": "true"}
        )
        viewer_labels["rbac.authorization.k8s.io/aggregate-to-view"] = "true"
    editor = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": f"{kind_label}-editor-role", "labels": editor_labels},
        "rules": [
            {"apiGroups": [group], "resources": [plural], "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
            {"apiGroups": [group], "resources": [f"{plural}/status"], "verbs": ["get"]},
        ],
    }
    viewer = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": f"{kind_label}-viewer-role", "labels": viewer_labels},
        "rules": [
            {"apiGroups": [group], "resources": [plural], "verbs": ["get", "list", "watch"]},
            {"apiGroups": [group], "resources": [f"{plural}/status"], "verbs": ["get"]},
        ],
    }
    return {f"{kind_label}_editor_role.yaml": editor, f"{kind_label}_viewer_role.yaml": viewer}


def _commented_cluster_role() -> str:
    """role.yaml: the ClusterRole, preceded by the reason for every rule."""
    lines = [HEADER.rstrip("\n"), "#", "# Why each permission is needed (kaiwo_ctrl/rbac.py):"]
    for r in sorted(CLUSTER_RULES, key=lambda r: (r.group, r.resource)):
        lines.append(f"#   {r.group or 'core'} {r.resource} [{', '.join(_sorted_verbs(r.verbs))}]: {r.why}")
    return "\n".join(lines) + "\n" + _dump(cluster_role())


def generated_files() -> dict[str, str]:
    """File name (in config/rbac) -> content."""
    files = {
        "role.yaml": _commented_cluster_role(),
        "leader_election_role.yaml": HEADER + _dump(leader_election_role()),
        "metrics_reader_role.yaml": HEADER + _dump(metrics_reader_role()),
        "kaiwo_model_user_role.yaml": HEADER + _dump(model_user_role()),
    }
    for name, doc in proxy_roles().items():
        files[name] = HEADER + _dump(doc)
    for group, plural, label in USER_KINDS:
        for name, doc in user_roles(label, group, plural).items():
            files[name] = HEADER + _dump(doc)
    return files


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kaiwo_ctrl.rbac", description="write config/rbac from kaiwo_ctrl/rbac.py")
    p.add_argument("--check", action="store_true", help="only compare; exit 1 and print a diff when stale")
    p.add_argument("--dir", type=Path, default=RBAC_DIR)
    args = p.parse_args(argv)
    stale = 0
    for name, text in generated_files().items():
        path = args.dir / name
        current = path.read_text() if path.exists() else ""
        if current == text:
            continue
        if args.check:
            stale += 1
            sys.stdout.writelines(difflib.unified_diff(current.splitlines(True), text.splitlines(True), str(path), f"{path} (generated)"))
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"wrote {path}")
    return 1 if stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
