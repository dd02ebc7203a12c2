"""Which PriorityClasses and WorkloadPriorityClasses a namespace may use: the
admin's to say, the one rule for Models, KaiwoJobs and KaiwoServices.

A class name is read wherever a tenant's object can carry one: a Model's
``spec.priorityClassName`` and ``kueue.x-k8s.io/priority-class`` label, a
KaiwoJob's or KaiwoService's ``spec.priorityClass``, and any
``priorityClassName`` or ``kueue.x-k8s.io/priority-class`` label inside their
embedded Job, Deployment or Ray specs. Each name must pass :func:`refusal`:

* ``system-*`` classes only in system namespaces (``kube-system`` and the
  operator's), whatever else says so: they outrank every workload and may
  preempt anything;
* the namespace annotation ``kaiwo.silogen.ai/priority-classes`` (a comma list;
  ``*`` allows any non-system class; empty allows none), set by a cluster admin:
  the built-in ``admin`` and ``edit`` roles grant no write on Namespaces;
* else ``KaiwoConfig.spec.allowedPriorityClasses`` (same rules); unset: any
  non-system class, so existing manifests keep working.

A refused object gets a condition naming the field and nothing is created for it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from api.config.v1alpha1 import KAIWO_CONFIG_NAME
from kaiwo_ctrl.runtime.api.resources import NAMESPACES
from kaiwo_ctrl.runtime.manager.manager import Manager
from kaiwo_ctrl.settings import DEFAULT_OPERATOR_NAMESPACE, operator_namespace, settings_for

ANNOTATION = "kaiwo.silogen.ai/priority-classes"
LABEL_KUEUE_PRIORITY = "kueue.x-k8s.io/priority-class"
SYSTEM_PREFIX = "system-"
#: Depth of the embedded specs searched for class names (the informers bound depth already).
MAX_DEPTH = 64


def allowed_list(annotation: str | None, config: Sequence[str] | None) -> frozenset[str] | None:
    """The names a namespace may use (``"*"`` among them: any non-system class);
    None when neither the annotation nor KaiwoConfig says (any non-system class)."""
    if annotation is not None:
        return frozenset(n.strip() for n in annotation.split(",") if n.strip())
    return None if config is None else frozenset(config)


def refusal(name: str, namespace: str, allowed: frozenset[str] | None, system_namespaces: frozenset[str]) -> str | None:
    """Why ``namespace`` may not use class ``name``; None when it may."""
    if not name:
        return None
    if name.startswith(SYSTEM_PREFIX):
        if namespace in system_namespaces:
            return None
        return f"priority class {name!r} is reserved for system namespaces"
    if allowed is None or "*" in allowed or name in allowed:
        return None
    listed = ", ".join(sorted(allowed)[:20]) or "none"
    return (f"priority class {name!r} is not allowed in namespace {namespace!r} "
            f"(allowed: {listed}; set by the annotation {ANNOTATION} or KaiwoConfig spec.allowedPriorityClasses)")


def named_classes(obj: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """``(field path, class name)`` of every class an object names: its
    ``kueue.x-k8s.io/priority-class`` label, ``spec.priorityClass``, and each
    ``priorityClassName`` or priority-class label anywhere in ``spec``."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    if isinstance(labels.get(LABEL_KUEUE_PRIORITY), str):
        yield f"metadata.labels[{LABEL_KUEUE_PRIORITY}]", labels[LABEL_KUEUE_PRIORITY]
    spec = obj.get("spec")
    if isinstance(spec, Mapping):
        if isinstance(spec.get("priorityClass"), str):
            yield "spec.priorityClass", spec["priorityClass"]
        yield from _walk(spec, "spec", 0)


def _walk(doc: Any, path: str, depth: int) -> Iterator[tuple[str, str]]:
    if depth > MAX_DEPTH:
        return
    if isinstance(doc, Mapping):
        for k, v in doc.items():
            if k == "priorityClassName" and isinstance(v, str):
                yield f"{path}.{k}", v
            elif k == "labels" and isinstance(v, Mapping) and isinstance(v.get(LABEL_KUEUE_PRIORITY), str):
                yield f"{path}.labels[{LABEL_KUEUE_PRIORITY}]", v[LABEL_KUEUE_PRIORITY]
            elif isinstance(v, (Mapping, list)):
                yield from _walk(v, f"{path}.{k}", depth + 1)
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            if isinstance(v, (Mapping, list)):
                yield from _walk(v, f"{path}[{i}]", depth + 1)


def first_refusal(obj: Mapping[str, Any], allowed: frozenset[str] | None,
                  system_namespaces: frozenset[str]) -> tuple[str, str] | None:
    """``(field path, message)`` of the first class ``obj`` may not use, or None."""
    ns = (obj.get("metadata") or {}).get("namespace") or ""
    for path, name in named_classes(obj):
        if (why := refusal(name, ns, allowed, system_namespaces)) is not None:
            return path, why
    return None


def system_namespaces(operator_ns: str) -> frozenset[str]:
    return frozenset({"kube-system", operator_ns})


@dataclass(frozen=True)
class PriorityRules:
    """The rules as the caches hold them: the namespaces' annotations, KaiwoConfig's list."""

    annotations: Mapping[str, str] = field(default_factory=dict)
    configured: tuple[str, ...] | None = None
    system: frozenset[str] = system_namespaces(DEFAULT_OPERATOR_NAMESPACE)

    def check(self, obj: Mapping[str, Any]) -> tuple[str, str] | None:
        """``(field path, message)`` of the first class ``obj`` may not use, or None."""
        ns = (obj.get("metadata") or {}).get("namespace") or ""
        return first_refusal(obj, allowed_list(self.annotations.get(ns), self.configured), self.system)


def configured_list(config: Mapping[str, Any] | None) -> tuple[str, ...] | None:
    """KaiwoConfig ``spec.allowedPriorityClasses`` (whole object or spec), None when unset."""
    spec = config.get("spec") if config and "kind" in config else config
    value = (spec or {}).get("allowedPriorityClasses")
    return tuple(str(v) for v in value) if isinstance(value, list) else None


class PriorityPolicy:
    """:class:`PriorityRules` read live from the manager's caches (the shared
    Namespace informer, KaiwoConfig)."""

    def __init__(self, mgr: Manager) -> None:
        self.namespaces = mgr.cache.informer(NAMESPACES)
        self.settings = settings_for(mgr)
        self.system = system_namespaces(operator_namespace())

    def rules(self, namespace: str | None = None) -> PriorityRules:
        """The rules of ``namespace`` (None: of every namespace)."""
        nss = [self.namespaces.get(namespace)] if namespace is not None else self.namespaces.list()
        annotations = {}
        for ns in nss:
            meta = (ns or {}).get("metadata") or {}
            value = (meta.get("annotations") or {}).get(ANNOTATION)
            if isinstance(value, str):
                annotations[meta.get("name", "")] = value
        raw = self.settings.informer.get(KAIWO_CONFIG_NAME)
        return PriorityRules(annotations, configured_list(raw), self.system)


def priority_policy_for(mgr: Manager) -> PriorityPolicy:
    """The one PriorityPolicy of this manager (created on first use)."""
    p = getattr(mgr, "_kaiwo_priority_policy", None)
    if p is None:
        p = PriorityPolicy(mgr)
        mgr._kaiwo_priority_policy = p  # type: ignore[attr-defined]
    return p
