"""Loaded for both suites (test/ and e2e/).

Tests stop the command lines they start (``kaiwo logs -f``, ``kaiwo port-forward``,
``hack/run-local.sh``) with SIGINT, as a user's Ctrl-C would. A suite started in the
background by a shell without job control (``cmd &`` in a script, ``nohup``) has SIGINT
ignored, and its children inherit that, so they would never stop. A handler is reset to
the default across exec where an ignored signal is not: the suite installs Python's own
handler when it finds SIGINT ignored.
"""

from __future__ import annotations

import signal


def pytest_configure(config) -> None:
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
