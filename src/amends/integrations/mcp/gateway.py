"""The MCP gateway: an MCP server toward the agent, an MCP client toward each upstream.

Every forwarded ``tools/call`` is a saga step (write-ahead, rule 1) whose contract comes from the
contract files (:mod:`.contracts`); a tool without one is irreversible. The agent also sees
``amends_begin``, ``amends_status``, ``amends_preview``, ``amends_undo`` and ``amends_resolve``.
The gateway never decides reversibility from a tool's name or from the upstream's annotations.
"""

from __future__ import annotations

import asyncio
import sys
from contextlib import AsyncExitStack
from contextvars import ContextVar
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import mcp_types as types

import amends
from amends import (
    AmendsError,
    Call,
    Catalog,
    ConfigError,
    Engine,
    PermanentError,
    Saga,
    StepFailedError,
    idempotency_key,
)
from amends.contract_file import (
    Binding,
    Captured,
    Transport,
    TransportRequest,
    TransportResult,
    probe_problems,
    read_captures,
    registration,
    tool_function,
    undo_after,
)

from .approval import (
    Answer,
    Approvals,
    approval_message,
    call_subject,
    needs_approval,
    refusal_text,
    shown_args,
)
from .config import GatewayConfig, UpstreamConfig
from .contracts import ContractFile, ToolContract, load_contracts, mcp_result
from .sessions import META_SAGA, META_STEP, META_TITLE, Sessions
from .tools import error_result, run_amends_tool
from .upstream import Upstream, UpstreamError, UpstreamGone, UpstreamResult

if TYPE_CHECKING:
    from mcp.server import Server

__all__ = ["META_PRECONDITION", "META_SAGA", "META_TITLE", "Exported", "Gateway"]

META_KEY = "amends/idempotency_key"
"""Sent upstream in ``_meta``: the call's idempotency key (rule 5)."""
META_PHASE = "amends/phase"
"""Sent upstream in ``_meta``: forward, compensate, follow_up, probe or before."""
META_PRECONDITION = "amends/precondition"
"""Sent upstream in ``_meta`` with a compensation: the expectation, for compare-and-set (rule 4)."""

_AGENT_REQUEST: ContextVar[Any] = ContextVar("amends_mcp_agent_request", default=None)
"""The agent's ``tools/call`` context a step's forward call was started from (the step's task
inherits it): where the upstream's progress notifications for that call are passed on."""
_OUTCOME_NEXT = frozenset({"forward", "compensate", "follow_up"})
"""Phases whose answer the engine records next (a step's or an inverse's outcome)."""
CONTINUE_HINT = (
    'amends_undo {"saga_id": "{saga_id}", "continue": true, "tool_calls": N, "seconds": S}'
)
"""How an MCP user continues a reversal that stopped short (issue 24 item 7)."""


@dataclass(frozen=True)
class Exported:
    """One upstream tool as the agent sees it."""

    agent_name: str
    """Name in the gateway's ``tools/list``."""
    catalog_name: str
    """Name in the amends catalog and the saga log."""
    upstream: Upstream
    tool: str
    """The upstream's own name."""
    contract: ToolContract | None


