"""Server-supplied strings reach the terminal inert: control characters shown, not executed."""

from __future__ import annotations

from kaiwo_ctrl.kaiwo_cli.output import paint, table
from kaiwo_ctrl.kaiwo_cli.sanitize import Styled, inert


def test_controls_are_shown_and_layout_characters_kept_only_where_asked():
    assert inert("\x1b]0;t\x07\x9b2J\u202ex\x7f") == "\\x1b]0;t\\x07\\x9b2J\\u202ex\\x7f"
    assert inert("a\nb\tc\rd") == "a b c\\x0dd"
    assert inert("a\nb\tc\rd", layout=True) == "a\nb\tc\\x0dd"
    assert inert(inert("\x1b")) == "\\x1b"  # idempotent
    assert inert(Styled("\x1b[1mok\x1b[0m")) == "\x1b[1mok\x1b[0m"  # our own colour is kept


def test_table_cells_are_inert_and_our_colour_survives(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")

    class Tty:
        def isatty(self) -> bool:
            return True

    red = paint("FAILED\x1b[8m", "red", Tty())  # type: ignore[arg-type]
    assert isinstance(red, Styled) and red == "\x1b[31mFAILED\\x1b[8m\x1b[0m"
    out = table(["name", "status", "message"], [["job\x1b[2J", red, "line1\nline2"]])
    assert "job\\x1b[2J" in out and "line1 line2" in out and "\x1b[31m" in out
    assert [c for c in out if c == "\x1b"] == ["\x1b", "\x1b"]  # only our colour's two
