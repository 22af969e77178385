"""Saga log backends, chosen by URL: ``sqlite:///path`` (embedded default) or ``postgresql://...``."""

from __future__ import annotations

import os
from typing import Any

from .._errors import ConfigError
from .base import SagaLog
from .database import hide_passwords
from .files import file_permission_problems
from .sqlite import SqliteLog

__all__ = ["SagaLog", "SqliteLog", "file_permission_problems", "hide_passwords", "open_log"]


def open_log(
    target: str | os.PathLike[str] | SagaLog | None = None,
    *,
    must_exist: bool = False,
    read_only: bool = False,
    **options: Any,
) -> SagaLog:
    """The saga log for ``target``: a :class:`SagaLog`, a URL, or a file path.

    ``None`` means ``./amends.db``. ``postgresql://`` and ``postgres://`` URLs need the
    ``amends[postgres]`` extra. ``must_exist=True`` refuses a missing log (read commands never
    create one); ``read_only=True`` opens it without taking a write lock and refuses writes.

    Raises:
        ConfigError: The URL's scheme is not one amends knows.
        LogError: ``must_exist``/``read_only`` and there is no amends log at ``target``.
    """
    if must_exist:
        options["must_exist"] = True
    if read_only:
        options["read_only"] = True
    if isinstance(target, SagaLog):
        return target
    text = "amends.db" if target is None else os.fspath(target)
    if text.startswith(("postgresql://", "postgres://")):
        try:
            from .postgres import PostgresLog  # type: ignore[import-not-found,unused-ignore]
        except ImportError as exc:
            raise ConfigError(
                f"log URL {text.split('@')[-1]!r} needs PostgreSQL support: "
                f"pip install 'amends[postgres]' ({exc})"
            ) from exc
        log: SagaLog = PostgresLog(text, **options)
        return log
    if "://" in text and not text.startswith("sqlite://"):
        scheme = text.split("://", 1)[0]
        raise ConfigError(
            f"log URL scheme {scheme!r} is not supported; use sqlite:///path.db, a file path, "
            f"or postgresql://user@host/db"
        )
    return SqliteLog(text, **options)