def unlisted_contract(up: Upstream, name: str) -> str:
    """The start-up error for a contract naming a tool ``up`` does not list, with the closest
    name it does list (a typo such as ``crm_set_feild`` for ``crm_set_field``)."""
    import difflib

    close = difflib.get_close_matches(name, list(up.tools), n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return (
        f"upstream {up.name!r}: a contract names tool {name!r}, which the server does not list; "
        f"{hint}fix the name in the contract file (the server lists: "
        f"{', '.join(sorted(up.tools)) or 'none'})"
    )


class Gateway:
    """The gateway between one agent (or many, over HTTP) and the configured upstreams.

    Use it as ``async with Gateway(config) as gw:`` then serve :meth:`server` over a transport.

    Args:
        config: The parsed gateway configuration.
        engine: An engine to use instead of one on ``config.log`` (tests, embedding).
        audit: Collect contract mistakes in :attr:`problems` instead of refusing to start
            (``amends mcp audit``); such a gateway must not serve.
    """

    def __init__(
        self, config: GatewayConfig, *, engine: Engine | None = None, audit: bool = False
    ) -> None:
        self.config = config
        self._audit = audit
        self.problems: list[str] = []
        """With ``audit``: what start-up would have refused (``amends mcp audit`` lists it)."""
        self.catalog = engine.catalog if engine is not None else Catalog()
        self._engine = engine
        self._own_engine = engine is None
        self.upstreams = [Upstream(u) for u in config.upstreams]
        self.exported: dict[str, Exported] = {}
        self._by_catalog: dict[str, Exported] = {}
        self.sessions = Sessions(self)
        self.approvals = Approvals(self)
        self._raw: dict[tuple[str, str], UpstreamResult] = {}
        # capture reads started while the step's intent is being made durable (see call_tool)
        self._early: dict[tuple[str, str], asyncio.Task[Captured]] = {}
        self._bindings: dict[str, Binding] = {}  # upstream name -> how its contracts reach it
        self._refresh_lock = asyncio.Lock()  # bound to a loop on its first contended use
        self._stack = AsyncExitStack()

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            raise AmendsError("the gateway is not started; use 'async with Gateway(config)'")
        return self._engine

    # --- start and stop -------------------------------------------------------------------
    async def __aenter__(self) -> Gateway:
        return await self.start()

    async def start(self, *, keep_connections: bool = True) -> Gateway:
        """Connect the upstreams, register their tools, open the log (``async with`` does this).

        Args:
            keep_connections: ``False`` lists each upstream's tools and closes the connection;
                each later call opens its own (the catalog ``amends undo`` uses).

        Raises:
            ConfigError: An upstream cannot be started, or a contract does not fit it.
        """
        from amends import tag_catalog

        from .sidecar import config_ref

        try:
            for up in self.upstreams:
                await up.connect(self._stack, keep=keep_connections)
                files = [load_contracts(c) for c in up.config.contracts]
                self._register(up, files)
            # Each saga records the config of the gateway that ran it, so `amends undo`,
            # `amends serve` and the web page undo it with the same contracts (issue 11), without
            # a gateway, even when several gateways share the log (issue 24 item 6).
            tag_catalog(self.catalog, config_ref(self.config))
            if self._engine is None and keep_connections:
                self._engine = Engine(
                    self.catalog,
                    log=self.config.log,
                    lease_seconds=self.config.lease_seconds,
                    continue_hint=CONTINUE_HINT,
                )
        except BaseException:
            await self._stack.aclose()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close every open saga (its steps settle first), the upstreams and the log."""
        await self.sessions.close_all()
        try:
            await self._stack.aclose()
        finally:
            if self._own_engine and self._engine is not None:
                await self._engine.close()

    def _names(self, up: UpstreamConfig, tool: str) -> tuple[str, str]:
        if up.prefix:
            return f"{up.name}_{tool}", f"{up.name}.{tool}"
        return tool, tool

    def _register(self, up: Upstream, files: list[ContractFile]) -> None:
        contracts: dict[str, ToolContract] = {}
        for f in files:
            for name, c in f.tools.items():
                if name in contracts:
                    raise ConfigError(
                        f"upstream {up.name!r}: tool {name!r} has a contract in two files "
                        f"({f.source} and an earlier one); keep one"
                    )
                contracts[name] = c
        for name in [n for n in contracts if n not in up.tools]:
            # issue 24 item 4: a contract for a tool the server does not list is a typo or a
            # stale file; refused at start-up, never silently ignored
            problem = unlisted_contract(up, name)
            if not self._audit:
                raise ConfigError(problem)
            self.problems.append(problem)
            del contracts[name]
        for name, c in contracts.items():
            missing = [ref for _key, ref, _probe in c.references() if ref not in up.tools]
            if missing and self._audit:
                self.problems.append(
                    f"upstream {up.name!r}: the contract of {name!r} uses tool(s) "
                    f"{', '.join(sorted(set(missing)))} that the server does not list"
                )
            elif missing:
                raise ConfigError(
                    f"upstream {up.name!r}: the contract of {name!r} uses tool(s) "
                    f"{', '.join(sorted(set(missing)))} that the server does not list; fix the "
                    f"contract or the upstream (it lists: {', '.join(sorted(up.tools)) or 'none'})"
                )
        for problem in probe_problems(contracts):  # across the upstream's files (rule 4)
            if not self._audit:
                raise ConfigError(f"upstream {up.name!r}: {problem}")
            self.problems.append(f"upstream {up.name!r}: {problem}")
        # One binding per upstream: its contracts reach it through _transport, under the
        # catalog names the prefix gives (secrets resolved across all its files, issue 24).
        binding = Binding(
            self._transport(up, contracts),
            contracts,
            prefix=f"{up.name}." if up.config.prefix else "",
            refuses_null=partial(schema_refuses_null, up),
        )
        self._bindings[up.name] = binding
        for tool_name in sorted(up.tools):
            self._export(up, tool_name, contracts.get(tool_name), binding)

    def _export(
        self, up: Upstream, tool_name: str, contract: ToolContract | None, binding: Binding
    ) -> None:
        """Register one upstream tool in the catalog and export it to the agent.

        Raises:
            ConfigError: Its name would hide an amends tool or another upstream's tool.
        """
        # every tool is exported whatever its arguments are named (``after``, ``call``,
        # ``deadline``...): they reach saga.call as one mapping, never as amends' options
        agent_name, catalog_name = self._names(up.config, tool_name)
        if agent_name.startswith("amends_"):
            raise ConfigError(
                f"upstream {up.name!r} lists a tool {tool_name!r}, which would hide the "
                f"gateway's own amends_* tools; set prefix = true for this upstream"
            )
        clash = self._by_catalog.get(catalog_name)
        if clash is not None or catalog_name in self.catalog:
            other = clash.upstream.name if clash is not None else "the catalog"
            raise ConfigError(
                f"tool {tool_name!r} of upstream {up.name!r} has the same name as one of "
                f"{other!r}; set prefix = true on one of them"
            )
        seen = self.exported.get(agent_name)
        if seen is not None:  # another catalog name, the same agent name: one would be hidden
            raise ConfigError(
                f"tool {tool_name!r} of upstream {up.name!r} and tool {seen.tool!r} of upstream "
                f"{seen.upstream.name!r} would both be listed to the agent as {agent_name!r}; "
                f"rename one of the upstreams, or set prefix = true on the one without it"
            )
        exp = Exported(agent_name, catalog_name, up, tool_name, contract)
        kwargs = registration(contract, binding) if contract is not None else {}
        kwargs["description"] = (
            kwargs.get("description")
            or ((up.tools[tool_name].description or "").strip().split("\n")[0])
        )
        # a hung upstream must not hold a step forever: it times out as in_doubt
        kwargs["timeout"] = kwargs.get("timeout") or self.config.call_timeout
        fn = tool_function(contract, binding, tool_name, early=self._early_capture)
        self.catalog.register(catalog_name, fn, **kwargs)
        self.exported[agent_name] = exp
        self._by_catalog[catalog_name] = exp

    async def refresh_tools(self) -> None:
        """Read each upstream's tools again: a server may add, change or drop tools while the
        gateway runs (``notifications/tools/list_changed``, a redeploy behind a URL).

        Runs before every ``tools/list`` of the agent and when it calls a tool the gateway does
        not export. A tool new since start-up has no contract (contracts naming unlisted tools
        are refused at start-up), so it is exported as irreversible; a dropped tool leaves the
        agent's list but stays in the catalog, so undo of earlier steps still finds it. An
        upstream that cannot be reached keeps the tools it listed last.
        """
        async with self._refresh_lock:
            for up in self.upstreams:
                if up.name not in self._bindings:
                    continue
                try:
                    await up.relist()
                except Exception:  # unreachable now: it keeps its last list
                    continue
                self._reexport(up)

    def _reexport(self, up: Upstream) -> None:
        """Make the exported tools of ``up`` match what it lists now (:meth:`refresh_tools`)."""
        for agent_name, exp in list(self.exported.items()):
            if exp.upstream is up and exp.tool not in up.tools:
                del self.exported[agent_name]
        for tool_name in sorted(up.tools):
            agent_name, catalog_name = self._names(up.config, tool_name)
            known = self._by_catalog.get(catalog_name)
            if known is not None and known.upstream is up and known.tool == tool_name:
                self.exported[agent_name] = known  # listed before (maybe dropped meanwhile)
                continue
            try:
                self._export(up, tool_name, None, self._bindings[up.name])
            except ConfigError as exc:  # a new name that clashes: not exported, said why
                print(f"amends mcp: {exc}; it is not exported", file=sys.stderr)

    # --- the transport of each upstream (the contract language's MCP transport) -----------
    def _transport(self, up: Upstream, contracts: dict[str, ToolContract]) -> Transport:
        """One ``tools/call`` of ``up`` for the contract applier, its answer as data.

        THE hand-off between the gateway and :mod:`amends.contract_file` (issue 24 item 1): the
        upstream's ``structuredContent``, text and own error words (:class:`.UpstreamResult`)
        go to the applier as a ``TransportResult``; the applier reads the contract's ``[errors]``
        patterns and records the contract.
        """

        async def send(request: TransportRequest) -> TransportResult:
            contract = contracts.get(request.tool)
            try:
                # Upstream.call copies the arguments (a JSON round trip): no copy here
                res = await up.call(
                    request.tool,
                    request.args,
                    _request_meta(request),
                    progress=_progress_to_agent() if request.phase == "forward" else None,
                )
            except UpstreamGone as exc:
                if contract is not None and contract.reversibility == "read_only":
                    # a read has no effect: trying it again is safe (the server restarts)
                    return TransportResult(
                        "transient", detail=f"{exc}; it is a read, so it is tried again"
                    )
                return TransportResult("unknown", detail=str(exc))
            except PermanentError as exc:  # rejected before the tool ran (unknown tool, params)
                return TransportResult("refused", detail=str(exc))
            except UpstreamError as exc:  # the transport failed after sending: unknown
                return TransportResult("unknown", detail=str(exc))
            if request.phase in _OUTCOME_NEXT:
                # The SDK task that handed this answer over is still ready to run: one pass
                # lets it end its turn, so the step's outcome record, written next, finds the
                # event loop idle and is committed there, not through the log's writer thread
                # (two thread hops per call: lane gw, benchmarks/gateway_instructions.py).
                await asyncio.sleep(0)
            if request.phase == "forward":
                self._raw[(request.saga_id, request.step_id)] = res
            return mcp_result(res)

        return send

    def _early_capture(self, call: Call) -> Any:
        """The capture reads :meth:`call_tool` started for this step, if any."""
        return self._early.pop((call.saga_id, call.step_id), None)

    def _start_capture(
        self,
        exp: Exported,
        contract: ToolContract,
        saga_id: str,
        step_id: str,
        arguments: dict[str, Any],
    ) -> None:
        """Start the capture reads of a step the engine has just been asked to run.

        They overlap the write of the step's intent instead of following it (benchmark 7: one
        upstream round trip and one fsync in parallel rather than in a row). Rule 1 still holds:
        a capture is read-only, and the write itself is sent only by the step's forward
        function, after its intent is durable, and only once every capture has answered.
        """
        who = _Before(saga_id, step_id, idempotency_key(saga_id, step_id))
        binding = self._bindings[exp.upstream.name]
        self._early[(saga_id, step_id)] = asyncio.ensure_future(
            read_captures(contract, binding, who, arguments)
        )

    def _drop_capture(self, saga_id: str, step_id: str) -> None:
        """A capture the step never used (its intent could not be written): stop it quietly."""
        task = self._early.pop((saga_id, step_id), None)
        if task is not None:
            task.cancel()
            task.add_done_callback(lambda t: t.cancelled() or t.exception())

    # --- tools/list and tools/call ---------------------------------------------------------
    def list_tools(self) -> list[types.Tool]:
        """The tools the agent sees: each upstream tool in its own shape with amends' label
        first (:mod:`.listing`), and the amends tools."""
        from .listing import agent_tool
        from .tools import AMENDS_TOOLS

        out = [
            agent_tool(
                exp.upstream.tools[exp.tool],
                name=exp.agent_name,
                catalog=self.catalog,
                catalog_name=exp.catalog_name,
                idempotent=bool(exp.contract and exp.contract.idempotent),
            )
            for exp in self.exported.values()
        ]
        out.extend(AMENDS_TOOLS)
        return out

    async def call_tool(
        self,
        ctx: Any,
        name: str,
        arguments: dict[str, Any],
        input_responses: dict[str, Any] | None = None,
        request_state: str | None = None,
    ) -> Any:
        """Forward one call as a saga step, or run one of the amends tools; returns a
        ``CallToolResult`` (or an ``InputRequiredResult`` when the approval gate asks)."""
        if name.startswith("amends_"):
            return await run_amends_tool(self, ctx, name, arguments, input_responses, request_state)
        exp = self.exported.get(name)
        if exp is None:  # maybe new since the agent's last list: read the upstreams' again
            await self.refresh_tools()
            exp = self.exported.get(name)
        if exp is None:
            return error_result(
                f"unknown tool {name!r}; the gateway exports: {', '.join(sorted(self.exported))}"
            )
        slot = self.sessions.slot(ctx)
        answer: Answer | None = None
        if needs_approval(self, exp):
            asked = await self.approvals.ask(
                ctx,
                owner=slot.owner,
                subject=call_subject(name, arguments),
                message=approval_message(self, exp, arguments),
                input_responses=input_responses,
                request_state=request_state,
            )
            if not isinstance(asked, Answer):
                return asked  # the question for the person (2026-07-28 input_required)
            answer = asked
            if not answer.approved:
                saga = await self.sessions.open_saga(slot, self.sessions.title(ctx))
                await self.record_answer(ctx, saga.id, None, answer, self._what(exp, arguments))
                cls = self.catalog.get(exp.catalog_name).reversibility.value
                return error_result(refusal_text(f"{exp.catalog_name} ({cls})", answer, self))
        saga = await self.sessions.open_saga(slot, self.sessions.title(ctx))
        _AGENT_REQUEST.set(ctx)  # the step's task inherits it (progress, _transport)
        # the upstream's arguments as one mapping: an argument named after, step_id or
        # undo_after is the tool's, never amends' option (issue 24)
        try:
            step = saga.call(exp.catalog_name, arguments, **self._undo_after(saga, exp))
        except amends.SagaClosedError:  # undone meanwhile: start a new saga
            slot.saga = None
            saga = await self.sessions.open_saga(slot, self.sessions.title(ctx))
            step = saga.call(exp.catalog_name, arguments, **self._undo_after(saga, exp))
        if answer is not None:
            await self.record_answer(ctx, saga.id, step.id, answer, self._what(exp, arguments))
        return await self._finish(saga, step, exp, arguments)

    @staticmethod
    def _what(exp: Exported, arguments: dict[str, Any]) -> dict[str, Any]:
        return {"tool": exp.catalog_name, "args": shown_args(exp, arguments)}

    async def record_answer(
        self,
        ctx: Any,
        saga_id: str,
        step_id: str | None,
        answer: Answer,
        what: dict[str, Any],
    ) -> None:
        """Log an approval or refusal as an event of the saga (rule 12; issue 21 item 4)."""
        import time

        kind = "approval.granted" if answer.approved else "approval.refused"
        data = answer.event(self.sessions.principal(ctx), what)
        await self.engine.log.append_event(
            saga_id, kind, step_id=step_id, data=data, now=time.time()
        )

    async def _finish(self, saga: Saga, step: Any, exp: Exported, arguments: dict[str, Any]) -> Any:
        """Wait for the step and answer the agent: the upstream's result, or what happened."""
        spec = self.catalog.get(exp.catalog_name)
        info = {
            "saga_id": saga.id,
            "step_id": step.id,
            "tool": exp.catalog_name,
            "reversibility": spec.reversibility._value_,  # no enum property call (issue 29)
        }
        if exp.contract is not None and exp.contract.captures:
            self._start_capture(exp, exp.contract, saga.id, step.id, arguments)
        try:
            await step
        except asyncio.CancelledError:
            # The agent cancelled the call (notifications/cancelled), or its connection ended:
            # the call it no longer waits for is cancelled too, upstream included (the SDK
            # sends the upstream notifications/cancelled), rather than left running unseen.
            # Cancelled after it began, its outcome is unknown: the step is in_doubt (rule 9),
            # never reverted as if known. Its task logs that itself; nothing here awaits.
            self._raw.pop((saga.id, step.id), None)
            if step.task is not None and not step.task.done():
                step.task.cancel()
            raise
        except StepFailedError as exc:
            raw = self._raw.pop((saga.id, step.id), None)
            info["state"] = exc.state
            upstream_said = (raw.error_text or "") if raw is not None else ""
            if exc.state == "in_doubt":
                text = (
                    f"amends: {exc}\nThe step is in doubt: do not retry blindly. amends_status "
                    f"shows it; a person can check and record it with amends_resolve."
                )
            else:
                text = f"amends: {exc}"
            if upstream_said and upstream_said not in text:
                text += f"\nupstream said: {upstream_said}"
            return error_result(text, info)
        finally:
            self._drop_capture(saga.id, step.id)
        got = self._raw.pop((saga.id, step.id), None)
        info["state"] = "done"
        assert got is not None
        # The upstream's own _meta is not passed on (issue 14), on the result or on its content
        # blocks: only amends' step information. Its structuredContent is (issue 24 item 2).
        content = [
            c.model_copy(update={"meta": None}) if getattr(c, "meta", None) else c
            for c in got.raw.content
        ]
        return types.CallToolResult(
            content=content,
            structured_content=got.structured,
            is_error=False,
            _meta={META_STEP: info},
        )

    def _undo_after(self, saga: Saga, exp: Exported) -> dict[str, Any]:
        """rule 3: the contract's undo_after names tools; this step's inverse waits for the
        inverse of the latest earlier step of each of them in the saga."""
        if exp.contract is None or not exp.contract.undo_after:
            return {}
        binding = self._bindings[exp.upstream.name]
        waits = undo_after(exp.contract, binding, saga.steps)
        return {"undo_after": waits} if waits else {}

    def server(self) -> Server[Any]:
        """A low-level SDK server whose handlers are this gateway's."""
        from mcp.server import Server

        async def on_list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
            await self.refresh_tools()  # an upstream's list may have changed (issue 24)
            return types.ListToolsResult(tools=self.list_tools())

        async def on_call_tool(ctx: Any, params: types.CallToolRequestParams) -> Any:
            try:
                return await self.call_tool(
                    ctx,
                    params.name,
                    dict(params.arguments or {}),
                    params.input_responses,
                    params.request_state,
                )
            except AmendsError as exc:
                return error_result(str(exc))

        from .passthrough import handlers, quietly

        server: Server[Any] = quietly(
            lambda: Server(
                "amends",
                version=amends.__version__,
                instructions="Tool calls through this server are recorded by amends as saga steps; "
                "amends_preview shows what undo would do, amends_undo undoes the session's calls "
                "honestly (each step reverted, compensated or acknowledged).",
                on_list_tools=on_list_tools,
                on_call_tool=on_call_tool,
                **handlers(self),
            )
        )
        return server


