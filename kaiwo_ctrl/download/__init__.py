"""``kaiwo-ctrl download``: the program the workload download Job runs.

Usage::

    kaiwo-ctrl download --config FILE [--data-dir DIR] [--hf-dir DIR]
                        [--parallel N] [--retries N] [--retry-delay S] [--log-level LEVEL]
    python -m kaiwo_ctrl.download ...        # same program

FILE is the document described in :mod:`kaiwo_ctrl.download.config`
(:class:`~kaiwo_ctrl.download.config.DownloadConfig`, the single definition of
the format, also used by the reconciler to write the download ConfigMap).
Objects from S3 / GCS / Azure Blob and Git checkouts are written under the data
directory (``--data-dir``, else the config's ``downloadRoot``, else
``/workload``); Hugging Face repositories go into the HF cache layout under the
HF directory (``--hf-dir``, else ``hfHome``, else ``$HF_HOME``, else
``/hf_cache``), i.e. ``<hf-dir>/hub/models--org--name/...``.

Behaviour:

* Transfers run in parallel: at most ``--parallel`` files at a time (default 8)
  across S3/GCS/Azure/Git/per-file HF tasks; a whole-repository Hugging Face
  snapshot runs as one task that uses its own pool of the same size.
* Each file is written to a hidden temporary name next to its destination
  (``.<name>.kaiwo-partial-<random>``) and renamed into place only once
  complete; leftovers of a killed run are removed on the next run. A
  destination that already exists with the source's size is skipped.
  Git checkouts are assembled in a temporary directory and swapped in.
* Transient failures (connection errors, 5xx, throttling, interrupted bodies)
  are retried per file with capped exponential backoff and jitter.
* Logs are JSON lines on stderr: ``start``, ``file_start``, ``progress``
  (bytes, total, rate), ``file_done`` / ``file_skipped``, ``retry``,
  ``item_failed``, and a final ``done`` or ``failed``. Secret values read from
  the mounted files (and ``HF_TOKEN`` / AWS secrets from the environment) are
  replaced by ``***`` in every line; secrets are never put in process
  arguments (Git credentials go through a ``GIT_ASKPASS`` helper that reads the
  mounted files).

Exit codes (the first failing item decides; its name is in the ``failed`` line):

====  =====================================================================
0     everything downloaded (or already present)
1     unexpected/other permanent failure (e.g. a server answered 400, local I/O error)
2     bad invocation or configuration: unreadable/invalid config file, a
      targetPath escaping the destination, a secret file that is not mounted,
      a source library that is not installed
3     authentication/authorization failure (credentials rejected)
4     not found: bucket/container, object, prefix with no objects, Git
      repository/branch/commit/path, Hugging Face repository/file
5     transient failure that persisted after all retries (server unreachable,
      transfer interrupted)
====  =====================================================================
"""

from .transfer import ExitCode

__all__ = ["ExitCode"]
