"""What a screen line at a given width may be (issue 26 items 3 and 5), for the CLI layout tests.

A line fits the terminal's width, or it holds a command to paste, which is one line whatever the
width (the terminal folds it; a copy of it is one command). The command starts with the program
as :func:`amends.cli._hints.command` prints it: ``amends`` when it is on ``PATH``, else the
interpreter's ``python -m amends.cli`` (a fresh clone's ``.venv`` is not on ``PATH``).
"""

from __future__ import annotations

__all__ = ["fits"]


def fits(line: str, width: int) -> bool:
    """Whether ``line`` fits ``width`` columns or is a command to paste."""
    return len(line) <= width or " amends " in f" {line}" or " -m amends.cli " in line