def schema_refuses_null(up: Upstream, name: str, arg: str) -> str | None:
    """Why upstream tool ``name`` cannot take argument ``arg`` null: its input schema (as the
    upstream lists it now) gives the argument a type without "null". Unsure (no type, anyOf)
    is no refusal: the upstream judges the call."""
    tool = up.tools.get(name)
    schema = getattr(tool, "input_schema", None)
    props = schema.get("properties") if isinstance(schema, dict) else None
    prop = props.get(arg) if isinstance(props, dict) else None
    kinds = prop.get("type") if isinstance(prop, dict) else None
    kinds = [kinds] if isinstance(kinds, str) else kinds
    if not isinstance(kinds, list) or not kinds or "null" in kinds:
        return None
    return f"takes {' or '.join(map(str, kinds))} for it, not null (its input schema)"


@dataclass(frozen=True)
class _Before:
    """What a capture reads of a step whose forward call has not started yet."""

    saga_id: str
    step_id: str
    idempotency_key: str
    precondition: None = None


def _progress_to_agent() -> Any:
    """A progress callback passing the upstream's progress on to the agent whose call this is,
    or ``None`` when it asked for none (``report_progress`` is then a no-op anyway)."""
    ctx = _AGENT_REQUEST.get()
    report = getattr(getattr(ctx, "session", None), "report_progress", None)
    if report is None:
        return None

    async def forward(progress: float, total: float | None, message: str | None) -> None:
        try:
            await report(progress, total, message)
        except Exception:  # progress is advisory: the agent may have gone
            pass

    return forward


def _request_meta(request: TransportRequest) -> dict[str, Any]:
    """The request ``_meta`` amends sends the upstream (docs/mcp.md lists the keys)."""
    m: dict[str, Any] = {
        META_KEY: request.idempotency_key,
        META_PHASE: request.phase,
        "amends/saga_id": request.saga_id,
        "amends/step_id": request.step_id,
    }
    if request.precondition is not None:
        m[META_PRECONDITION] = request.precondition.to_dict()
    return m
