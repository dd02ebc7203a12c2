"""--webhook-cert-source=secret: another issuer (cert-manager) writes the webhook
Secret (tls.crt, tls.key, ca.crt; no ca.key). The operator serves that
certificate and publishes the Secret's ca.crt as the caBundle, and writes nothing
to the Secret."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt

from support import eventually

from kaiwo_ctrl.cli import _webhook_options, build_parser
from kaiwo_ctrl.runtime.net.certs import TinyCA
from kaiwo_ctrl.webhooks import _publish_external_ca
from kaiwo_ctrl.webhooks.tls import Material, ServingCert, TLSOptions, plan_secret

NOW = dt.datetime.now(dt.timezone.utc)


def cert_manager_secret(cn: str = "kaiwo-webhook-service.kaiwo-system.svc") -> dict:
    """What cert-manager's CA issuer writes: the issuing CA in ca.crt, no CA key."""
    ca = TinyCA("issuer-ca", validity=dt.timedelta(days=30), now=NOW)
    pair = ca.issue(cn, server=True, dns=(cn,), ips=(), validity=dt.timedelta(days=1), now=NOW)
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    return {"type": "kubernetes.io/tls", "metadata": {"name": "kaiwo-webhook-server-cert"},
            "data": {"ca.crt": b64(ca.pair.cert_pem), "tls.crt": b64(pair.cert_pem), "tls.key": b64(pair.key_pem)}}


def test_a_secret_without_ca_key_still_serves():
    secret = cert_manager_secret()
    m = Material.from_secret(secret)
    assert m.cert is not None and m.ca is None and m.ca_bundle
    serving = ServingCert()
    assert serving.load(secret) and serving.ready
    # self-managed mode would still replace such a Secret with its own CA (it cannot sign without the key)
    assert plan_secret(m, TLSOptions("kaiwo-system", dns_names=("x",)), NOW).data is not None


def test_flag_and_environment():
    args = build_parser().parse_args(["run", "--webhook-bind-address=:9443", "--webhook-cert-source=secret"])
    assert _webhook_options(args, "kaiwo-system").external_certs is True
    args = build_parser().parse_args(["run", "--webhook-bind-address=:9443"])
    assert _webhook_options(args, "kaiwo-system").external_certs is False


async def test_ca_bundle_is_published_when_it_changes_only():
    current: dict = {"secret": None}
    reads: list[int] = []
    changed = asyncio.Event()
    published: list[bytes] = []

    def read():
        reads.append(1)
        return current["secret"]

    async def publish(bundle: bytes) -> None:
        published.append(bundle)

    # each pass reads the Secret, then publishes (or not) before it waits again, with no await in
    # between: once the test sees the n-th read, that pass's decision is made
    config_changed = asyncio.Event()
    task = asyncio.create_task(_publish_external_ca(read, changed, config_changed, publish))
    try:
        await eventually(lambda: len(reads) == 1, 5, what="the first pass")
        assert published == []  # no Secret yet: nothing to publish, the webhooks fail open
        first = cert_manager_secret()
        current["secret"] = first
        changed.set()
        await eventually(lambda: len(published) == 1, 5, what="the first CA bundle")
        assert published == [base64.b64decode(first["data"]["ca.crt"])]
        changed.set()  # an update that leaves ca.crt alone (e.g. a renewed tls.crt)
        await eventually(lambda: len(reads) == 3, 5, what="the third pass")
        assert len(published) == 1
        second = cert_manager_secret()
        current["secret"] = second
        changed.set()
        await eventually(lambda: len(published) == 2, 5, what="the new CA bundle")
        assert published[-1] == base64.b64decode(second["data"]["ca.crt"])
        # the KaiwoConfig's GPU key changed: the same bundle is published again, since the
        # enforcement webhooks' match condition names the key
        config_changed.set()
        changed.set()
        await eventually(lambda: len(published) == 3, 5, what="the republished configurations")
        assert published[-1] == published[-2]
        assert not config_changed.is_set()
    finally:
        task.cancel()
