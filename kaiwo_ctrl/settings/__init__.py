"""KaiwoConfig: the live, cluster-scoped operator settings (singleton ``kaiwo``).

Every reconcile reads the config from the shared informer cache, so an edit
takes effect on the next reconcile without a restart. At start-up the
operator creates ``KaiwoConfig/kaiwo`` with an empty spec if it is missing;
the API server fills in the CRD defaults.
"""

from __future__ import annotations

import logging

from api.config.v1alpha1 import KAIWO_CONFIG_NAME, KaiwoConfig
from kaiwo_ctrl.kinds import KAIWOCONFIGS
from kaiwo_ctrl.runtime.api.client import ApiError, Client
from kaiwo_ctrl.runtime.cache.informer import Informer
from kaiwo_ctrl.runtime.manager.manager import Manager
from kaiwo_ctrl.runtime.api.restconfig import pod_namespace

log = logging.getLogger("kaiwo_ctrl.settings")

#: Where the operator runs when neither a flag nor its pod says otherwise.
DEFAULT_OPERATOR_NAMESPACE = "kaiwo-system"


def operator_namespace(explicit: str | None = None) -> str:
    """The operator's namespace (its Lease, webhook Service, autoscaler state,
    gateway ReferenceGrants): ``explicit`` (a flag), else the pod's, else ``kaiwo-system``."""
    return explicit or pod_namespace() or DEFAULT_OPERATOR_NAMESPACE


class ConfigMissing(RuntimeError):
    """KaiwoConfig/kaiwo is not in the cache (the reconcile retries with backoff)."""


class Settings:
    """Read access to the current KaiwoConfig (one shared informer)."""

    def __init__(self, mgr: Manager) -> None:
        self.informer: Informer = mgr.cache.informer(KAIWOCONFIGS)

    def raw(self) -> dict | None:
        return self.informer.get(KAIWO_CONFIG_NAME)

    def current(self) -> KaiwoConfig:
        raw = self.raw()
        if raw is None:
            raise ConfigMissing(f"KaiwoConfig {KAIWO_CONFIG_NAME!r} not found")
        return KaiwoConfig.model_validate(raw)


def settings_for(mgr: Manager) -> Settings:
    """The one Settings object of this manager (created on first use, kept by the manager)."""
    return mgr.singleton(Settings, lambda: Settings(mgr))


async def ensure_config(client: Client) -> bool:
    """Create KaiwoConfig/kaiwo with an empty spec if missing; True when created."""
    try:
        await client.get(KAIWOCONFIGS, KAIWO_CONFIG_NAME)
        return False
    except ApiError as e:
        if not e.not_found:
            raise
    body = {
        "apiVersion": KAIWOCONFIGS.api_version,
        "kind": KAIWOCONFIGS.kind,
        "metadata": {"name": KAIWO_CONFIG_NAME, "labels": {"app.kubernetes.io/managed-by": "kaiwo-ctrl"}},
        "spec": {},
    }
    try:
        await client.create(KAIWOCONFIGS, body)
    except ApiError as e:
        if e.already_exists:
            return False
        raise
    log.info("created default KaiwoConfig", extra={"object": KAIWO_CONFIG_NAME})
    return True
