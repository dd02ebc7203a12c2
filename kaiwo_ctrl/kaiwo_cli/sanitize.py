"""Server-supplied text made inert before it reaches a terminal.

Anyone who can write an Event, a condition message, a label or a name can put
terminal control sequences in it (ESC sequences that move the cursor, rewrite
the screen, set the window title or a clipboard, hide text); an admin running
``kaiwo status`` would have them executed by their terminal. Every string the
CLI prints from the server goes through :func:`inert`: C0 and C1 control
characters, DEL and the Unicode bidirectional overrides are shown as visible
escapes (``ESC`` becomes ``\\x1b``). Newline and tab stay only where the layout
takes them (``layout=True``); in a table cell they become spaces.
``kaiwo exec`` and ``kaiwo logs`` stay raw, as with kubectl.

:class:`Styled` marks text the CLI itself coloured (its inner text already
inert), so the table does not escape its own colour codes.
"""

from __future__ import annotations

import re

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_LAYOUT = "\n\t"


class Styled(str):
    """Text the CLI built (colour codes of its own around inert text)."""


def _escape(m: re.Match[str]) -> str:
    c = m.group()
    return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"


def inert(text: object, *, layout: bool = False) -> str:
    """``text`` with its control characters shown, not executed. ``layout``:
    newlines and tabs are kept; otherwise they become spaces (one line)."""
    if isinstance(text, Styled):
        return text
    s = text if isinstance(text, str) else str(text)
    if layout:
        return _CONTROL.sub(lambda m: m.group() if m.group() in _LAYOUT else _escape(m), s)
    return _CONTROL.sub(lambda m: " " if m.group() in _LAYOUT else _escape(m), s)
