"""A simulated Ray head for the simulated cluster (``local up --simulate``).

kwok starts no container, so no Ray head answers what the real KubeRay
operator asks of a Ray cluster. This process answers it, following the client
of KubeRay v1.6.2 (``ray-operator/controllers/ray/utils/dashboardclient`` and
``utils/httpproxy_httpclient.go``), on loopback only:

* the dashboard (the head Service's ``dashboard`` port, 8265). KubeRay calls it
  at ``http://<head-svc>.<ns>.svc.cluster.local:8265`` with a plain Go
  ``http.Client``, whose default transport honours ``HTTP_PROXY``; the plane
  starts KubeRay with ``HTTP_PROXY`` pointing here, so these requests arrive in
  absolute form and the Host names the head Service. Go never proxies loopback
  addresses (``httpproxy.useProxy``), so KubeRay still reaches the API server
  and the Pod IPs (127.64.0.0/16, see :data:`.components.POD_CIDR`) directly.
* the Serve proxy's ``/-/healthz`` (the head container's ``serve`` port,
  8000), which KubeRay calls on the head Pod's IP: this process listens on
  ``<podIP>:<port>`` of every Ready head Pod of a RayService (loopback
  addresses, so still nothing leaves the machine).

What is simulated (read from the API server, so it follows the simulated Pods):

* ``GET /api/jobs/<id>``: the RayJob whose ``status.jobId`` is ``<id>``, by the
  fate of its submitter Pod (the Kubernetes Job KubeRay creates in
  ``K8sJobMode``): 404 until that Pod runs (the job is not submitted yet),
  then RUNNING; SUCCEEDED when it succeeded, FAILED when it failed; FAILED
  as well when the head Pod is gone or failed while the job ran. A Pod has
  no exit code to report under kwok, so the entrypoint's failure is a knob: a
  head Pod annotated ``kaiwo-ctrl.local/simulate-ray-job: fail`` makes the job
  FAILED once its submitter finishes. ``stop`` marks it STOPPED.
* ``GET /api/jobs/`` lists those jobs; ``/logs`` answers an empty log;
  ``DELETE`` answers 200.
* ``PUT /api/serve/applications/`` keeps the Serve config; ``GET
  /api/serve/applications/?api_type=declarative`` answers its applications
  RUNNING (deployments HEALTHY) once every Pod of the cluster is Ready, else
  DEPLOYING.
* ``/-/healthz`` answers ``success`` while its head Pod is Ready.
* the serve Services' EndpointSlices, which KubeRay counts to call a RayService
  Ready (:mod:`.rayendpoints`: TEST-NET addresses, never dialled).

Not simulated: jobs submitted over HTTP (``HTTPMode``: they are recorded and
stay RUNNING until stopped) and ``SidecarMode``; job logs; Serve deployments'
replicas, autoscaling, ``target_capacity`` and incremental upgrades; the Ray
autoscaler; ``x-ray-authorization`` (no token is checked); anything on a
worker Pod. Every answer is bounded (the API server's answers, the bodies
this server takes, the listeners it opens).
"""

from __future__ import annotations

import argparse
import asyncio
import calendar
import contextlib
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import quote

from kaiwo_ctrl.runtime.api.client import Client
from kaiwo_ctrl.runtime.api.apitypes import ApiError
from kaiwo_ctrl.runtime.net.http1server import Request, Response, Server

from . import rayendpoints

log = logging.getLogger("kaiwo_ctrl.local.raydashboard")
#: the annotation on a head Pod that makes its simulated Ray job fail
FAIL_ANNOTATION = "kaiwo-ctrl.local/simulate-ray-job"
#: Serve configs kept (one per head Service) and health listeners opened, at most
MAX_CLUSTERS = 512
MAX_BODY = 1 << 20
_JSON = [(b"Content-Type", b"application/json")]


def _json(status: int, body: object) -> Response:
    return Response(status, list(_JSON), json.dumps(body).encode())


def _ready(pod: Mapping) -> bool:
    conds = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def _ms(ts: str | None) -> int:
    """Milliseconds since the epoch of an RFC 3339 timestamp (0 when absent)."""
    if not ts:
        return 0
    return calendar.timegm(time.strptime(ts, "%Y-%m-%dT%H:%M:%SZ")) * 1000


def split_target(req: Request) -> tuple[str, str, str]:
    """(namespace, head Service, path) of a proxied request (absolute form or Host)."""
    path = req.path
    host = (req.header(b"host") or b"").decode("latin-1")
    if path.startswith("http://"):
        host, _, rest = path[len("http://"):].partition("/")
        path = "/" + rest
    name = host.split(":", 1)[0].split(".")
    if len(name) < 3 or name[2] != "svc":
        return "", "", path
    return name[1], name[0], path


