"""Where the built-in kinds live in the API (typed access to core kinds).

Custom resources are declared the same way by the code that uses them, or
found at run time with :func:`discover`.
"""

from __future__ import annotations

from kaiwo_ctrl.runtime.api.client import ApiError, Client, Resource

NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
PODS = Resource("", "v1", "pods", "Pod")
SERVICES = Resource("", "v1", "services", "Service")
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
SECRETS = Resource("", "v1", "secrets", "Secret")
PVCS = Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim")
SERVICEACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")
EVENTS = Resource("", "v1", "events", "Event")
JOBS = Resource("batch", "v1", "jobs", "Job")
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment")
REPLICASETS = Resource("apps", "v1", "replicasets", "ReplicaSet")
STATEFULSETS = Resource("apps", "v1", "statefulsets", "StatefulSet")
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease")
PRIORITYCLASSES = Resource("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False)
CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", namespaced=False)


async def discover(client: Client, group: str, version: str, kind: str) -> Resource:
    """Look a kind up in API discovery (for kinds not declared in code)."""
    path = f"/apis/{group}/{version}" if group else f"/api/{version}"
    doc = await client.request("GET", path)
    for r in doc.get("resources", []):
        if r.get("kind") == kind and "/" not in r["name"]:
            return Resource(group, version, r["name"], kind, bool(r.get("namespaced")))
    raise LookupError(f"{kind} not served at {path}")


async def served(client: Client, *resources: Resource) -> bool:
    """Whether the API server serves every one of these kinds (an optional CRD is
    installed); any other failure of discovery is raised."""
    for res in resources:
        try:
            await discover(client, res.group, res.version, res.kind)
        except LookupError:
            return False
        except ApiError as e:
            if e.not_found:
                return False
            raise
    return True


async def namespace_exists(client: Client, name: str) -> bool:
    """Whether namespace ``name`` exists, by a read (``list`` with a field selector, so only
    ``list namespaces`` is needed). Ask before creating in a namespace that may be missing:
    a create that fails there is still a write request, retried for ever by a caller."""
    found = await client.list(NAMESPACES, field_selector=f"metadata.name={name}", limit=1)
    return bool(found.get("items"))
