"""The AIMNamespaceConfig controller: gateway routes, grants and status.

One reconcile per *tenant namespace* (request ``<namespace>/aim``): it reads
the namespace's configs, Models and our HTTPRoutes from the caches, then

1. keeps one HTTPRoute per Model while the effective config names a gateway
   (creating, repairing and removing routes; an event on the config for each
   create and remove),
2. keeps the ReferenceGrant in the operator namespace while any route of the
   tenant namespace needs it,
3. writes each config's status (conditions, observedGeneration, counts) when it
   differs,
4. keeps the list of AIM Gateways (ConfigMap ``kaiwo-aim-gateways`` in the
   operator's namespace, the param of the ``aim-route-paths`` admission policy)
   equal to the Gateways the configs name,
5. rotates the route key when its Secret asks for it (:func:`.fence.rotated`);
   a new key re-renders every namespace's routes.

Triggers: configs (spec changes, create, delete), Models (create, delete),
our routes (any change: status is what RoutesAccepted reports), our grants,
Gateways (create, delete), and Kaiwo workloads (create, delete: the counts).
Nothing is written when nothing changed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from typing import Any

from kaiwo_ctrl.kinds import AIMNAMESPACECONFIGS, KAIWOJOBS, KAIWOSERVICES, MODELS
from kaiwo_ctrl.runtime.objects.apply import contains
from kaiwo_ctrl.runtime.api.client import ApiError, Resource
from kaiwo_ctrl.runtime.control.controller import Result, TerminalError
from kaiwo_ctrl.runtime.control.handler import Request
from kaiwo_ctrl.runtime.manager.manager import Manager
from kaiwo_ctrl.runtime.control.predicate import FieldsChanged, Predicate
from kaiwo_ctrl.runtime.api.resources import CONFIGMAPS, NAMESPACES, SECRETS, served
from kaiwo_ctrl.aim.fence import KEY_SECRET, ensure_route_key, key_of, key_secret_informer, rotated, route_token
from kaiwo_ctrl.settings import operator_namespace

from .effective import resolve
from .routes import (
    GATEWAY_LIST,
    LABEL_MANAGED,
    LABEL_TENANT,
    MANAGED_BY,
    ROUTE_PREFIX,
    desired_gateway_list,
    desired_grant,
    desired_route,
    gateway_of,
    grant_name,
    is_ours,
)
from .status import Observed, desired_status
from .validation import first_error
from kaiwo_ctrl.runtime.objects.objpath import meta as _meta

log = logging.getLogger("kaiwo_ctrl.aim")

CONTROLLER_NAME = "aimnamespaceconfig"
COMPONENT = "aimnamespaceconfig-controller"
KEY = "aim"  # the name part of every request: one reconcile per namespace

HTTPROUTES = Resource("gateway.networking.k8s.io", "v1", "httproutes", "HTTPRoute")
GATEWAYS = Resource("gateway.networking.k8s.io", "v1", "gateways", "Gateway")
REFERENCEGRANTS = Resource("gateway.networking.k8s.io", "v1beta1", "referencegrants", "ReferenceGrant")
OURS = f"{LABEL_MANAGED}={MANAGED_BY}"
#: Seconds events are collected before the namespace is reconciled.
DEBOUNCE = 0.2
#: Seconds until a route name held by an HTTPRoute we did not make is tried again.
TAKEN_RETRY = 60.0
def _ns_request(obj: Mapping[str, Any]) -> Iterable[Request]:
    ns = _meta(obj).get("namespace")
    return [Request(ns, KEY)] if ns else []


def trim_gateway(obj: dict) -> dict:
    """Only a Gateway's existence matters here."""
    meta = obj.get("metadata") or {}
    keep = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "deletionTimestamp") if k in meta}
    return {"apiVersion": obj.get("apiVersion"), "kind": "Gateway", "metadata": keep}


class _ComesOrGoes(Predicate):
    """Creates and deletes pass; updates only when deletion starts."""

    def update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        return _meta(old).get("deletionTimestamp") != _meta(new).get("deletionTimestamp")


def _not_status(obj: Mapping[str, Any]) -> Any:
    return (_meta(obj).get("generation"), _meta(obj).get("deletionTimestamp"), _meta(obj).get("labels"))


