"""Connections to upstream MCP servers, and the one table that translates their failures.

An upstream is reached with the official SDK's :class:`mcp.Client` (stdio by command, or
streamable HTTP by URL). This module decides nothing about sagas: it forwards a call and says
what came back (:class:`UpstreamResult`), translating SDK errors at the edge (STYLE.md: one
table, ``raise X from exc``).

Two things a real upstream does that this module survives (issue 24):

- **It dies.** A stdio server killed mid-call, or an HTTP server restarted, leaves the SDK's
  connection closed for good. The call that was in flight has an unknown outcome (rule 9); the
  next call starts the server again (reconnects), with backoff, so later calls and undo reach
  the new process. A call that cannot reach the server at all was never sent: it is refused as
  transient, worded "could not reach upstream '<name>'", never as something the world did.
- **It withholds its own words.** An mcp 2.x server answers a tool that raised ``ValueError``
  with only ``Error executing tool <name>`` and logs the exception on its stderr. For a stdio
  upstream the gateway reads that log and recovers the exception's own text for that call
  (:attr:`UpstreamResult.error_text`), so a contract's ``absent_when`` and ``[errors]`` patterns
  match what the tool raised. It attributes a log record to a call only when exactly one such
  record for that tool appeared while the call was running; otherwise it says nothing more.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import sys
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from amends import (
    AmendsError,
    ConfigError,
    PermanentError,
    ToolError,
    TransientError,
)
from amends._telemetry import json_logs

from .config import UpstreamConfig

if TYPE_CHECKING:
    import mcp_types

__all__ = [
    "Upstream",
    "UpstreamError",
    "UpstreamGone",
    "UpstreamResult",
    "error_text",
    "rejected_before_running",
]

_BACKOFF = 0.2
"""Seconds after a failed start of a dead upstream before the next; doubles per failure."""
_MAX_BACKOFF = 5.0
_GENERIC = re.compile(r"^Error executing tool (?P<tool>\S+)$")
"""The whole text an mcp 2.x server sends for a tool that raised an unexpected exception."""


_REJECTED = (
    r"Unknown tool: {tool}$",  # the Python SDK (1.x and 2.x): no such tool
    r"Error executing tool {tool}: \d+ validation errors? for \w+Arguments\n",  # bad arguments
    r"(MCP error -32602: )?Tool {tool} (not found|disabled)$",  # the TypeScript SDK
    r"(MCP error -32602: )?(Input validation error: )?Invalid arguments for tool {tool}: ",
)
"""How the official SDKs word the ``isError`` result of a call their server rejected before
the tool ran (rule 9: nothing happened, so the step is ``failed`` and a retry may run), each
matched from the start of the text with the called tool's own name. Any other error result
stays an unknown outcome (in doubt) unless the contract's ``[errors]`` read it."""


def rejected_before_running(tool: str, text: str) -> bool:
    """Whether the error ``text`` of a call of ``tool`` is an SDK's rejection before the tool
    ran (:data:`_REJECTED`): an unknown or disabled tool, or arguments its schema refuses."""
    name = re.escape(tool)
    return any(re.match(shape.replace("{tool}", name), text) for shape in _REJECTED)


class UpstreamError(ToolError):
    """An upstream call whose outcome is unknown: an ``isError`` result the contract does not
    read as "refused", or a transport failure after the request was sent (rule 9: in doubt).
    Its message is what an MCP user reads in the step's detail."""


class UpstreamGone(UpstreamError):
    """The connection failed while the call was running (the server stopped): its outcome is
    unknown, and the next call starts the server again. A read-only call is safe to try again."""


@dataclass(frozen=True)
class UpstreamResult:
    """What one upstream ``tools/call`` answered, as the contract applier reads it."""

    raw: mcp_types.CallToolResult
    """The SDK's result, as the upstream sent it."""
    ok: bool
    """``False`` for an ``isError`` result."""
    structured: Any
    """The result's ``structuredContent``, or ``None``."""
    text: str
    """The text of its content blocks, joined."""
    error_text: str | None = None
    """For an error: the upstream's own words. The result's text, or, when an mcp 2.x server
    withheld them (``Error executing tool X``), the exception it logged for this call."""


def error_text(result: mcp_types.CallToolResult) -> str:
    """The text of a result's content blocks, joined (what an error says)."""
    parts = [getattr(c, "text", "") for c in result.content]
    return "\n".join(p for p in parts if p).strip()


