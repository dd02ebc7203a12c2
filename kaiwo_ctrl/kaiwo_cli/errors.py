"""Exit codes and the one exception type commands raise for a clean exit."""

from __future__ import annotations

#: Everything worked (and, with ``--wait``, the workload came up or completed).
OK = 0
#: The workload FAILED or went to ERROR, or the API refused the request.
FAILED = 1
#: Bad command line or input files (argparse uses 2 as well).
USAGE = 2
#: No cluster: no kubeconfig, or the API server cannot be reached.
NO_CLUSTER = 3
#: The Kaiwo CRDs are not installed in the cluster.
NO_CRDS = 4
#: The API server refused the credentials or the permission (401/403).
FORBIDDEN = 5
#: The named workload does not exist.
NOT_FOUND = 6
#: No pod of the workload has logs to show (not started yet, or no kubelet serves them).
NO_LOGS = 7
#: ``--wait --timeout`` ran out before the workload ran or ended.
TIMEOUT = 8
#: exec / port-forward: the pod is not running (yet), so nothing can be reached in it.
NOT_RUNNING = 9
#: Interrupted with Ctrl-C.
INTERRUPTED = 130


class CliError(Exception):
    """A failure explained to the user: ``message`` goes to stderr, ``code`` is the exit status."""

    def __init__(self, message: str, code: int = FAILED) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
