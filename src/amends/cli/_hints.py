"""Commands the CLI prints for a person to run next, so that each runs as printed, from where it
was printed (issue 26 item 3).

One invocation context per command run (:func:`invoked`): the program as the person can run it
here (``amends`` when the ``amends`` on ``PATH`` is this environment's, else the path it was
started by, e.g. ``.venv/bin/amends`` after ``make demo``), the ``--db`` it was given and the
``--catalog`` flags. :func:`command` builds a hint from it; :func:`complete` does the same to the
commands quoted in a library error's message (written without a CLI in mind: no ``--db``, or a
``--db URL`` placeholder). A hint never names a catalog the log recorded (rule 12): only the
operator's own ``--catalog`` flags are carried over.

Nothing outside :mod:`amends.cli` imports from here.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from .._log import hide_passwords

__all__ = ["DEFAULT_DB", "Invocation", "command", "complete", "current", "invoked", "program"]

DEFAULT_DB = "amends.db"
"""The ``--db`` every log-reading command defaults to; a hint leaves it out."""

_TAKES_DB = frozenset({"show", "undo", "resolve", "recover", "doctor", "serve", "token", "audit"})
_TAKES_CATALOG = frozenset({"undo", "recover", "serve", "audit", "resolve"})


@dataclass(frozen=True)
class Invocation:
    """How this command was run, as far as a printed hint must repeat it."""

    program: str
    """The program, as shell words a person can paste here (``amends``, ``.venv/bin/amends``)."""
    db: str | None = None
    """The ``--db`` this command was given (or defaulted to); ``None`` when it takes none."""
    catalogs: tuple[str, ...] = ()
    """The ``--catalog`` flags this command was given, in order (not the environment's)."""


def program(argv0: str | None = None, executable: str | None = None) -> str:
    """The shell words that run this amends from the current directory.

    ``amends`` when the one ``PATH`` finds is this environment's (it sits beside this Python);
    else the script this process was started as (``.venv/bin/amends``, relative when it lies
    under the current directory); ``python -m amends.cli`` for that form; ``amends`` when the
    CLI was called in-process by another program.
    """
    argv0 = sys.argv[0] if argv0 is None and sys.argv else (argv0 or "")
    executable = executable or sys.executable
    found = shutil.which("amends")
    here = os.path.dirname(os.path.abspath(executable))
    if found and os.path.dirname(os.path.abspath(found)) == here:
        return "amends"
    name = os.path.basename(argv0)
    if argv0 and os.path.abspath(argv0) == os.path.join(os.path.dirname(__file__), "__main__.py"):
        return f"{shlex.quote(executable)} -m amends.cli"
    if name != "amends" or not os.path.exists(argv0):
        return "amends"  # main() called by another program: the installed name
    path = os.path.abspath(argv0)
    rel = os.path.relpath(path)
    if rel.startswith(os.pardir):
        return shlex.quote(path)
    return shlex.quote(rel if os.sep in rel else os.curdir + os.sep + rel)


_CURRENT: ContextVar[Invocation | None] = ContextVar("amends_cli_invocation", default=None)


def current() -> Invocation:
    """This command's invocation (the program alone when none was recorded)."""
    return _CURRENT.get() or Invocation(program())


@contextmanager
def invoked(db: str | None, catalogs: Sequence[str] | None) -> Iterator[Invocation]:
    """Record how this command was run for the hints it prints, while it runs."""
    inv = Invocation(program(), db, tuple(catalogs or ()))
    token = _CURRENT.set(inv)
    try:
        yield inv
    finally:
        _CURRENT.reset(token)


def command(*words: str, db: str | None = None) -> str:
    """``amends WORDS...`` as this person can paste it here: the program as invoked, each word
    quoted for the shell, ``--db`` when it is not the default (``db`` overrides the invocation's)
    and the ``--catalog`` flags when the command takes them."""
    inv = current()
    return inv.program + " " + " ".join(shlex.quote(w) for w in _complete(list(words), inv, db))


def _complete(words: list[str], inv: Invocation, db: str | None) -> list[str]:
    sub = words[0] if words else ""
    db = db if db is not None else inv.db
    if sub in _TAKES_DB and "--db" not in words and db is not None and db != DEFAULT_DB:
        words += ["--db", _without_password(db)]
    if sub in _TAKES_CATALOG and "--catalog" not in words:
        for spec in inv.catalogs:
            words += ["--catalog", spec]
    return words


def _without_password(db: str) -> str:
    # rule 11: a printed hint never repeats a password (a doctor's output gets pasted into
    # tickets); such a hint runs with the password from PGPASSWORD or ~/.pgpass instead. Not
    # urlsplit: it raises on some URLs that still hold a password ("...@[::1/db").
    return hide_passwords(db)


# a command quoted in a message: `amends SUB ...` (backticks mark where it ends)
_QUOTED = re.compile(r"`amends ([a-z][^`]*)`")


def complete(message: str) -> str:
    """``message`` with each quoted ``amends ...`` command made runnable as :func:`command`
    makes a hint: this program, a ``--db URL`` placeholder replaced by the real one, ``--db`` and
    ``--catalog`` carried over. A command with other placeholders (``SAGA``, ``T``) is left as
    the documentation form it is."""

    def one(m: re.Match[str]) -> str:
        try:
            words = shlex.split(m.group(1))
        except ValueError:
            return m.group()
        if "--db" in words and current().db is not None:
            i = words.index("--db")
            if i + 1 < len(words) and words[i + 1] == "URL":
                del words[i : i + 2]  # the placeholder: this command's own log instead
        return f"`{command(*words)}`"

    return _QUOTED.sub(one, message)