# --- the upstream's log (stderr), for the words an mcp 2.x server withholds -----------------
_BOX = re.compile(r"[\u2500-\u257f]")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_EXC = re.compile(
    r"(?:^| )(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Failure))(?::(?P<msg> .*?))?"
    r"(?= The above exception was| During handling of the above exception"
    r"| Traceback \(most recent call last| \[\d\d/\d\d/\d\d|$)"
)
_WRAPPERS = ("UnexpectedToolError", "ToolError", "UnexpectedResourceError")


def logged_error(log: str, tool: str) -> str | None:
    """The text of the exception ``tool`` raised, from the server log written during one call.

    ``None`` unless exactly one record "Tool '<tool>' raised an unexpected exception" is in
    ``log`` (two overlapping failures of the same tool cannot be told apart). Reads the SDK's
    rich and plain log formats: box-drawing lines are dropped, wrapped lines joined.
    """
    lines = [_ANSI.sub("", line).strip() for line in log.splitlines()]
    flat = " ".join(line for line in lines if line and not _BOX.search(line))
    flat = re.sub(r"\s+", " ", flat)
    flat = re.sub(r" \S+\.py:\d+(?= )", "", f" {flat} ").strip()  # rich's right-hand column
    header = re.compile(r"Tool '([^']+)' (?:raised an unexpected exception|failed:)")
    marks = list(header.finditer(flat))
    mine = [i for i, m in enumerate(marks) if m.group(1) == tool]
    if len(mine) != 1:
        return None
    i = mine[0]
    end = marks[i + 1].start() if i + 1 < len(marks) else len(flat)
    for m in _EXC.finditer(flat, marks[i].end(), end):
        if m.group("type").rsplit(".", 1)[-1] in _WRAPPERS:
            continue
        return f"{m.group('type').rsplit('.', 1)[-1]}:{m.group('msg') or ''}".strip()
    return None


def _cause(exc: BaseException) -> str:
    """The innermost message of an exception group (the SDK wraps start failures in one)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _transport_failure(exc: BaseException) -> bool:
    """Whether ``exc`` from the SDK means the connection itself failed (the server is gone or
    its stream broke), as opposed to an answer that arrived but is not valid MCP."""
    import anyio
    import httpx  # the SDK's HTTP transport: a dependency of mcp

    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return isinstance(
        exc,
        OSError
        | EOFError
        | anyio.ClosedResourceError
        | anyio.BrokenResourceError
        | anyio.EndOfStream
        | TimeoutError
        | httpx.TransportError,
    )


_PAGED = {
    "list_tools": "tools",
    "list_resources": "resources",
    "list_resource_templates": "resource_templates",
    "list_prompts": "prompts",
}
"""The SDK client's paginated list methods, and the field of a page that holds the items."""


async def _all_pages(client: Any, method: str) -> list[Any]:
    """Every item of the paginated list the client's ``method`` answers, page by page."""
    field = _PAGED[method]
    items: list[Any] = []
    cursor: str | None = None
    while True:
        got = await getattr(client, method)(cursor=cursor)
        items += getattr(got, field)
        cursor = got.next_cursor
        if not cursor:
            return items


_UPSTREAM_LOG = logging.getLogger("amends.upstream")


