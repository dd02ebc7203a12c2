"""kaiwo-ctrl: the Kaiwo operator.

The runtime's object diff compares resource quantities by value but knows no
units; the package installs the one quantity parser here, before any
submodule is imported, so the runtime never imports domain code.
"""

from kaiwo_ctrl.quantity import parse_quantity as _parse_quantity
from kaiwo_ctrl.runtime.diff import set_quantity_parser as _set_quantity_parser

_set_quantity_parser(_parse_quantity)
