"""Admission webhooks: adopt labelled Jobs, refuse bad specs early, fail open.

:func:`setup` wires everything onto a Manager and returns the
:class:`~kaiwo_ctrl.webhooks.server.WebhookServer`, which the caller starts
before and stops after ``Manager.run`` (every replica serves; only the
leader writes the certificate Secret and the webhook configurations).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import ipaddress
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kaiwo_ctrl.kinds import CLUSTERQUEUES, KAIWOJOBS, KAIWOQUEUECONFIGS, LOCALQUEUES
from kaiwo_ctrl.nodes import node_informer
from kaiwo_ctrl.runtime.manager.manager import Manager
from kaiwo_ctrl.runtime.api.resources import JOBS, SECRETS
from kaiwo_ctrl.settings import ConfigMissing, settings_for
from kaiwo_ctrl.workloads.base.world import Settings, World

from .finalizers import FinalizerSweeper
from .jobs import JobWebhooks
from .registration import JOB_MUTATE_PATH, JOB_VALIDATE_PATH, OWN_KINDS, RegistrationOptions, ensure_configurations, validate_path
from .server import Review, Verdict, WebhookMetrics, WebhookServer
from .tls import CertManager, Material, ServingCert, TLSOptions
from .validate import OwnKindValidator, ProfilesLookup

log = logging.getLogger("kaiwo_ctrl.webhooks")


@dataclass(frozen=True)
class WebhookOptions:
    host: str = "0.0.0.0"
    port: int = 9443
    namespace: str = "kaiwo-system"
    #: Out of cluster: the host the apiserver reaches this process at.
    url_host: str | None = None
    service_name: str = "kaiwo-webhook-service"
    config_prefix: str = "kaiwo"
    secret_name: str = "kaiwo-webhook-server-cert"
    cert_validity: dt.timedelta = dt.timedelta(days=90)
    enforce: bool = False
    enforcement_namespace_selector: str = ""
    enforcement_failure_policy: str = "Fail"
    #: Another issuer (cert-manager) writes the Secret; the operator only serves it and
    #: publishes its ca.crt as the caBundle.
    external_certs: bool = False
    profiles: ProfilesLookup | None = field(default=None, compare=False)

    def registration(self, port: int) -> RegistrationOptions:
        url = f"https://{self.url_host}:{port}" if self.url_host else None
        return RegistrationOptions(
            prefix=self.config_prefix,
            service=None if url else (self.namespace, self.service_name, 443),
            url_base=url,
            operator_namespace=self.namespace,
            enforce=self.enforce,
            enforcement_namespace_selector=self.enforcement_namespace_selector,
            enforcement_failure_policy=self.enforcement_failure_policy,
        )

    def tls(self) -> TLSOptions:
        if self.url_host:
            dns, ips = _split_host(self.url_host)
        else:
            svc = f"{self.service_name}.{self.namespace}.svc"
            dns, ips = (svc, f"{svc}.cluster.local"), ()
        return TLSOptions(self.namespace, self.secret_name, dns, ips, cert_validity=self.cert_validity)


def _split_host(host: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    try:
        ipaddress.ip_address(host)
        return (), (host,)
    except ValueError:
        return (host,), ()


class _ClusterView:
    """KaiwoConfig settings and the node list, read from the shared caches."""

    def __init__(self, mgr: Manager) -> None:
        self._settings = settings_for(mgr)
        self._nodes = node_informer(mgr)
        self._memo: tuple[str, Any, Settings] | None = None

    def _config(self) -> tuple[Any, Settings]:
        raw = self._settings.raw()
        if raw is None:
            raise ConfigMissing("KaiwoConfig 'kaiwo' not found")
        rv = (raw.get("metadata") or {}).get("resourceVersion", "")
        if self._memo is None or self._memo[0] != rv:
            world = World.from_dicts(config=raw.get("spec") or {})
            self._memo = (rv, world.config, world.settings)
        return self._memo[1], self._memo[2]

    def settings(self) -> Settings:
        return self._config()[1]

    def gpu_keys(self) -> tuple[str, ...]:
        try:
            return (self.settings().default_gpu_resource_key,)
        except ConfigMissing:
            return ()

    def on_gpu_key_change(self, fn: Callable[[], None]) -> None:
        self._settings.informer.add_handler(_OnGpuKeyChange(self, fn))

    def world(self) -> World:
        try:
            config = self._config()[0]
        except ConfigMissing:
            config = World.from_dicts().config
        return World(config=config, nodes=tuple(self._nodes.list()))


def _own_kind_handler(validator: OwnKindValidator, kind: str):
    async def handle(review: Review) -> Verdict:
        obj = review.object
        if review.operation == "UPDATE" and obj.get("spec") == review.old_object.get("spec"):
            return Verdict()  # metadata-only edits of an object stay possible
        errors = validator.errors(kind, obj)
        return Verdict.refuse(errors, kind, (obj.get("metadata") or {}).get("name", "")) if errors else Verdict()

    return handle


def setup(mgr: Manager, opts: WebhookOptions) -> WebhookServer:
    view = _ClusterView(mgr)
    cert = ServingCert()
    server = WebhookServer(opts.host, opts.port, cert, WebhookMetrics(mgr.metrics.registry))
    jobs = JobWebhooks(
        mgr.client, view.settings, mgr.cache.informer(KAIWOJOBS), mgr.cache.informer(LOCALQUEUES),
        mgr.cache.informer(JOBS), mgr.cache.informer(KAIWOQUEUECONFIGS), mgr.cache.informer(CLUSTERQUEUES), opts.enforce,
    )
    server.register(JOB_MUTATE_PATH, jobs.mutate)
    server.register(JOB_VALIDATE_PATH, jobs.validate)
    validator = OwnKindValidator(view.world, opts.profiles)
    for group, version, _plural, kind in OWN_KINDS:
        server.register(validate_path(group, version, kind), _own_kind_handler(validator, kind))

    secrets = mgr.cache.informer(SECRETS, namespace=opts.namespace, field_selector=f"metadata.name={opts.secret_name}")
    handler = _SecretHandler(cert)
    secrets.add_handler(handler)

    config_changed = asyncio.Event()  # KaiwoConfig's defaultGpuResourceKey is part of the enforcement match

    def gpu_key_changed() -> None:
        config_changed.set()
        handler.changed.set()  # wakes the external-certificate loop as well

    view.on_gpu_key_change(gpu_key_changed)

    async def keep_certificate() -> None:
        port = server.bound_port or opts.port

        async def publish(ca_bundle: bytes) -> None:
            reg = dataclasses.replace(opts.registration(port), gpu_resource_keys=view.gpu_keys())
            await ensure_configurations(mgr.client, reg, ca_bundle, create=reg.url_base is not None)

        if opts.external_certs:
            read = lambda: secrets.get(opts.secret_name, opts.namespace)  # noqa: E731
            await _publish_external_ca(read, handler.changed, config_changed, publish)
            return
        manager = CertManager(mgr.client, opts.tls(), publish)
        while True:
            config_changed.clear()
            try:
                due = await manager.ensure()
                delay = (due - dt.datetime.now(dt.timezone.utc)).total_seconds()
            except Exception:  # retried; the webhooks fail open meanwhile
                log.exception("webhook certificate or configuration update failed; retrying")
                delay = 5.0
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(config_changed.wait(), min(max(delay, 0.5), 3600.0))

    mgr.add_runnable("webhook-certificate", keep_certificate, leader=True)
    mgr.add_runnable("webhook-server", server.serve, before_caches=True)
    FinalizerSweeper(mgr).register()
    return server


class _OnGpuKeyChange:
    def __init__(self, view: _ClusterView, fn: Callable[[], None]) -> None:
        self.view, self.fn = view, fn
        self.last: tuple[str, ...] | None = None

    def _check(self) -> None:
        try:
            keys = self.view.gpu_keys()
        except Exception:  # noqa: BLE001 - an unreadable KaiwoConfig is reported by its own reconciler
            return
        if keys != self.last:
            self.last = keys
            self.fn()

    def on_add(self, obj: Mapping[str, Any], initial: bool) -> None:
        self._check()

    def on_update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        self._check()

    def on_delete(self, obj: Mapping[str, Any], tombstone: bool) -> None:
        self._check()


async def _publish_external_ca(read: Any, changed: asyncio.Event, config_changed: asyncio.Event, publish: Any) -> None:
    """``--webhook-cert-source=secret``: the Secret's ca.crt becomes the webhooks' caBundle
    whenever it changes (read from the cache; nothing is written to the Secret). The
    configurations are published again when the KaiwoConfig's GPU key changes, since the
    enforcement match names it."""
    published = b""
    while True:
        changed.clear()
        if config_changed.is_set():
            config_changed.clear()
            published = b""
        bundle = Material.from_secret(read()).ca_bundle
        if not bundle:
            log.warning("webhook certificate secret has no ca.crt yet; the webhooks fail open until it has")
        elif bundle != published:
            try:
                await publish(bundle)
                published = bundle
            except Exception:  # retried; the webhooks fail open meanwhile
                log.exception("webhook configuration update failed; retrying")
                await asyncio.sleep(5.0)
                continue
        try:
            await asyncio.wait_for(changed.wait(), 3600.0)
        except TimeoutError:
            pass


class _SecretHandler:
    def __init__(self, cert: ServingCert) -> None:
        self.cert = cert
        self.changed = asyncio.Event()

    def on_add(self, obj: Mapping[str, Any], initial: bool) -> None:
        self.cert.load(obj)
        self.changed.set()

    def on_update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        self.cert.load(new)
        self.changed.set()

    def on_delete(self, obj: Mapping[str, Any], tombstone: bool) -> None:
        pass  # keep serving the last certificate; the leader writes a new one


__all__ = ["WebhookOptions", "WebhookServer", "setup"]
