"""Who may read a SQLite saga log's files on disk (rule 11: a saga log is for its owner only).

Read by ``amends doctor``; it only looks at file modes and never opens the log.
"""

from __future__ import annotations

import os
import stat

__all__ = ["file_permission_problems"]


def file_permission_problems(path: str | os.PathLike[str]) -> list[str]:
    """What is wrong with the permissions of a SQLite log and its -wal/-shm files (rule 11).

    Returns one sentence per file that others than its owner may read or write, naming the
    file, its mode and the fix; empty when all is well (or for ``:memory:``/a URL of a server).
    """
    text = os.fspath(path)
    for prefix in ("sqlite:///", "sqlite://"):
        if text.startswith(prefix):
            text = text[len(prefix) :]
            break
    if not text or text == ":memory:" or "://" in text:
        return []
    out = []
    for name in (text, text + "-wal", text + "-shm"):
        try:
            mode = stat.S_IMODE(os.stat(name).st_mode)
        except OSError:
            continue
        if mode & 0o077:
            out.append(
                f"{name} can be read or written by users other than its owner (mode "
                f"{mode:04o}); run `chmod 600 {name}` (rule 11: a saga log is for its owner only)"
            )
    return out
