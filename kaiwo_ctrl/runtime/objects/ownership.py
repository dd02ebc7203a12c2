"""Owner references and finalizers on plain Kubernetes object dicts.

Owner references tie a dependent object to the object that manages it so the
garbage collector can delete dependents after their owner. At most one owner
reference may be marked ``controller: true``. The garbage collector only finds
owners within the dependent's own scope, so two layouts are invalid and are
refused here rather than silently producing a reference the collector ignores:

* an owner in a different namespace than the dependent;
* a namespaced owner for a cluster-scoped dependent.

A cluster-scoped owner may own anything.

Two references point at the same owner when the API group (from
``apiVersion``, version ignored), ``kind`` and ``name`` match; setting a
controller reference for an owner that is already referenced replaces that
entry (e.g. refreshing a changed ``uid``) instead of adding a duplicate.

Finalizer helpers treat ``metadata.finalizers`` as a set of names and report
whether they changed anything, so callers know whether a write is needed.
All functions mutate the given dict in place and never touch the API.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "OwnershipError",
    "AlreadyOwnedError",
    "owner_reference",
    "set_controller_reference",
    "controller_of",
    "is_owned_by",
    "add_finalizer",
    "remove_finalizer",
    "has_finalizer",
]


class OwnershipError(ValueError):
    """An owner reference that must not be created."""


class AlreadyOwnedError(OwnershipError):
    """The object already has a different controller owner."""


#: The UID given to an object rendered without a cluster (``render``), so that
#: owner references to it are well formed. One home for workloads and serving.
RENDER_UID = "00000000-0000-0000-0000-000000000000"


def _meta(obj: dict) -> dict:
    meta = obj.get("metadata")
    if meta is None:
        meta = obj["metadata"] = {}
    return meta


def _group(api_version: str) -> str:
    return api_version.rsplit("/", 1)[0] if "/" in api_version else ""


def _describe(obj: dict) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    name = meta.get("name", "?")
    return f"{obj.get('kind', '?')} {ns + '/' if ns else ''}{name}"


def owner_reference(
    owner: dict, controller: bool = True, block_owner_deletion: bool = True
) -> dict:
    """Build an owner reference pointing at ``owner`` (needs apiVersion, kind, name, uid)."""
    meta = owner.get("metadata") or {}
    ref = {
        "apiVersion": owner.get("apiVersion"),
        "kind": owner.get("kind"),
        "name": meta.get("name"),
        "uid": meta.get("uid"),
    }
    missing = [
        field if field in ("apiVersion", "kind") else f"metadata.{field}"
        for field, value in ref.items()
        if not value
    ]
    if missing:
        raise OwnershipError(f"owner is missing {', '.join(missing)}")
    ref["controller"] = controller
    ref["blockOwnerDeletion"] = block_owner_deletion
    return ref


def _same_owner(a: dict, b: dict) -> bool:
    return (
        _group(a.get("apiVersion", "")) == _group(b.get("apiVersion", ""))
        and a.get("kind") == b.get("kind")
        and a.get("name") == b.get("name")
    )


def set_controller_reference(child: dict, owner: dict, owner_namespaced: bool) -> None:
    """Make ``owner`` the controller of ``child`` (in place).

    ``owner_namespaced`` says whether the owner's kind is namespace-scoped
    (scope cannot be inferred from a dict alone). Raises ``OwnershipError``
    for invalid scopes and ``AlreadyOwnedError`` if another object already
    controls ``child``.
    """
    ref = owner_reference(owner, controller=True, block_owner_deletion=True)
    child_ns = (child.get("metadata") or {}).get("namespace") or ""
    if owner_namespaced:
        owner_ns = (owner.get("metadata") or {}).get("namespace") or ""
        if not owner_ns:
            raise OwnershipError(f"namespaced owner {_describe(owner)} has no metadata.namespace")
        if not child_ns:
            raise OwnershipError(
                f"cluster-scoped {_describe(child)} cannot be owned by namespaced {_describe(owner)}"
            )
        if child_ns != owner_ns:
            raise OwnershipError(
                f"cross-namespace owner reference not allowed: {_describe(owner)} "
                f"cannot own {_describe(child)}"
            )

    current = controller_of(child)
    if current is not None and not _same_owner(current, ref):
        raise AlreadyOwnedError(
            f"{_describe(child)} is already controlled by {current.get('kind')} {current.get('name')}"
        )

    refs: list[dict[str, Any]] = _meta(child).setdefault("ownerReferences", [])
    for i, existing in enumerate(refs):
        if _same_owner(existing, ref):
            refs[i] = ref
            return
    refs.append(ref)


def controller_of(obj: dict) -> dict | None:
    """The owner reference marked ``controller: true``, if any."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or ():
        if ref.get("controller") is True:
            return ref
    return None


def is_owned_by(obj: dict, uid: str) -> bool:
    """Whether any owner reference of ``obj`` has this ``uid``."""
    return any(
        ref.get("uid") == uid for ref in (obj.get("metadata") or {}).get("ownerReferences") or ()
    )


def has_finalizer(obj: dict, name: str) -> bool:
    return name in ((obj.get("metadata") or {}).get("finalizers") or ())


def add_finalizer(obj: dict, name: str) -> bool:
    """Add ``name`` to ``metadata.finalizers``; True if it was not there."""
    if not name:
        raise ValueError("finalizer name must not be empty")
    if has_finalizer(obj, name):
        return False
    meta = _meta(obj)
    finalizers = meta.get("finalizers")
    if finalizers is None:
        finalizers = meta["finalizers"] = []
    finalizers.append(name)
    return True


def remove_finalizer(obj: dict, name: str) -> bool:
    """Remove every occurrence of ``name``; True if one was removed."""
    meta = obj.get("metadata") or {}
    finalizers = meta.get("finalizers")
    if not finalizers or name not in finalizers:
        return False
    finalizers[:] = [f for f in finalizers if f != name]
    return True