def job_info(ray_job: Mapping, submitter: Mapping | None, head: Mapping | None, stopped: bool) -> dict | None:
    """The dashboard's JobInfo of a K8sJobMode RayJob from its Pods' fate; None: not submitted yet."""
    job_id = (ray_job.get("status") or {}).get("jobId", "")
    if submitter is None:
        return None
    phase = (submitter.get("status") or {}).get("phase")
    if phase == "Pending":
        return None
    start = _ms((submitter.get("status") or {}).get("startTime"))
    info = {"job_id": job_id, "submission_id": job_id, "entrypoint": (ray_job.get("spec") or {}).get("entrypoint", ""),
            "start_time": start, "status": "RUNNING", "message": "simulated: the submitter Pod runs"}
    head_phase = (head or {}).get("status", {}).get("phase")
    finished = phase in ("Succeeded", "Failed")
    fail_knob = ((head or {}).get("metadata", {}).get("annotations") or {}).get(FAIL_ANNOTATION) == "fail"
    if stopped:
        info.update(status="STOPPED", message="simulated: stopped")
    elif phase == "Failed" or (finished and fail_knob):
        info.update(status="FAILED", message="simulated: the job's entrypoint failed")
    elif head is None or head_phase == "Failed":
        info.update(status="FAILED", message="simulated: the Ray head Pod is gone")
    elif finished:
        info.update(status="SUCCEEDED", message="simulated: the submitter Pod succeeded")
    if info["status"] != "RUNNING":
        info["end_time"] = int(time.time() * 1000)
    return info


@dataclass
class Dashboard:
    client: Client
    serve_configs: dict[tuple[str, str], dict] = field(default_factory=dict)
    stopped: set[tuple[str, str]] = field(default_factory=set)
    http_jobs: dict[tuple[str, str], dict] = field(default_factory=dict)

    async def _get(self, path: str, **params: str) -> dict | None:
        try:
            return await self.client.request("GET", path, params=params or None, timeout=10)
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    async def cluster_of(self, ns: str, svc: str) -> str | None:
        """The RayCluster behind a head Service (its ``ray.io/cluster`` selector)."""
        s = await self._get(f"/api/v1/namespaces/{quote(ns)}/services/{quote(svc)}")
        return (((s or {}).get("spec") or {}).get("selector") or {}).get("ray.io/cluster")

    async def pods(self, ns: str, selector: str) -> list[dict]:
        out = await self._get(f"/api/v1/namespaces/{quote(ns)}/pods", labelSelector=selector, limit="100")
        return [p for p in (out or {}).get("items", []) if not p["metadata"].get("deletionTimestamp")]

    async def jobs(self, ns: str, cluster: str) -> list[dict]:
        out = await self._get(f"/apis/ray.io/v1/namespaces/{quote(ns)}/rayjobs", limit="500")
        return [j for j in (out or {}).get("items", []) if (j.get("status") or {}).get("rayClusterName") == cluster]

    async def info(self, ns: str, cluster: str, ray_job: dict) -> dict | None:
        name = ray_job["metadata"]["name"]
        job_id = (ray_job.get("status") or {}).get("jobId", "")
        if (ns, job_id) in self.http_jobs:
            return {**self.http_jobs[(ns, job_id)], "status": "STOPPED" if (ns, job_id) in self.stopped else "RUNNING"}
        submitters = await self.pods(ns, f"batch.kubernetes.io/job-name={name}")
        heads = await self.pods(ns, f"ray.io/cluster={cluster},ray.io/node-type=head")
        submitter = max(submitters, key=lambda p: p["metadata"].get("creationTimestamp", ""), default=None)
        return job_info(ray_job, submitter, heads[0] if heads else None, (ns, job_id) in self.stopped)

    async def serve(self, ns: str, svc: str, cluster: str) -> dict:
        cfg = self.serve_configs.get((ns, svc)) or {}
        pods = await self.pods(ns, f"ray.io/cluster={cluster}")
        healthy = bool(pods) and all(_ready(p) for p in pods)
        apps = {}
        for app in (cfg.get("applications") or [])[:100]:
            name = str(app.get("name") or "default")
            deps = {str(d.get("name")): {"name": str(d.get("name")), "status": "HEALTHY" if healthy else "UPDATING"}
                    for d in (app.get("deployments") or [])[:100] if isinstance(d, dict)}
            apps[name] = {"name": name, "status": "RUNNING" if healthy else "DEPLOYING", "message": "simulated",
                          "route_prefix": app.get("route_prefix", "/"), "deployments": deps}
        return {"applications": apps, "deploy_mode": "MULTI_APP"}

    async def handle(self, req: Request) -> Response:
        ns, svc, path = split_target(req)
        path = path.split("?", 1)[0]
        if not ns:
            return _json(404, {"error": "not a head Service address"})
        cluster = await self.cluster_of(ns, svc)
        if cluster is None:
            return _json(404, {"error": f"no head Service {ns}/{svc}"})
        if path.rstrip("/") == "/api/serve/applications":
            if req.method == "PUT":
                if len(self.serve_configs) >= MAX_CLUSTERS and (ns, svc) not in self.serve_configs:
                    return _json(503, {"error": "too many clusters"})
                self.serve_configs[(ns, svc)] = json.loads(bytes(req.body) or b"{}")
                return _json(200, {})
            return _json(200, await self.serve(ns, svc, cluster))
        if not path.startswith("/api/jobs"):
            return _json(404, {"error": "not simulated"})
        rest = path[len("/api/jobs"):].strip("/").split("/")
        if rest == [""]:
            if req.method == "POST":  # HTTPMode: recorded, stays RUNNING until stopped
                body = json.loads(bytes(req.body) or b"{}")
                job_id = str(body.get("submission_id") or f"raysubmit_{len(self.http_jobs)}")
                self.http_jobs[(ns, job_id)] = {"job_id": job_id, "submission_id": job_id,
                                                "entrypoint": str(body.get("entrypoint", "")), "start_time": int(time.time() * 1000)}
                return _json(200, {"job_id": job_id})
            infos = [await self.info(ns, cluster, j) for j in await self.jobs(ns, cluster)]
            return _json(200, [i for i in infos if i])
        job_id = rest[0]
        if req.method == "POST" and rest[1:] == ["stop"]:
            self.stopped.add((ns, job_id))
            return _json(200, {"stopped": True})
        if req.method == "DELETE":
            return _json(200, {"deleted": True})
        job = next((j for j in await self.jobs(ns, cluster) if j["status"].get("jobId") == job_id), None)
        info = await self.info(ns, cluster, job) if job else None
        if info is None:
            return _json(404, {"error": f"job {job_id} does not exist"})
        if rest[1:] == ["logs"]:
            return _json(200, {"logs": ""})
        return _json(200, info)