class AIMReconciler:
    def __init__(self, mgr: Manager, operator_ns: str) -> None:
        self.client = mgr.client
        self.operator_ns = operator_ns
        self.recorder = mgr.recorder.for_component(COMPONENT)
        cache = mgr.cache
        self.configs = cache.informer(AIMNAMESPACECONFIGS)
        self.models = cache.informer(MODELS)
        self.routes = cache.informer(HTTPROUTES, label_selector=OURS)
        self.grants = cache.informer(REFERENCEGRANTS, namespace=operator_ns, label_selector=OURS)
        self.gateways = cache.informer(GATEWAYS, transform=trim_gateway)
        self.jobs = cache.informer(KAIWOJOBS)
        self.services = cache.informer(KAIWOSERVICES)
        self.namespaces = cache.informer(NAMESPACES)
        self.key_secrets = key_secret_informer(cache, operator_ns)
        self.gateway_lists = cache.informer(CONFIGMAPS, namespace=operator_ns, field_selector=f"metadata.name={GATEWAY_LIST}")
        #: read-your-writes: while the cache still shows a config as it was before our status
        #: write, the written object is read instead, so the same write is not sent again
        self.expectations = mgr.expectations
        self.configs.add_handler(self.expectations.pruner(AIMNAMESPACECONFIGS.kind))
        #: (namespace, route name) held by an HTTPRoute we did not make
        self._taken: set[tuple[str, str]] = set()

    # ------------------------------------------------------------------ mapping
    def gateway_users(self, gateway: Mapping[str, Any]) -> Iterable[Request]:
        """Namespaces whose configs name this Gateway."""
        key = (_meta(gateway).get("namespace") or "", _meta(gateway).get("name") or "")
        return sorted({Request(_meta(c).get("namespace") or "", KEY) for c in self.configs.list() if gateway_of(c) == key})

    def operator_namespace_users(self, obj: Mapping[str, Any]) -> Iterable[Request]:
        """The operator's Namespace -> every tenant namespace with a config; a tenant Namespace -> itself
        (its UID is part of its routes' token)."""
        if _meta(obj).get("name") != self.operator_ns:
            return self._configured({"metadata": {"namespace": _meta(obj).get("name")}})
        return self.all_users(obj)

    def all_users(self, _obj: Mapping[str, Any]) -> Iterable[Request]:
        """Every tenant namespace with a config (the key, the operator namespace or the Gateway list changed)."""
        return [Request(ns, KEY) for ns in sorted({str(_meta(c).get("namespace") or "") for c in self.configs.list()} - {""})]

    def grant_owner(self, grant: Mapping[str, Any]) -> Iterable[Request]:
        tenant = (_meta(grant).get("labels") or {}).get(LABEL_TENANT)
        return [Request(tenant, KEY)] if tenant else []

    def _configured(self, obj: Mapping[str, Any]) -> Iterable[Request]:
        ns = _meta(obj).get("namespace")
        return [Request(ns, KEY)] if ns and self.configs.list(ns) else []

    # ------------------------------------------------------------------ reconcile
    async def __call__(self, req: Request) -> Result | None:
        ns = req.namespace
        configs = self.configs.list(ns)
        res = resolve(configs)
        effective = res.effective
        gateway = gateway_of(effective) if effective is not None else None
        models = [m for m in self.models.list(ns) if not _meta(m).get("deletionTimestamp")]
        desired = {}
        await self._sync_gateway_list()
        namespace = self.namespaces.get(ns)
        if gateway is not None and effective is not None and models and namespace is not None:
            # the token binds the namespace's UID: a namespace made again under the same name gets a new one
            token = route_token(await self._route_key(), ns, _meta(namespace).get("uid") or "")
            for m in models:
                route = desired_route(m, effective, self.operator_ns, token)
                desired[route["metadata"]["name"]] = route
        taken = await self._sync_routes(ns, desired, effective)
        await self._sync_grant(ns, bool(desired))
        gateway_exists = gateway is not None and self.gateways.get(gateway[1], gateway[0]) is not None
        routes = tuple(r for r in self.routes.list(ns) if _meta(r).get("name") in desired)
        workloads = len(self.jobs.list(ns)) + len(self.services.list(ns))
        for config in configs:
            if _meta(config).get("deletionTimestamp"):
                continue
            seen = Observed(
                generation=_meta(config).get("generation") or 0,
                in_force_name=res.effective_name,
                gateway=gateway_of(config),
                gateway_exists=gateway_exists,
                routes=routes,
                taken=tuple(taken),
                models=len(models),
                workloads=workloads,
                spec_error=first_error(config),
            )
            await self._write_status(config, seen)
        # a route name held by someone else's HTTPRoute: look again later (we do not watch theirs)
        return Result(requeue_after=TAKEN_RETRY) if taken else None

    async def _sync_routes(self, ns: str, desired: dict[str, dict], config: Mapping[str, Any] | None) -> list[str]:
        """Create, repair and remove our routes; return the names held by routes not ours."""
        existing = {_meta(r)["name"]: r for r in self.routes.list(ns)}
        taken: list[str] = []
        for name, route in desired.items():
            current = existing.get(name)
            if current is None:
                if (ns, name) in self._taken and await self._held_by_others(ns, name):
                    taken.append(name)  # still theirs: read, do not retry the create
                    continue
                try:
                    await self.client.create(HTTPROUTES, route, ns)
                except ApiError as e:
                    if not e.already_exists:
                        raise
                    if await self._held_by_others(ns, name):
                        taken.append(name)  # never overwrite a route somebody else made
                    continue  # else our cache lags behind our own create
                self._taken.discard((ns, name))
                self._event(config, route, "RouteCreated", f"HTTPRoute {name} created for Model {name[len(ROUTE_PREFIX):]}")
            elif not contains(current, {k: route[k] for k in ("metadata", "spec")}):
                patch = {"metadata": {"labels": route["metadata"]["labels"],
                                      "ownerReferences": route["metadata"]["ownerReferences"]},
                         "spec": route["spec"]}
                await self.client.patch(HTTPROUTES, name, patch, ns)
        for name, route in existing.items():
            if name in desired:
                continue
            try:
                await self.client.delete(HTTPROUTES, name, ns, uid=_meta(route).get("uid"))
            except ApiError as e:
                if not (e.not_found or e.conflict):
                    raise
                continue
            self._event(config, route, "RouteRemoved", f"HTTPRoute {name} removed")
        return taken

    async def _held_by_others(self, ns: str, name: str) -> bool:
        other = await self.client.get_or_none(HTTPROUTES, name, ns)
        held = other is not None and not is_ours(other)
        (self._taken.add if held else self._taken.discard)((ns, name))
        return held

    async def _route_key(self) -> bytes:
        """The current key of the routes' tokens, from its Secret in the operator namespace (made if missing,
        rotated when it asks for it: a PUT guarded by its resourceVersion, so one replica's worker rotates once)."""
        secret = self.key_secrets.get(KEY_SECRET, self.operator_ns)
        if secret is None:
            try:
                return await ensure_route_key(self.client, self.operator_ns)
            except ApiError as e:
                if e.not_found:  # see _sync_grant: the Namespace watch enqueues us again
                    raise TerminalError(
                        f"operator namespace {self.operator_ns!r} not found: the route key Secret {KEY_SECRET} cannot be "
                        f"created until it exists (kubectl create namespace {self.operator_ns})"
                    ) from None
                raise
        new = rotated(secret, time.time())
        if new is not None:
            secret = await self.client.replace(SECRETS, new)  # a 409 (raced): the requeue reads the winner's key
            log.info("route key rotated", extra={"secret": f"{self.operator_ns}/{KEY_SECRET}"})
        return key_of(secret)

    async def _sync_gateway_list(self) -> None:
        """The admission policy's list of AIM Gateways: written when it differs from what the configs name."""
        desired = desired_gateway_list(self.configs.list(), self.operator_ns)
        current = self.gateway_lists.get(GATEWAY_LIST, self.operator_ns)
        if current is None:
            try:
                await self.client.create(CONFIGMAPS, desired, self.operator_ns)
            except ApiError as e:
                if not e.already_exists:
                    raise
        elif (current.get("data") or {}) != desired["data"]:
            # a merge patch of the data alone (the manifests own the labels): null removes a Gateway no config names
            data: dict[str, Any] = {k: None for k in current.get("data") or {} if k not in desired["data"]}
            await self.client.patch(CONFIGMAPS, GATEWAY_LIST, {"data": {**data, **desired["data"]}}, self.operator_ns)

    async def _sync_grant(self, ns: str, needed: bool) -> None:
        name = grant_name(ns)
        current = self.grants.get(name, self.operator_ns)
        if needed:
            grant = desired_grant(ns, self.operator_ns)
            if current is None:
                try:
                    await self.client.create(REFERENCEGRANTS, grant, self.operator_ns)
                except ApiError as e:
                    if e.not_found:
                        # No timer retries (an idle operator writes nothing): the Namespace
                        # watch in setup() enqueues every config once the namespace exists.
                        raise TerminalError(
                            f"operator namespace {self.operator_ns!r} not found: ReferenceGrant {name} cannot be "
                            f"created until it exists (kubectl create namespace {self.operator_ns})"
                        ) from None
                    if not e.already_exists:
                        raise
            elif not contains(current, {k: grant[k] for k in ("metadata", "spec")}):
                patch = {"metadata": {"labels": grant["metadata"]["labels"]}, "spec": grant["spec"]}
                await self.client.patch(REFERENCEGRANTS, name, patch, self.operator_ns)
        elif current is not None:
            try:
                await self.client.delete(REFERENCEGRANTS, name, self.operator_ns, uid=_meta(current).get("uid"))
            except ApiError as e:
                if not (e.not_found or e.conflict):
                    raise

    async def _write_status(self, cached: dict, seen: Observed) -> None:
        meta = _meta(cached)
        ns, name = meta.get("namespace") or "", meta.get("name") or ""
        key = (AIMNAMESPACECONFIGS.kind, ns, name)
        config = self.expectations.view(key, cached) or cached
        stored = config.get("status") or {}
        new = desired_status(name, stored, seen, datetime.now(timezone.utc))
        if new == stored:
            return
        try:
            # resourceVersion-guarded: a 409 (the config changed since the cache saw it) requeues
            # the namespace, and the next pass computes the status from the new config
            await self.expectations.write_status(
                key, config, new,
                lambda patch: self.client.patch_status(AIMNAMESPACECONFIGS, name, patch, ns),
                own=False,  # the config watch ignores status-only updates (FieldsChanged below)
            )
        except ApiError as e:
            if e.not_found:
                return
            raise

    def _event(self, config: Mapping[str, Any] | None, route: Mapping[str, Any], reason: str, message: str) -> None:
        log.info(message, extra={"reason": reason, "route": _meta(route).get("name")})
        target = config
        if target is None:  # no config any more: tell the Model's owner instead
            refs = _meta(route).get("ownerReferences") or []
            if not refs:
                return
            target = {"apiVersion": refs[0].get("apiVersion"), "kind": refs[0].get("kind"),
                      "metadata": {"name": refs[0].get("name"), "namespace": _meta(route).get("namespace"),
                                   "uid": refs[0].get("uid")}}
        self.recorder.normal(target, reason, message)