class _ErrLog:
    """A stdio upstream's stderr: forwarded to ours, the recent part kept to read back."""

    _KEEP = 256 * 1024

    def __init__(self, name: str = "") -> None:
        self._fields = {"amends": {"upstream": name}}
        self._partial = b""
        self._r, w = os.pipe()
        self.file = os.fdopen(w, "w")
        """What the child's stderr is set to (closed here once the child has it)."""
        os.set_blocking(self._r, False)
        self._buf = bytearray()
        self._base = 0  # absolute offset of _buf[0]
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self._r, self.drain)

    def spawned(self) -> None:
        """The child holds its own copy: ours is closed, so the pipe ends when the child does."""
        with contextlib.suppress(OSError):
            self.file.close()

    @property
    def mark(self) -> int:
        return self._base + len(self._buf)

    def drain(self) -> None:
        """Read what the child has written so far (it writes its log before its answer)."""
        while True:
            try:
                chunk = os.read(self._r, 65536)
            except BlockingIOError:
                return
            except OSError:
                chunk = b""
            if not chunk:
                self._stop_reading()
                return
            self._forward(chunk)
            self._buf += chunk
            if len(self._buf) > self._KEEP:
                cut = len(self._buf) - self._KEEP
                del self._buf[:cut]
                self._base += cut

    def _forward(self, chunk: bytes) -> None:
        """To our stderr as it came; under ``--log-format json`` (issue 28) each line a record
        of ``amends.upstream``, so every line on stderr stays JSON."""
        if not json_logs():
            with contextlib.suppress(OSError, ValueError):
                sys.stderr.write(chunk.decode("utf-8", "replace"))
                sys.stderr.flush()
            return
        *lines, self._partial = (self._partial + chunk).split(b"\n")
        for line in lines:
            _UPSTREAM_LOG.info(line.decode("utf-8", "replace"), extra=self._fields)

    def since(self, mark: int) -> str:
        self.drain()
        start = max(mark - self._base, 0)
        return bytes(self._buf[start:]).decode("utf-8", "replace")

    def _stop_reading(self) -> None:
        if self._loop is not None:
            with contextlib.suppress(Exception):
                self._loop.remove_reader(self._r)
            self._loop = None

    def close(self) -> None:
        if self._partial:  # a last line without its newline
            self._forward(b"\n")
        self._stop_reading()
        for close in (self.file.close, lambda: os.close(self._r)):
            with contextlib.suppress(OSError):
                close()


class _Connection:
    """One live ``mcp.Client`` session, owned by a task of its own.

    The SDK's client holds anyio task groups that must be left by the task that entered them;
    a restart happens inside whichever request found the old process dead, so each connection
    is entered and left by its own task, and requests only use it.
    """

    def __init__(self, up: Upstream) -> None:
        self.up = up
        self.client: Any = None
        self.errlog: _ErrLog | None = None
        self.dead = False
        self._stop = asyncio.Event()
        self._ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._task: asyncio.Task[None] | None = None

    async def open(self) -> _Connection:
        self._task = asyncio.create_task(self._run(), name=f"amends-mcp-upstream-{self.up.name}")
        await asyncio.shield(self._ready)
        return self

    async def _run(self) -> None:
        from mcp import Client

        target = self.up.target()
        try:
            if not isinstance(target, str):  # stdio: its stderr is read (module docstring)
                from mcp.client.stdio import stdio_client

                self.errlog = _ErrLog(self.up.name)
                self.errlog.start()
                target = stdio_client(target, errlog=self.errlog.file)
            async with Client(target, cache=None) as client:
                if self.errlog is not None:
                    self.errlog.spawned()
                self.client = client
                self._ready.set_result(None)
                await self._stop.wait()
        except BaseException as exc:
            self.dead = True
            if not self._ready.done():
                self._ready.set_exception(exc)
            elif not isinstance(exc, Exception):
                raise
        finally:
            self.dead = True
            if self.errlog is not None:
                self.errlog.close()

    async def close(self) -> None:
        self._stop.set()
        if self._task is not None:
            with contextlib.suppress(Exception):
                await self._task