async def health(req: Request) -> Response:
    if req.path == "/-/healthz":
        return Response(200, [(b"Content-Type", b"text/plain")], b"success")
    return Response(404, [], b"")


async def serve_health_listeners(client: Client, listeners: dict[tuple[str, int], Server], interval: float = 0.5) -> None:
    """Keep a ``/-/healthz`` listener on ``<podIP>:<serve port>`` of each Ready Ray head Pod."""
    while True:
        want: set[tuple[str, int]] = set()
        try:
            pods = await client.request("GET", "/api/v1/pods", params={"labelSelector": "ray.io/node-type=head", "limit": "500"}, timeout=10)
            for p in (pods or {}).get("items", []):
                ip = (p.get("status") or {}).get("podIP", "")
                if not ip.startswith("127.") or not _ready(p):
                    continue  # loopback only
                ports = [pt.get("containerPort") for c in p["spec"]["containers"][:1] for pt in c.get("ports") or [] if pt.get("name") == "serve"]
                want.add((ip, int(ports[0]) if ports else 8000))
        except (ApiError, OSError, KeyError, TypeError, ValueError) as e:
            log.warning("listing head Pods: %s", e)
            want = set(listeners)
        for addr in list(listeners):
            if addr not in want:
                await listeners.pop(addr).close(drain_timeout=1)
        for addr in sorted(want - set(listeners))[: max(0, MAX_CLUSTERS - len(listeners))]:
            s = Server(health, max_body_bytes=1024)
            try:
                await s.start(*addr)
                listeners[addr] = s
            except OSError as e:
                log.warning("listening on %s:%d: %s", *addr, e)
        await rayendpoints.sync_once(client)  # the serve Services' EndpointSlices (see that module)
        await asyncio.sleep(interval)


async def run(kubeconfig: str, port: int, ready_file: str | None) -> None:
    client = await Client.from_kubeconfig(kubeconfig)
    dash = Dashboard(client)
    server = Server(dash.handle, max_body_bytes=MAX_BODY, keepalive_timeout=30)
    bound = await server.start("127.0.0.1", port)
    log.info("simulated Ray dashboard on 127.0.0.1:%d", bound)
    if ready_file:
        with open(ready_file, "w") as fh:
            fh.write(str(bound))
    listeners: dict[tuple[str, int], Server] = {}
    try:
        await serve_health_listeners(client, listeners)
    finally:
        for s in listeners.values():
            await s.close(drain_timeout=1)
        await server.close(drain_timeout=1)
        await client.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kaiwo_ctrl.local.raydashboard", description=__doc__.split("\n\n")[0])
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--port", type=int, required=True, help="dashboard port on 127.0.0.1 (KubeRay's HTTP_PROXY)")
    p.add_argument("--ready-file", help="write the bound port here once listening")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run(args.kubeconfig, args.port, args.ready_file))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
