"""Real callers for the proxy's caller checks: ServiceAccount tokens minted on the real API server
(TokenRequest) and RoleBindings to the shipped ``kaiwo-model-user`` ClusterRole."""

from __future__ import annotations

from typing import Any

import yaml

from kaiwo_ctrl.rbac import MODEL_USER_ROLE, RBAC_DIR

RBAC = "/apis/rbac.authorization.k8s.io/v1"


def service_account_token(admin: Any, namespace: str, name: str, seconds: int = 3600) -> str:
    """A token of ServiceAccount ``namespace/name`` (made when missing)."""
    r = admin.post(f"/api/v1/namespaces/{namespace}/serviceaccounts", json={"metadata": {"name": name}})
    assert r.status_code in (201, 409), r.text
    r = admin.post(f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
                   json={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": seconds}})
    assert r.status_code == 201, r.text
    return r.json()["status"]["token"]


def ensure_model_user_role(admin: Any) -> None:
    """The ``kaiwo-model-user`` ClusterRole as config/rbac ships it."""
    doc = yaml.safe_load((RBAC_DIR / "kaiwo_model_user_role.yaml").read_text())
    r = admin.post(f"{RBAC}/clusterroles", json=doc)
    assert r.status_code in (201, 409), r.text


def grant_model_user(admin: Any, namespace: str, sa_namespace: str, sa_name: str, binding: str = "model-users") -> str:
    """Bind ``kaiwo-model-user`` in ``namespace`` to ServiceAccount ``sa_namespace/sa_name``; the binding's name."""
    ensure_model_user_role(admin)
    body = {"metadata": {"name": binding, "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": MODEL_USER_ROLE},
            "subjects": [{"kind": "ServiceAccount", "name": sa_name, "namespace": sa_namespace}]}
    r = admin.post(f"{RBAC}/namespaces/{namespace}/rolebindings", json=body)
    assert r.status_code == 201, r.text
    return binding


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