class Upstream:
    """One upstream MCP server: its tools, and a connection that is restarted when it dies."""

    def __init__(self, config: UpstreamConfig) -> None:
        self.config = config
        self.name = config.name
        self.tools: dict[str, mcp_types.Tool] = {}
        self.restarts = 0
        """How many times the connection was started again after the server died."""
        self.capabilities: Any = None
        """What the server said it offers (resources, prompts, logging) when it was reached."""
        self._keep = False
        self._conn: _Connection | None = None
        self._lock: asyncio.Lock | None = None
        self._failures = 0
        self._retry_at = 0.0
        self._why = ""

    def target(self) -> Any:
        """What :class:`mcp.Client` connects to: stdio parameters or the URL."""
        from mcp.client.stdio import get_default_environment

        from mcp import StdioServerParameters

        cfg = self.config
        if cfg.command is not None:
            env = get_default_environment()
            env.update(cfg.env or {})
            # Bytes that are not UTF-8 on the server's stdout become U+FFFD: with the SDK's
            # default ("strict") its reader died on them and every call of the connection
            # hung until call_timeout (issue 24: non-UTF-8 output survived).
            return StdioServerParameters(
                command=cfg.command,
                args=list(cfg.args),
                env=env,
                cwd=cfg.cwd,
                encoding_error_handler="replace",
            )
        assert cfg.url is not None
        return cfg.url

    @property
    def where(self) -> str:
        cfg = self.config
        if cfg.command is not None:
            return f"command {' '.join([cfg.command, *cfg.args])!r}"
        return f"URL {cfg.url!r}"

    async def connect(self, stack: AsyncExitStack, *, keep: bool = True) -> None:
        """Start (or reach) the server and list its tools. With ``keep``, the connection stays
        open until ``stack`` closes (and is started again if the server dies); without, every
        later :meth:`call` opens its own (for ``amends undo`` and the web page, which undo a
        gateway's saga without a gateway).

        Raises:
            ConfigError: The server cannot be started or reached (the message names it).
        """
        self._keep = keep
        self._lock = asyncio.Lock()
        try:
            conn = await _Connection(self).open()
        except (OSError, AmendsError) as exc:
            raise ConfigError(
                f"upstream {self.name!r} ({self.where}) could not be started: {exc}; check the "
                f"command or URL in the gateway config"
            ) from exc
        except Exception as exc:
            # the SDK wraps the cause in exception groups: name the innermost, not "unhandled
            # errors in a TaskGroup"; a server that exited at start said why on its stderr
            said = "; its own words, if any, are on stderr above" if self.config.command else ""
            raise ConfigError(
                f"upstream {self.name!r} ({self.where}) did not answer as an MCP server "
                f"({_cause(exc)}){said}; check the command or URL in the gateway config"
            ) from exc
        try:
            self.capabilities = conn.client.server_capabilities
            for t in await _all_pages(conn.client, "list_tools"):
                self.tools[t.name] = t
        except Exception as exc:
            await conn.close()
            raise ConfigError(
                f"upstream {self.name!r} ({self.where}) did not list its tools: "
                f"{type(exc).__name__}: {exc}; check that it is an MCP server"
            ) from exc
        if keep:
            self._conn = conn
            stack.push_async_callback(self.aclose)
        else:
            await conn.close()

    async def relist(self) -> None:
        """List the server's tools again, replacing :attr:`tools` (the gateway re-exports).

        Raises:
            TransientError: The server could not be reached.
            Exception: Whatever the SDK raised for an answer that is not a tools list.
        """
        async with self._connection() as conn:
            tools: list[mcp_types.Tool] = await _all_pages(conn.client, "list_tools")
        self.tools = {t.name: t for t in tools}

    async def aclose(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()

    async def _live(self) -> _Connection:
        """The kept connection, started again if the server died. One start per call; after a
        failed start the next is not tried before a backoff (0.2 s, doubling, at most 5 s),
        which the engine's retries wait for (``retry_after``).

        Raises:
            TransientError: The server could not be reached: the call was not sent.
        """
        conn = self._conn
        if conn is not None and not conn.dead:
            # the lock orders restarts; a live connection is handed out without it (no await
            # between the check and the return, and a restart empties ``_conn`` first)
            return conn
        assert self._lock is not None
        async with self._lock:
            conn = self._conn
            if conn is not None and not conn.dead:
                return conn
            if conn is not None:
                await conn.close()
            self._conn = None
            now = time.monotonic()
            if now < self._retry_at:
                raise TransientError(
                    f"could not reach upstream {self.name!r} ({self.where}): it stopped and did "
                    f"not start again ({self._why}); the call was not sent",
                    retry_after=self._retry_at - now,
                )
            try:
                self._conn = await _Connection(self).open()
            except Exception as exc:
                self._failures += 1
                wait = min(_BACKOFF * 2 ** (self._failures - 1), _MAX_BACKOFF)
                self._retry_at = time.monotonic() + wait
                self._why = _cause(exc)
                raise TransientError(
                    f"could not reach upstream {self.name!r} ({self.where}): it stopped and did "
                    f"not start again ({self._why}); the call was not sent",
                    retry_after=wait,
                ) from exc
            self._failures = 0
            self.restarts += 1
            print(
                f"amends mcp: upstream {self.name!r} had stopped; started it again", file=sys.stderr
            )
            return self._conn

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[_Connection]:
        if self._keep:
            yield await self._live()
            return
        try:  # no kept connection: one for this call
            conn = await _Connection(self).open()
        except Exception as exc:
            raise TransientError(
                f"could not reach upstream {self.name!r} ({self.where}): "
                f"{type(exc).__name__}: {exc}; the call was not sent"
            ) from exc
        try:
            yield conn
        finally:
            await conn.close()

    async def request(self, method: str, *args: Any) -> Any:
        """One request of the SDK client's ``method`` (a read: resources, prompts, logging),
        passed through as it is (:mod:`.passthrough`)."""
        async with self._connection() as conn:
            return await getattr(conn.client, method)(*args)

    async def page(self, method: str) -> list[Any]:
        """Every item of a paginated list (``list_resources``, ``list_prompts``, ...)."""
        async with self._connection() as conn:
            return await _all_pages(conn.client, method)

    def _failed(self, conn: _Connection, tool: str, exc: Exception) -> Exception:
        """What a ``tools/call`` that raised ``exc`` raises (the one table, module docstring)."""
        from mcp_types import CONNECTION_CLOSED

        from mcp import MCPError

        if not isinstance(exc, MCPError) and not _transport_failure(exc):
            # The connection is fine; the answer is not MCP (a content block of no known
            # type, structuredContent its own outputSchema refuses): the tool ran, its outcome
            # is unknown. The server is not restarted for it, which would cut the other calls
            # it is running (issue 24: a malformed response is survived, not spread).
            return UpstreamError(
                f"upstream {self.name!r} answered {tool} with a result that is not valid MCP "
                f"({_cause(exc)}); whether the call took effect is unknown",
                tool=tool,
            )
        if not isinstance(exc, MCPError):  # a broken pipe, a closed stream: it may have landed
            conn.dead = True
            return UpstreamGone(
                f"the connection to upstream {self.name!r} failed while {tool} was running "
                f"({type(exc).__name__}: {exc}); whether the call took effect is unknown",
                tool=tool,
            )
        if exc.code == CONNECTION_CLOSED:
            conn.dead = True  # the next call starts the server again
            return UpstreamGone(
                f"the connection to upstream {self.name!r} closed while {tool} was "
                f"running (the server stopped); whether the call took effect is unknown",
                tool=tool,
            )
        # JSON-RPC errors -32601/-32602 mean the request was rejected before the tool ran.
        if exc.code in (-32601, -32602):
            return PermanentError(f"{self.name}.{tool} rejected the call: {exc.error.message}")
        return UpstreamError(
            f"{self.name}.{tool} answered with protocol error {exc.code} "
            f"({exc.error.message}), so it may have taken effect",
            tool=tool,
        )

    async def call(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        meta: dict[str, Any] | None = None,
        *,
        progress: Any = None,
    ) -> UpstreamResult:
        """Forward one ``tools/call``; ``progress``, if given, receives the upstream's progress
        notifications for it (the gateway passes them on to the agent).

        Raises:
            TransientError: The server could not be reached: nothing was sent.
            PermanentError: The server rejected the request itself (unknown tool, bad params):
                nothing ran.
            UpstreamError: The connection failed after the request was sent: outcome unknown.
        """
        args = json.loads(json.dumps(arguments))
        if self._keep:  # issue 29: the kept connection, without a context manager per call
            return await self._call(await self._live(), tool, args, meta, progress)
        async with self._connection() as conn:
            return await self._call(conn, tool, args, meta, progress)

    async def _call(
        self,
        conn: _Connection,
        tool: str,
        args: dict[str, Any],
        meta: dict[str, Any] | None,
        progress: Any = None,
    ) -> UpstreamResult:
        mark = conn.errlog.mark if conn.errlog is not None else 0
        try:
            if progress is None:
                result: mcp_types.CallToolResult = await conn.client.call_tool(
                    tool, args, meta=meta
                )
            else:
                result = await conn.client.call_tool(
                    tool, args, progress_callback=progress, meta=meta
                )
        except Exception as exc:
            raise self._failed(conn, tool, exc) from exc
        text = error_text(result)
        said: str | None = None
        if result.is_error:
            if rejected_before_running(tool, text):  # nothing ran: refused (rule 9)
                raise PermanentError(f"{self.name}.{tool} rejected the call: {text}")
            said = text
            generic = _GENERIC.match(text)
            if generic is not None and conn.errlog is not None:
                said = logged_error(conn.errlog.since(mark), tool) or text
        return UpstreamResult(
            raw=result,
            ok=not result.is_error,
            structured=result.structured_content,
            text=text,
            error_text=said,
        )
