"""Logs, exec and port-forward on the simulated cluster's kwok Nodes.

kwok serves the kubelet's streaming API (``containerLogs``, ``exec``,
``portForward``) for the Nodes it manages, from rules in its configuration:

* ``ClusterLogs``: every container's log is one CRI-format file in the plane's
  directory (``kwok/container.log``), followed as it grows, so
  ``kaiwo logs -f`` shows lines appended to it;
* ``ClusterExec``: a command exec'd into a simulated container runs on this
  machine, in ``kwok/exec`` (there is no container); as user nobody, in /tmp,
  when the plane runs as root;
* ``ClusterPortForward``: pod port P reaches ``127.0.0.1:L`` for each
  ``P -> L`` of :data:`DEFAULT_FORWARDS` (or the ``forwards`` given).

The API server reaches kwok the way it reaches a kubelet: the Nodes' InternalIP
(127.0.0.1) and kubelet port (kwok's), over TLS checked against the serving CA,
with a client certificate of its own.

kwok's kubelet endpoint authenticates nobody: while it runs, any user of this
machine who can reach 127.0.0.1 can run commands through it as the user who
started the plane. ``exec=False`` (``local up --simulate --no-sim-exec``) leaves
the exec rule out on shared machines.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from kaiwo_ctrl.runtime.net.certs import TinyCA

#: Pod ports forwarded to the same port on 127.0.0.1 unless told otherwise
#: (HTTP, model servers, Ray's dashboard, Jupyter).
DEFAULT_FORWARDS: Mapping[int, int] = {80: 80, 8000: 8000, 8080: 8080, 8265: 8265, 8888: 8888}
API = "kwok.x-k8s.io/v1alpha1"
LOG_FILE = "container.log"
#: The user and group exec'd commands run as when the plane runs as root.
NOBODY = 65534


def cri_line(text: str, stream: str = "stdout", when: dt.datetime | None = None) -> str:
    """One line of the CRI log format the kubelet (and kwok) read: time, stream, tag F(ull), text."""
    when = when or dt.datetime.now(dt.UTC)
    return f"{when.strftime('%Y-%m-%dT%H:%M:%S.%f')}000Z {stream} F {text}\n"


def write_certs(certs: Path) -> None:
    """kwok's serving certificate (signed by the serving CA) and the API server's kubelet client pair."""
    if (certs / "kwok.crt").exists():
        return
    serving = TinyCA.from_pem((certs / "serving-ca.crt").read_bytes(), (certs / "serving-ca.key").read_bytes())
    serving.issue("kwok", server=True, dns=("localhost",), ips=("127.0.0.1",)).write(certs / "kwok.crt", certs / "kwok.key")
    # kwok checks no client certificate; the API server still presents one, as it does to a kubelet
    TinyCA("kubelet-client-ca").issue("kube-apiserver-kubelet-client", ("system:masters",)).write(
        certs / "kubelet-client.crt", certs / "kubelet-client.key")


def apiserver_args(certs: Path) -> list[str]:
    """kube-apiserver flags for reaching kwok's kubelet endpoint."""
    return [
        f"--kubelet-client-certificate={certs / 'kubelet-client.crt'}",
        f"--kubelet-client-key={certs / 'kubelet-client.key'}",
        f"--kubelet-certificate-authority={certs / 'serving-ca.crt'}",
        "--kubelet-preferred-address-types=InternalIP",
    ]


def rules(directory: Path, *, forwards: Mapping[int, int] | None = None, exec_: bool = True,
          root: bool | None = None) -> list[dict[str, Any]]:
    """The kwok ClusterLogs / ClusterExec / ClusterPortForward documents for every Pod.

    ``root``: whether kwok runs as root (default: whether this process does)."""
    root = os.geteuid() == 0 if root is None else root
    work = directory / "exec"
    work.mkdir(parents=True, exist_ok=True)
    docs: list[dict[str, Any]] = [
        {"apiVersion": API, "kind": "ClusterLogs", "metadata": {"name": "simulated-logs"},
         "spec": {"logs": [{"logsFile": str(directory / LOG_FILE), "follow": True}]}},
        {"apiVersion": API, "kind": "ClusterPortForward", "metadata": {"name": "loopback"},
         "spec": {"forwards": [{"ports": [pod_port], "target": {"address": "127.0.0.1", "port": local}}
                               for pod_port, local in sorted((DEFAULT_FORWARDS if forwards is None else forwards).items())]}},
    ]
    if exec_:
        local: dict[str, Any] = {"workDir": str(work), "envs": [{"name": "KWOK_SIMULATED", "value": "true"}]}
        if root:
            # a plane started as root would hand out root shells: commands run as nobody, in /tmp
            # (the plane's own directory is not theirs to enter)
            local.update(workDir="/tmp", securityContext={"runAsUser": NOBODY, "runAsGroup": NOBODY})
        docs.append({"apiVersion": API, "kind": "ClusterExec", "metadata": {"name": "local"},
                     "spec": {"execs": [{"local": local}]}})
    return docs


def write_config(directory: Path, stages: Path, *, forwards: Mapping[int, int] | None = None,
                 exec_: bool = True) -> Path:
    """kwok's configuration: its stages followed by the streaming rules; a first log line."""
    directory.mkdir(parents=True, exist_ok=True)
    log = directory / LOG_FILE
    if not log.exists():
        log.write_text(cri_line("simulated container on a kwok node: no process runs here")
                       + cri_line(f"append CRI-format lines to {log} and `kaiwo logs -f` shows them"))
    cfg = directory / "kwok.yaml"
    text = stages.read_text().rstrip()
    if not text.endswith("---"):
        text += "\n---"
    cfg.write_text(text + "\n" + yaml.safe_dump_all(rules(directory, forwards=forwards, exec_=exec_)))
    return cfg


def kwok_args(certs: Path, port: int) -> list[str]:
    """kwok flags: its kubelet endpoint on 127.0.0.1:``port`` over TLS, Nodes at 127.0.0.1:``port``."""
    return [
        f"--server-address=127.0.0.1:{port}",
        "--node-ip=127.0.0.1",
        f"--node-port={port}",
        f"--tls-cert-file={certs / 'kwok.crt'}",
        f"--tls-private-key-file={certs / 'kwok.key'}",
    ]