async def gateway_api_served(mgr: Manager) -> bool:
    """Whether the cluster serves the Gateway API kinds the controller watches."""
    return await served(mgr.client, HTTPROUTES, GATEWAYS, REFERENCEGRANTS)


def setup(mgr: Manager, *, operator_ns: str | None = None, tracer: Any = None) -> AIMReconciler:
    """Register the AIMNamespaceConfig controller on ``mgr``."""
    rec = AIMReconciler(mgr, operator_ns or operator_namespace())
    ctl = mgr.new_controller(CONTROLLER_NAME, rec, workers=2, tracer=tracer)
    ctl.watches(rec.configs, _ns_request, predicates=[FieldsChanged(_not_status)], debounce=DEBOUNCE)
    ctl.watches(rec.models, _ns_request, predicates=[_ComesOrGoes()], debounce=DEBOUNCE)
    ctl.watches(rec.routes, _ns_request, debounce=DEBOUNCE)
    ctl.watches(rec.grants, rec.grant_owner, debounce=DEBOUNCE)
    ctl.watches(rec.gateways, rec.gateway_users, predicates=[_ComesOrGoes()], debounce=DEBOUNCE)
    for inf in (rec.jobs, rec.services):
        ctl.watches(inf, rec._configured, predicates=[_ComesOrGoes()], debounce=1.0)
    # the operator's namespace appearing lets the ReferenceGrants be created (see _sync_grant)
    ctl.watches(rec.namespaces, rec.operator_namespace_users, predicates=[_ComesOrGoes()])
    # a new (or rotated) key: every namespace's routes get their new tokens
    ctl.watches(rec.key_secrets, rec.all_users, debounce=DEBOUNCE)
    ctl.watches(rec.gateway_lists, rec.all_users, debounce=DEBOUNCE)
    return rec


__all__ = ["GATEWAYS", "HTTPROUTES", "REFERENCEGRANTS", "AIMReconciler", "operator_namespace", "setup"]
