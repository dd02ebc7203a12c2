"""The webhook certificate Secret when the operator's namespace does not exist
(the operator run out of cluster with the default namespace, say): one clear
log line naming the namespace and the flag, no traceback, a growing delay, and
the Secret written as soon as the namespace is there; no create is attempted while it is
missing, for the certificate nor the proxy's route key. Real API server."""

from __future__ import annotations

import datetime as dt
import logging
import uuid

import pytest

from kaiwo_ctrl.webhooks.tls import CertManager, TLSOptions

pytestmark = pytest.mark.integration


async def test_missing_namespace_is_one_line_and_backs_off(client, admin, caplog):
    ns = f"absent-{uuid.uuid4().hex[:6]}"
    published: list[bytes] = []
    manager = CertManager(client, TLSOptions(ns, dns_names=("svc.test",)), published.append)
    now = dt.datetime.now(dt.timezone.utc)
    caplog.set_level(logging.INFO, logger="kaiwo_ctrl.webhooks.tls")

    creates: list[str] = []
    create = client.create

    async def counted_create(res, body, *a, **kw):
        creates.append(res.plural)
        return await create(res, body, *a, **kw)

    client.create = counted_create  # the real call, counted: an idle operator attempts no write
    delays = []
    for _ in range(3):
        due = await manager.ensure(now)
        delays.append((due - now).total_seconds())
    assert delays == [5.0, 10.0, 20.0]
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 3
    for r in errors:
        text = r.getMessage()
        assert "\n" not in text and r.exc_info is None and r.exc_text is None
        assert f"namespace {ns!r} does not exist" in text
        assert "--leader-election-namespace" in text and "POD_NAMESPACE" in text
    assert published == [] and manager.writes == 0
    assert creates == [], "while the namespace is missing, no create is attempted"

    r = admin.post("/api/v1/namespaces", json={"metadata": {"name": ns}})
    assert r.status_code == 201, r.text
    await manager.ensure(now)
    assert manager.writes == 1 and published and published[0].startswith(b"-----BEGIN CERTIFICATE-----")
    assert manager.missing_namespace_delay == 0.0 and creates == ["secrets"]
    assert admin.get(f"/api/v1/namespaces/{ns}/secrets/kaiwo-webhook-server-cert").status_code == 200


async def test_route_key_waits_for_the_namespace_without_writing(client, admin):
    """The proxy's route key Secret, like the certificate's, is not attempted in a missing
    namespace (the Gateway listener retries; each failed create would be a write)."""
    from kaiwo_ctrl.aim import fence

    ns = f"absent-{uuid.uuid4().hex[:6]}"
    creates: list[str] = []
    create = client.create

    async def counted_create(res, body, *a, **kw):
        creates.append(res.plural)
        return await create(res, body, *a, **kw)

    client.create = counted_create
    with pytest.raises(fence.RouteKeyError, match=f"namespace '{ns}' does not exist"):
        await fence.ensure_route_key(client, ns)
    assert creates == []
    r = admin.post("/api/v1/namespaces", json={"metadata": {"name": ns}})
    assert r.status_code == 201, r.text
    key = await fence.ensure_route_key(client, ns)
    assert creates == ["secrets"] and await fence.ensure_route_key(client, ns) == key
