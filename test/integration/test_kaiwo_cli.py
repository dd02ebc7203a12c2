"""The `kaiwo` command line, run as a subprocess against the real API server.

The workload controllers run in-process (as ``kaiwo-ctrl run`` wires them);
the CLI runs as the installed ``kaiwo`` console script, through asyncio so the
operator keeps reconciling while a command waits. Kueue and the Job controller
are played by the test (admitted Workloads, Job status patches), as in the
other workload tests. Logs and missing CRDs use a second, simulated control
plane with kwok Nodes and no Kaiwo CRDs at first.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from kaiwo_ctrl.local.controlplane import free_port
from support.planes import own_plane
from test_workloads_support import (  # noqa: F401 - fixtures
    admit,
    complete_job,
    conditions,
    eventually,
    fail_job,
    get,
    gpu_nodes,
    job_url,
    kaiwo_url,
    operator,
    status_of,
    wait_object,
    wait_status,
)
from support.admin import admin_http

pytestmark = pytest.mark.integration

KAIWO_BIN = Path(sys.executable).parent / "kaiwo"
ROOT = Path(__file__).resolve().parents[2]
ALICE = "Alice.Smith@Example.com"


@dataclass
class Run:
    rc: int
    out: str
    err: str


async def kaiwo(kubeconfig: Path | str, *args: str, home: Path, input: str | None = None, timeout: float = 120,  # noqa: A002 - named as in subprocess.run
                extra_env: dict | None = None) -> Run:
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KAIWOCONFIG")}
    env.update({"HOME": str(home), "NO_COLOR": "1", **(extra_env or {})})
    proc = await asyncio.create_subprocess_exec(
        str(KAIWO_BIN), *args, "--kubeconfig", str(kubeconfig), env=env,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(input.encode() if input is not None else b""), timeout)
    return Run(proc.returncode, out.decode(), err.decode())


@pytest.fixture
def home(tmp_path, namespace) -> Path:
    """A HOME whose ~/.config/kaiwo/kaiwoconfig.yaml names Alice, the test namespace and queue ``kaiwo``."""
    cfg = tmp_path / "home" / ".config" / "kaiwo" / "kaiwoconfig.yaml"
    cfg.parent.mkdir(parents=True)
    cfg.write_text(yaml.safe_dump({"user": ALICE, "namespace": namespace, "clusterQueue": "kaiwo", "image": "img:user"}))
    return tmp_path / "home"


@pytest.fixture
def kc(control_plane) -> Path:
    return control_plane.kubeconfig


def kaiwojob(admin, ns: str, name: str) -> dict | None:
    return get(admin, kaiwo_url("KaiwoJob", ns, name))


# ----------------------------------------------------------------------------- submit


async def test_submit_from_flags_sets_every_field_and_dry_run_creates_nothing(operator, admin, namespace, kc, home, tmp_path):
    (tmp_path / "vars.env").write_text("FROM_FILE=yes\nSHARED=file\n")
    flags = ["submit", "--name", "flags", "-i", "rocm/pytorch:2", "--gpus", "16", "--gpus-per-replica", "8",
             "--replicas", "2", "--gpu-vendor", "nvidia", "--queue", "kaiwo", "--priority-class", "high",
             "--duration", "2h", "--storage", "10Gi:fast", "-e", "SHARED=flag", "-e", "LR=0.1",
             "--env-file", str(tmp_path / "vars.env"), "--entrypoint", "python train.py", "--label", "team=vision"]
    dry = await kaiwo(kc, *flags, "--dry-run", home=home)
    assert dry.rc == 0, dry.err
    printed = yaml.safe_load(dry.out)
    assert printed["metadata"]["name"] == "flags" and printed["spec"]["gpus"] == 16
    assert admin.get(kaiwo_url("KaiwoJob", namespace)).json()["items"] == []

    r = await kaiwo(kc, *flags, home=home)
    assert r.rc == 0, r.err
    assert r.out.strip() == f"kaiwojob/flags created in namespace {namespace}"
    kj = kaiwojob(admin, namespace, "flags")
    assert kj["metadata"]["labels"] == {"kaiwo.silogen.ai/user": "alice.smith-example.com", "team": "vision"}
    spec = kj["spec"]
    want = {
        "user": ALICE, "image": "rocm/pytorch:2", "gpus": 16, "gpusPerReplica": 8, "replicas": 2,
        "gpuVendor": "nvidia", "clusterQueue": "kaiwo", "priorityClass": "high", "duration": "2h",
        "entrypoint": "python train.py", "ray": False,
        "env": [{"name": "FROM_FILE", "value": "yes"}, {"name": "SHARED", "value": "flag"}, {"name": "LR", "value": "0.1"}],
    }
    assert {k: spec.get(k) for k in want} == want
    assert spec["storage"]["storageEnabled"] is True and spec["storage"]["storageClassName"] == "fast"
    assert spec["storage"]["data"]["storageSize"] == "10Gi"
    # the operator picks it up (a status with conditions appears)
    await eventually(lambda: (status_of(admin, "KaiwoJob", namespace, "flags").get("conditions")), what="reconciled")


async def test_submit_from_file_and_directory_follows_the_precedence(operator, admin, namespace, kc, home, tmp_path):
    wd = tmp_path / "exp"
    wd.mkdir()
    (wd / "kaiwoconfig.yaml").write_text("user: dir.user@example.com\nimage: img:dir\nclusterQueue: dirq\n")
    (wd / "entrypoint").write_text("#!/usr/bin/env python\nprint('hi')\n")
    (wd / "env").write_text("A=dir\nB=dir\n")
    manifest = tmp_path / "job.yaml"
    manifest.write_text(yaml.safe_dump({
        "apiVersion": "kaiwo.silogen.ai/v1alpha1", "kind": "KaiwoJob",
        "metadata": {"name": "from-file", "labels": {"origin": "file"}},
        "spec": {"image": "img:file", "env": [{"name": "B", "value": "file"}], "gpus": 0},
    }))
    # directory only: dir beats the user file (user, image, queue); namespace comes from the user file
    r = await kaiwo(kc, "submit", "-p", str(wd), "--name", "from-dir", home=home)
    assert r.rc == 0, r.err
    kj = kaiwojob(admin, namespace, "from-dir")
    assert kj["spec"]["user"] == "dir.user@example.com" and kj["spec"]["image"] == "img:dir"
    assert kj["spec"]["clusterQueue"] == "dirq" and kj["spec"]["entrypoint"] == "#!/usr/bin/env python\nprint('hi')\n"
    assert kj["spec"]["env"] == [{"name": "A", "value": "dir"}, {"name": "B", "value": "dir"}]
    assert kj["metadata"]["labels"]["kaiwo.silogen.ai/user"] == "dir.user-example.com"
    # file + directory + flags: flags > file > directory > user file
    r = await kaiwo(kc, "submit", "-f", str(manifest), "-p", str(wd), "--queue", "kaiwo", "-e", "C=flag", home=home)
    assert r.rc == 0, r.err
    kj = kaiwojob(admin, namespace, "from-file")
    assert kj["metadata"]["labels"] == {"origin": "file", "kaiwo.silogen.ai/user": "dir.user-example.com"}
    assert kj["spec"]["image"] == "img:file" and kj["spec"]["clusterQueue"] == "kaiwo"
    assert kj["spec"]["env"] == [{"name": "A", "value": "dir"}, {"name": "B", "value": "file"}, {"name": "C", "value": "flag"}]
    # no name: generated from the user and a short id
    r = await kaiwo(kc, "submit", "-i", "busybox", home=home)
    assert r.rc == 0, r.err
    name = r.out.split()[0].split("/", 1)[1]
    assert name.startswith("alice-smith-") and len(name) == len("alice-smith-") + 6
    assert kaiwojob(admin, namespace, name)["spec"]["image"] == "busybox"


async def _wait_submit(kc, home, name: str) -> asyncio.Task:
    return asyncio.create_task(kaiwo(kc, "submit", "--name", name, "-i", "busybox", "--entrypoint", "echo hi",
                                     "--wait", "--until", "done", home=home, timeout=180))


async def test_wait_reports_complete(operator, admin, namespace, kc, home):
    task = await _wait_submit(kc, home, "waits")
    job = await wait_object(admin, job_url(namespace, "waits"), what="child Job")
    admit(admin, namespace, job)
    await wait_status(admin, "KaiwoJob", namespace, "waits", "PENDING")
    complete_job(admin, job_url(namespace, "waits"))
    r = await task
    assert r.rc == 0, r.err
    assert r.out.splitlines()[-1] == "kaiwojob/waits COMPLETE"
    assert "kaiwojob/waits: PENDING" in r.err  # progress lines on stderr


async def test_wait_reports_failed_with_the_message_and_exits_1(operator, admin, namespace, kc, home):
    task = await _wait_submit(kc, home, "breaks")
    job = await wait_object(admin, job_url(namespace, "breaks"), what="child Job")
    admit(admin, namespace, job)
    fail_job(admin, job_url(namespace, "breaks"))
    r = await task
    assert r.rc == 1, (r.out, r.err)
    assert "kaiwojob/breaks FAILED" in r.err
    st = status_of(admin, "KaiwoJob", namespace, "breaks")
    for c in st.get("conditions") or []:
        if c["status"] != "True" and c.get("message"):
            assert f"{c['type']}: {c['message']}" in r.err


# ----------------------------------------------------------------------------- list / status


async def test_list_filters_by_user_and_status_and_prints_json(operator, admin, namespace, kc, home, gpu_nodes):
    for args in (["--name", "a-one"], ["--name", "a-big", "--gpus", "4096"], ["--name", "b-one", "--user", "bob@x.io"]):
        r = await kaiwo(kc, "submit", "-i", "busybox", *args, home=home)
        assert r.rc == 0, r.err
    await wait_status(admin, "KaiwoJob", namespace, "a-one", "PENDING")
    await wait_status(admin, "KaiwoJob", namespace, "a-big", "ERROR")
    await wait_status(admin, "KaiwoJob", namespace, "b-one", "PENDING")

    def names(out: str) -> list[str]:
        return [line.split()[0] for line in out.splitlines()[1:]]

    mine = await kaiwo(kc, "list", home=home)
    assert mine.rc == 0, mine.err
    header = mine.out.splitlines()[0].split()
    assert header == ["NAME", "KIND", "STATUS", "QUEUE", "GPUS", "AGE", "DURATION"]
    assert sorted(names(mine.out)) == ["a-big", "a-one"]
    row = next(line.split() for line in mine.out.splitlines() if line.startswith("a-big"))
    assert row[1:5] == ["KaiwoJob", "ERROR", "kaiwo", "4096"]
    assert names((await kaiwo(kc, "list", "--user", "BOB@x.io", home=home)).out) == ["b-one"]
    assert sorted(names((await kaiwo(kc, "list", "--all-users", home=home)).out)) == ["a-big", "a-one", "b-one"]
    assert names((await kaiwo(kc, "list", "--status", "error", home=home)).out) == ["a-big"]
    assert sorted(names((await kaiwo(kc, "list", "--all-users", "--status", "PENDING", home=home)).out)) == ["a-one", "b-one"]
    js = await kaiwo(kc, "list", "--all-users", "-o", "json", home=home)
    doc = json.loads(js.out)
    assert doc["kind"] == "List" and sorted(i["metadata"]["name"] for i in doc["items"]) == ["a-big", "a-one", "b-one"]
    assert {i["kind"] for i in doc["items"]} == {"KaiwoJob"}
    every = await kaiwo(kc, "list", "-A", "--all-users", "-o", "wide", home=home)
    assert every.out.splitlines()[0].split()[:2] == ["NAMESPACE", "NAME"]
    assert f"{namespace}   b-one" in every.out and "bob@x.io" in every.out
    empty = await kaiwo(kc, "list", "--user", "nobody@x.io", home=home)
    assert (empty.rc, empty.out) == (0, "") and "No workloads found" in empty.err


async def test_status_shows_conditions_admission_objects_and_events(operator, admin, namespace, kc, home):
    r = await kaiwo(kc, "submit", "--name", "shown", "-i", "busybox", home=home)
    assert r.rc == 0, r.err
    job = await wait_object(admin, job_url(namespace, "shown"), what="child Job")
    admit(admin, namespace, job)
    await eventually(lambda: conditions(status_of(admin, "KaiwoJob", namespace, "shown")).get("Admitted", ("",))[0] == "True",
                     what="Admitted")
    await eventually(lambda: [e for e in admin.get(f"/api/v1/namespaces/{namespace}/events").json()["items"]
                              if e["reason"] == "ResourceCreated"], what="event")
    out = (await kaiwo(kc, "status", "shown", home=home)).out
    assert "Status:     PENDING" in out and f"User:       {ALICE}" in out
    st = status_of(admin, "KaiwoJob", namespace, "shown")
    for c in st["conditions"]:
        assert any(line.split()[:3] == [c["type"], c["status"], c["reason"]] and c["message"] in line
                   for line in out.splitlines()), c
    assert "Kueue workload:" in out and any(line.split()[1:3] == ["kaiwo", "True"] for line in out.splitlines()
                                            if line.startswith("job-shown"))
    assert any(line.split()[:3] == ["Job", "shown", "Suspended"] for line in out.splitlines())
    assert "Events:" in out and "ResourceCreated" in out and "kaiwojob/shown" in out
    as_json = json.loads((await kaiwo(kc, "status", "job/shown", "-o", "json", home=home)).out)
    assert as_json["metadata"]["uid"] == job["metadata"]["ownerReferences"][0]["uid"]


async def test_status_prints_escape_sequences_of_a_tenants_event_inert(admin, namespace, kc, home):
    """Attack: a tenant who may create Events writes terminal control sequences (set the
    window title, clear the screen, a C1 CSI, a bidi override) into one about a workload;
    the admin's `kaiwo status` prints them as visible text, and the terminal gets no control
    character but newlines."""
    r = await kaiwo(kc, "submit", "--name", "evil", "-i", "busybox", home=home)
    assert r.rc == 0, r.err
    uid = kaiwojob(admin, namespace, "evil")["metadata"]["uid"]
    payload = "\x1b]0;pwned\x07\x1b[2J\x9b31mred\u202eevil\rover"
    event = {"metadata": {"name": "evil.1", "namespace": namespace},
             "involvedObject": {"kind": "KaiwoJob", "apiVersion": "kaiwo.silogen.ai/v1alpha1", "name": "evil",
                                "namespace": namespace, "uid": uid},
             "reason": "Evil\x1b[8m", "message": payload, "type": "Warning", "count": 1,
             "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:00:00Z",
             "source": {"component": "tenant"}}
    r2 = admin.post(f"/api/v1/namespaces/{namespace}/events", json=event)
    assert r2.status_code == 201, r2.text
    run = await kaiwo(kc, "status", "evil", home=home)
    assert run.rc == 0, run.err
    out = run.out
    assert "\\x1b]0;pwned\\x07\\x1b[2J\\x9b31mred\\u202eevil\\x0dover" in out  # shown, escaped
    assert "Evil\\x1b[8m" in out
    assert not [c for c in out if (ord(c) < 0x20 and c != "\n") or 0x7f <= ord(c) <= 0x9f or c == "\u202e"]


# ----------------------------------------------------------------------------- delete and errors


async def test_delete_asks_first(operator, admin, namespace, kc, home):
    for name in ("keep", "drop"):
        assert (await kaiwo(kc, "submit", "--name", name, "-i", "busybox", home=home)).rc == 0
    no = await kaiwo(kc, "delete", "keep", home=home, input="n\n")
    assert no.rc == 1 and "aborted" in no.err and "Delete kaiwojob/keep" in no.err
    assert kaiwojob(admin, namespace, "keep") is not None
    yes = await kaiwo(kc, "delete", "keep", home=home, input="y\n")
    assert (yes.rc, yes.out.strip()) == (0, "kaiwojob/keep deleted")
    forced = await kaiwo(kc, "delete", "-y", "drop", home=home)
    assert forced.rc == 0
    for name in ("keep", "drop"):
        await eventually(lambda n=name: kaiwojob(admin, namespace, n) is None, what=f"{name} gone")


async def test_error_exit_codes(control_plane, namespace, kc, home, tmp_path):
    for args in (["status", "nope"], ["logs", "nope"], ["delete", "-y", "nope"]):
        r = await kaiwo(kc, *args, home=home)
        assert r.rc == 6, (args, r.err)
        assert f"no KaiwoJob or KaiwoService named 'nope' in namespace '{namespace}'" in r.err
    # no cluster: a kubeconfig pointing at a port nobody listens on, and no kubeconfig at all
    dead = yaml.safe_load(Path(kc).read_text())
    dead["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{free_port()}"
    (tmp_path / "dead").write_text(yaml.safe_dump(dead))
    r = await kaiwo(tmp_path / "dead", "list", home=home)
    assert r.rc == 3 and "cannot reach the cluster at https://127.0.0.1:" in r.err
    r = await kaiwo(tmp_path / "missing", "list", home=home)
    assert r.rc == 3 and "does not exist" in r.err
    # permission denied: an authenticated user with no RBAC at all
    nobody = control_plane.add_user("kaiwo-cli-nobody")
    r = await kaiwo(nobody, "list", home=home)
    assert r.rc == 5 and f"you may not list kaiwojobs.kaiwo.silogen.ai in namespace '{namespace}'" in r.err
    r = await kaiwo(nobody, "submit", "-i", "busybox", home=home)
    assert r.rc == 5 and "you may not create kaiwojobs.kaiwo.silogen.ai" in r.err
    # bad input never reaches the cluster
    r = await kaiwo(kc, "submit", "--storage", "lots", home=home)
    assert r.rc == 2 and "--storage 'lots'" in r.err


# ----------------------------------------------------------------------------- simulated cluster


@pytest.fixture(scope="module")
def sim_plane(tmp_path_factory):
    """etcd + apiserver + kwok, without any CRD installed at first."""
    with own_plane(tmp_path_factory, "cli-sim", install_crds=False, components=("kwok",)) as plane:
        yield plane


async def test_missing_crds_then_logs_on_kwok_pods(sim_plane, tmp_path):
    home = tmp_path / "home"
    (home / ".config" / "kaiwo").mkdir(parents=True)
    (home / ".config" / "kaiwo" / "kaiwoconfig.yaml").write_text(f"user: {ALICE}\n")
    kc = sim_plane.kubeconfig
    r = await kaiwo(kc, "list", home=home)
    assert r.rc == 4 and "Kaiwo CRDs are not installed" in r.err and "kubectl apply -k config/default" in r.err

    own = (ROOT / "config" / "crd").resolve()
    sim_plane.install_crds([f for f in sim_plane.crd_files() if own in f.resolve().parents])
    r = await kaiwo(kc, "submit", "--name", "sim", "-i", "busybox", home=home)
    assert r.rc == 0, r.err
    r = await kaiwo(kc, "logs", "sim", home=home)
    assert r.rc == 7 and "kaiwojob/sim has no pods yet (status NEW)" in r.err

    with admin_http(sim_plane) as h:
        uid = h.get("/apis/kaiwo.silogen.ai/v1alpha1/namespaces/default/kaiwojobs/sim").json()["metadata"]["uid"]
        node = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": "sim-node", "annotations": {"kwok.x-k8s.io/node": "fake"}},
                "status": {"allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"},
                           "capacity": {"cpu": "32", "memory": "256Gi", "pods": "110"}}}
        assert h.post("/api/v1/nodes", json=node).status_code == 201
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "sim-pod", "labels": {"kaiwo.silogen.ai/run-id": uid}},
               "spec": {"nodeName": "sim-node", "containers": [{"name": "main", "image": "busybox"}]}}
        assert h.post("/api/v1/namespaces/default/pods", json=pod).status_code == 201
        await eventually(lambda: h.get("/api/v1/namespaces/default/pods/sim-pod").json()
                         .get("status", {}).get("phase") == "Running", timeout=60, what="kwok runs the pod")
    # the simulated plane's kwok serves every container's log from one file (kaiwo_ctrl.local.kwokstreams)
    r = await kaiwo(kc, "logs", "sim", home=home)
    assert r.rc == 0, (r.out, r.err)
    assert r.out.splitlines()[0] == "[sim-pod] simulated container on a kwok node: no process runs here"
    r = await kaiwo(kc, "logs", "sim", "--pod", "other", home=home)
    assert r.rc == 6 and "no pod named 'other'" in r.err
    r = await kaiwo(kc, "status", "sim", home=home)
    assert r.rc == 0 and any(line.split()[:3] == ["Pod", "sim-pod", "Running"] for line in r.out.splitlines())
