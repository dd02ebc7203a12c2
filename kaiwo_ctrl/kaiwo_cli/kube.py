"""The connection to the cluster and the translation of API errors into clear exits."""

from __future__ import annotations

from typing import Any

from kaiwo_ctrl.kinds import KAIWOJOBS, KAIWOSERVICES
from kaiwo_ctrl.runtime.api.apitypes import resource_of
from kaiwo_ctrl.runtime.api.client import ApiError, Client, RestConfig

from .errors import FAILED, FORBIDDEN, NO_CLUSTER, NO_CRDS, NOT_FOUND, CliError

KINDS = {"KaiwoJob": KAIWOJOBS, "KaiwoService": KAIWOSERVICES}
#: ``kaiwo status job/NAME`` style prefixes.
KIND_PREFIXES = {
    "job": "KaiwoJob", "kaiwojob": "KaiwoJob", "kaiwojobs": "KaiwoJob", "kj": "KaiwoJob",
    "service": "KaiwoService", "kaiwoservice": "KaiwoService", "kaiwoservices": "KaiwoService", "ks": "KaiwoService",
}
INSTALL_HINT = (
    "A platform engineer installs kaiwo-ctrl (CRDs, RBAC and the operator) with "
    "`kubectl apply -k config/default` from the kaiwo-ctrl repository."
)
_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete", "WATCH": "watch"}


async def connect(kubeconfig: str | None, context: str | None) -> Client:
    """A client for the kubeconfig (or ``$KUBECONFIG``, ``~/.kube/config``, in-cluster) and context."""
    import os

    path = kubeconfig or os.environ.get("KUBECONFIG")
    if path and not os.path.isfile(os.path.expanduser(path)):
        raise CliError(f"no cluster configured: kubeconfig {path} does not exist", NO_CLUSTER)
    if not path and not os.path.isfile(os.path.expanduser("~/.kube/config")) and not os.environ.get(
        "KUBERNETES_SERVICE_HOST"
    ):
        raise CliError("no cluster configured: no --kubeconfig, no $KUBECONFIG, no ~/.kube/config, and not "
                       "running inside a cluster", NO_CLUSTER)
    try:
        config = await RestConfig.load(kubeconfig, context)
    except Exception as e:  # noqa: BLE001 - mapped to CliError; kubernetes-asyncio raises ConfigException, OSError, ValueError...
        where = kubeconfig or "$KUBECONFIG / ~/.kube/config"
        raise CliError(
            f"no cluster configured: cannot load a kubeconfig from {where}"
            + (f" (context {context!r})" if context else "")
            + f": {e}. Pass --kubeconfig or set KUBECONFIG.",
            NO_CLUSTER,
        ) from None
    return Client(config, field_manager="kaiwo-cli", user_agent="kaiwo-cli", request_timeout=30)


async def check_crds(client: Client) -> None:
    """Fail with exit 4 and the way to install them when the Kaiwo CRDs are not served."""
    group = f"/apis/{KAIWOJOBS.group}/{KAIWOJOBS.version}"
    try:
        doc = await client.request("GET", group)
    except ApiError as e:
        if e.not_found:
            raise _no_crds("the API group kaiwo.silogen.ai/v1alpha1 is not served") from None
        raise explain(e, client) from None
    served = {r.get("name") for r in (doc or {}).get("resources") or []}
    missing = [r.plural for r in KINDS.values() if r.plural not in served]
    if missing:
        raise _no_crds(f"{', '.join(missing)} not served by kaiwo.silogen.ai/v1alpha1")


def _no_crds(detail: str) -> CliError:
    return CliError(f"the Kaiwo CRDs are not installed in this cluster ({detail}). {INSTALL_HINT}", NO_CRDS)


def explain(e: ApiError, client: Client | None = None, *, what: str | None = None) -> CliError:
    """A user-facing error for an API failure, with the exit code that fits it."""
    if e.status == 0:
        host = client.config.host if client else "the API server"
        return CliError(
            f"cannot reach the cluster at {host}: {e.message or e}. Is it running, and are "
            "--kubeconfig/--context right?",
            NO_CLUSTER,
        )
    if e.status == 401:
        return CliError("the cluster rejected your credentials (401 Unauthorized); log in again or check --kubeconfig",
                        FORBIDDEN)
    if e.forbidden:
        verb, resource, namespace = describe_request(e.method, e.path)
        where = f" in namespace {namespace!r}" if namespace else " cluster-wide"
        return CliError(
            f"permission denied: you may not {verb} {resource}{where}. Ask your cluster administrator "
            f"for a Role that allows it. (server: {e.message})",
            FORBIDDEN,
        )
    if e.not_found and what:
        return CliError(f"{what} not found", NOT_FOUND)
    if e.already_exists:
        return CliError(f"{what or 'the object'} already exists: {e.message}. Choose another --name, "
                        "or delete the old one with `kaiwo delete`.", FAILED)
    if e.invalid:
        return CliError(f"the cluster rejected {what or 'the request'}: {e.message}", FAILED)
    return CliError(f"{e.method} {e.path} failed: {e.status} {e.reason} {e.message}".strip(), FAILED)


def describe_request(method: str, path: str) -> tuple[str, str, str | None]:
    """(verb, resource.group, namespace) of a request path, as RBAC names them."""
    parts = [p for p in path.split("?", 1)[0].split("/") if p]
    group = "" if parts[:1] == ["api"] else (parts[1] if len(parts) > 1 else "")
    rest = parts[2:] if parts[:1] == ["api"] else parts[3:]
    namespace = rest[1] if len(rest) > 2 and rest[0] == "namespaces" else None
    resource = resource_of(path)
    named = len(rest) - (2 if namespace else 0) >= 2
    verb = _VERBS.get(method) or ("get" if named else "list")
    plural, _, sub = resource.partition("/")
    return verb, (f"{plural}.{group}" if group else plural) + (f"/{sub}" if sub else ""), namespace


def split_kind(name: str) -> tuple[str | None, str]:
    """``job/train-1`` -> (KaiwoJob, train-1); ``train-1`` -> (None, train-1)."""
    prefix, sep, rest = name.partition("/")
    if sep and prefix.lower() in KIND_PREFIXES:
        return KIND_PREFIXES[prefix.lower()], rest
    return None, name


async def find_workload(client: Client, namespace: str, name: str, kind: str | None = None) -> dict[str, Any]:
    """The KaiwoJob or KaiwoService called ``name`` (a KaiwoJob first when both exist)."""
    prefixed, name = split_kind(name)
    kind = kind or prefixed
    for k in [kind] if kind else list(KINDS):
        try:
            return await client.get(KINDS[k], name, namespace)
        except ApiError as e:
            if not e.not_found:
                raise explain(e, client) from None
    what = kind or "KaiwoJob or KaiwoService"
    raise CliError(
        f"no {what} named {name!r} in namespace {namespace!r} (`kaiwo list -n {namespace}` shows what is there)",
        NOT_FOUND,
    )
