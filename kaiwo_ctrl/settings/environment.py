"""The environment settings of the operator's controllers, read here.

Not the only reader of the environment: ``cli.py``, ``serving/command.py``,
``monitoring`` (its loops' endpoints), the runtime (kubeconfig, process loop)
and the separate programs (``kaiwo_cli``, ``download``, ``local``) read theirs.

Builders never read the environment: the values below are read once by the
wiring (``setup`` functions called from ``cli.py``) and passed in, e.g. on the
workloads' ``World``. ``environ`` defaults to the process environment.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

#: The operator's own image: the model-download Jobs and the Model loader run it.
IMAGE_ENV = "KAIWO_CTRL_IMAGE"
DEFAULT_IMAGE = "ghcr.io/silogen/kaiwo-ctrl:latest"

#: Wall-clock limit of a download Job (``activeDeadlineSeconds``); generous,
#: since models can be hundreds of GiB.
DOWNLOAD_DEADLINE_ENV = "KAIWO_DOWNLOAD_DEADLINE_SECONDS"
DEFAULT_DOWNLOAD_DEADLINE_SECONDS = 24 * 3600


def operator_image(environ: Mapping[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    return env.get(IMAGE_ENV) or DEFAULT_IMAGE


def download_deadline_seconds(environ: Mapping[str, str] | None = None) -> int:
    """A positive whole number of seconds; anything else means the default."""
    env = os.environ if environ is None else environ
    try:
        value = int(env.get(DOWNLOAD_DEADLINE_ENV, DEFAULT_DOWNLOAD_DEADLINE_SECONDS))
    except ValueError:
        return DEFAULT_DOWNLOAD_DEADLINE_SECONDS
    return value if value > 0 else DEFAULT_DOWNLOAD_DEADLINE_SECONDS
