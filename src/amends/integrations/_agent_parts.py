"""The parts of the agent-framework adapters that describe tools, not runs: catalog names of
framework tools, contracts for framework-native tools (:func:`declare`), catalog tools handed to a
framework, the approval gate's words, and the tokens a framework call spent.

Nothing here opens a saga or calls a tool (that is :mod:`._agents`); this module never imports a
framework.
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import Any

import amends
from amends import Catalog
from amends._visible import visible

__all__ = [
    "APPROVAL_MODES",
    "SHOWN_VALUE",
    "approval_message",
    "catalog_tool_function",
    "check_approval",
    "check_names",
    "declare",
    "framework_name",
    "needs_approval",
    "quoted",
    "refusal_text",
    "resolve_tool_name",
    "shown_args",
    "shown_call",
    "spend",
    "title_from",
    "tokens_of",
]


def resolve_tool_name(catalog: Catalog, name: str, names: Mapping[str, str] | None = None) -> str:
    """The catalog name for a framework tool called ``name``.

    Frameworks allow only ``[A-Za-z0-9_-]`` in tool names, so ``crm_update_field`` finds the
    catalog's ``crm.update_field``. In order: ``names[name]`` if given; ``name`` itself if the
    catalog has it; the one catalog tool whose name with dots replaced by underscores is
    ``name``; else ``name`` (no contract: irreversible, and the run still works).
    """
    if names and name in names:
        return names[name]
    if name in catalog:
        return name
    # a catalog only grows (a name is never registered twice): its size says whether the
    # framework-name table is current (issue 25 item 6: it was rebuilt on every tool call)
    table = _FRAMEWORK_NAMES.get(catalog)
    if table is None or table[0] != len(catalog):
        found: dict[str, list[str]] = {}
        for spec in catalog:
            found.setdefault(spec.name.replace(".", "_"), []).append(spec.name)
        table = _FRAMEWORK_NAMES[catalog] = (len(catalog), found)
    matches = table[1].get(name, [])
    return matches[0] if len(matches) == 1 else name


_FRAMEWORK_NAMES: weakref.WeakKeyDictionary[Catalog, tuple[int, dict[str, list[str]]]] = (
    weakref.WeakKeyDictionary()
)


def declare(
    catalog: Catalog,
    name: str,
    *,
    reversibility: str,
    resources: Callable[[Mapping[str, Any]], list[str]] | None = None,
    description: str | None = None,
    timeout: float | None = None,
    sensitive: Sequence[str] = (),
    resolve_secret: Any = None,
    idempotent: bool = False,
    describe: str | None = None,
    undo_after: Sequence[str] = (),
) -> Any:
    """Declare the contract of a framework tool that keeps its own code: ``name`` is the tool's
    name as the framework calls it, and the tool records its inverse and expectation on
    :func:`amends.current_call`. Returns the catalog's ``ToolSpec``.

    Takes what ``@catalog.tool`` takes (issue 25): ``sensitive=["card_number"]`` keeps a card
    number out of the log and every report (rule 11) and ``resolve_secret=`` gives it back to
    an inverse at undo time; ``describe="Charge {cents} cents to {customer}"`` is the step in a
    sentence; ``undo_after=["crm_update_field"]`` makes the step's inverse wait for the inverse
    of the latest earlier step of each tool named (rule 3: the refund after the deal's
    reopening); names are catalog names or the framework's names of catalog tools.

    Raises:
        ContractError: As :meth:`amends.Catalog.register` (name taken or malformed, unknown
            class, a bad ``sensitive``, ``describe`` or ``undo_after``).
    """

    async def runs_in_the_framework(call: amends.Call, /, **args: Any) -> Any:
        # The adapter runs the framework's own tool in its place; amends never calls this.
        raise amends.ConfigError(
            f"tool {name!r} is declared for an agent framework and runs only through its "
            f"adapter; register a function with @catalog.tool to call it from amends",
            tool=name,
        )

    # the framework's names of catalog tools are accepted too ("crm_update_field"); anything
    # that is not a list of names goes to Catalog.register as given, which says what it wants
    order = (
        undo_after
        if isinstance(undo_after, str)
        else [resolve_tool_name(catalog, t) if isinstance(t, str) else t for t in undo_after]
    )
    return catalog.register(
        name,
        runs_in_the_framework,
        reversibility=reversibility,
        resources=resources,
        description=description,
        timeout=timeout,
        sensitive=sensitive,
        resolve_secret=resolve_secret,
        idempotent=idempotent,
        describe=describe,
        undo_after=order,
    )


def framework_name(tool: str) -> str:
    """The name a framework shows the model for catalog tool ``tool`` (dots become ``_``)."""
    return tool.replace(".", "_")


def catalog_tool_function(catalog: Catalog, tool: str) -> Callable[..., Awaitable[Any]]:
    """An async function with the signature of catalog tool ``tool`` minus ``call``, which runs
    the catalog's code with :func:`amends.current_call` as its ``call``.

    The adapters turn it into their own tool type (``catalog_tools(...)``), so a tool registered
    once in the catalog can be handed to the framework. Called outside an amends step it raises
    a :class:`amends.ConfigError` rather than acting unrecorded.

    Raises:
        ContractError: ``tool`` is not in the catalog.
    """
    spec = catalog.get(tool)
    fn = spec.fn
    sig = inspect.signature(fn, eval_str=True)
    params = list(sig.parameters.values())[1:]  # drop `call`

    plain = sig.replace(parameters=params)

    async def tool_function(*args: Any, **kwargs: Any) -> Any:
        bound = plain.bind(*args, **kwargs)  # some frameworks pass arguments positionally
        call = amends.current_call()
        if call is None:
            raise amends.ConfigError(
                f"catalog tool {tool!r} was called outside an amends step, so its inverse "
                f"would be lost; add the amends middleware/toolset/wrapper to the agent",
                tool=tool,
            )
        named: dict[str, Any] = {}
        for name, value in bound.arguments.items():
            if plain.parameters[name].kind is inspect.Parameter.VAR_KEYWORD:
                named.update(value)
            else:
                named[name] = value
        result = fn(call, **named)
        if inspect.isawaitable(result):
            result = await result
        return result

    tool_function.__name__ = framework_name(tool)
    tool_function.__qualname__ = tool_function.__name__
    tool_function.__doc__ = inspect.getdoc(fn) or f"The {tool} tool."
    tool_function.__signature__ = plain  # type: ignore[attr-defined]
    tool_function.__annotations__ = {
        p.name: p.annotation for p in params if p.annotation is not inspect.Parameter.empty
    } | (
        {"return": sig.return_annotation}
        if sig.return_annotation is not inspect.Signature.empty
        else {}
    )
    return tool_function


def title_from(prompt: object, default: str = "Agent run") -> str:
    """A saga title from the user's prompt: its first line, at most 80 characters."""
    text = prompt if isinstance(prompt, str) else ""
    line = text.strip().splitlines()[0].strip() if text.strip() else ""
    if not line:
        return default
    return line if len(line) <= 80 else line[:77] + "..."


# --- the approval gate (the MCP gateway's counterpart for frameworks with human-in-the-loop) --

APPROVAL_MODES = ("off", "irreversible", "residue")
"""``off``: never ask; ``irreversible``: ask before a call undo cannot take back (a tool with no
contract included); ``residue``: also before a compensable call (undo leaves residue)."""

_UNDO_SAYS = {
    "irreversible": "Undo CANNOT take this back: a person would have to follow up.",
    "compensable": "Undo can compensate this, but not without trace: residue remains.",
}


def check_names(names: object) -> dict[str, str]:
    """``names`` (framework tool name -> catalog name) as a dict; ``None`` is no names.

    Raises:
        ConfigError: Anything but a mapping of names to names (a string was taken for one by
            Pydantic AI and OpenAI Agents and failed at the first tool call; LangChain raised a
            raw ``ValueError``).
    """
    if names is None:
        return {}
    if not isinstance(names, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in names.items()
    ):
        raise amends.ConfigError(
            f"names must map framework tool names to catalog names, got {names!r}; e.g. "
            f"names={{'set_stage': 'crm.update_field'}}"
        )
    return dict(names)


def check_approval(mode: str) -> str:
    """``mode`` if it is one of :data:`APPROVAL_MODES`.

    Raises:
        ConfigError: Any other value.
    """
    if mode not in APPROVAL_MODES:
        raise amends.ConfigError(
            f"approval is {mode!r}; use one of {', '.join(repr(m) for m in APPROVAL_MODES)}"
        )
    return mode


def _class_of(catalog: Catalog, tool: str) -> tuple[str, bool]:
    if tool not in catalog:
        return "irreversible", False  # no contract: the default (DESIGN.md)
    spec = catalog.get(tool)
    return spec.reversibility.value, spec.explicit


def needs_approval(catalog: Catalog, tool: str, mode: str) -> bool:
    """Whether the gate asks a person before catalog tool ``tool`` runs, under ``mode`` (a mode
    :func:`check_approval` accepted when the adapter was made: it is not checked again on every
    tool call, and ``"off"``, the common case, is answered first, issue 25 item 6)."""
    if mode == "off":
        return False
    cls, _ = _class_of(catalog, tool)
    return cls == "irreversible" or (mode == "residue" and cls == "compensable")


SHOWN_VALUE = 1000
"""Characters of one argument's value an approval question shows; a longer value is cut, saying
how long it is. No argument is ever left out of the question."""


def quoted(text: str, limit: int = SHOWN_VALUE) -> str:
    """``text`` -- a title, a residue, a value an agent or a vendor wrote -- as data on one line
    of an approval question: line breaks, control characters, bidi overrides, zero-width
    characters and the rest :func:`amends._visible.visible` names shown as escapes (so it can
    never form a line of amends' own, hide a character, nor reverse the words around it),
    bounded to ``limit`` characters with how long it was."""
    text = visible(text)
    if len(text) > limit:
        return f"{text[:limit]}… ({len(text):,} characters; the rest is not shown)"
    return text


def shown_call(tool: str, args: Mapping[str, Any], sensitive: Collection[str] = ()) -> str:
    """``tool(name=value, ...)`` as the person asked to approve it reads it: what is shown is
    what is sent (rule 12). Every argument, in the order given (an agent once hid ``to=`` behind
    a 300-character ``body``: the question was cut, the call was not); each value as a Python
    literal (its control characters escaped) and bounded by :func:`quoted`; a sensitive one as
    its marker, never its value (rule 11)."""
    shown = []
    for k, v in args.items():
        name = k if isinstance(k, str) and k.isidentifier() else repr(k)
        value = repr(f"[redacted:{k}]") if k in sensitive else repr(v)
        shown.append(f"{name}={quoted(value)}")
    return f"{quoted(tool, 200)}({', '.join(shown)})"


def shown_args(catalog: Catalog, tool: str, args: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments as amends shows them to a person: each argument the tool declared
    sensitive as ``[redacted:NAME]``, and its value inside any other text argument too (rule
    11, as the log and the MCP gateway's approval show them)."""
    secret = catalog.get(tool).sensitive if tool in catalog else ()
    if not secret:
        return dict(args)
    values = {str(args[k]): k for k in secret if k in args and len(str(args[k])) >= 3}
    out: dict[str, Any] = {}
    for k, v in args.items():
        if k in secret:
            v = f"[redacted:{k}]"
        elif isinstance(v, str):
            for value, name in values.items():
                v = v.replace(value, f"[redacted:{name}]")
        out[k] = v
    return out


def approval_message(catalog: Catalog, tool: str, args: Mapping[str, Any]) -> str:
    """The question put to the person: the call, its class, what undo can and cannot do; a
    sensitive argument is never shown (:func:`shown_args`)."""
    cls, explicit = _class_of(catalog, tool)
    label = cls if explicit else "irreversible (no contract)"
    return "\n".join(
        [
            f"The agent wants to call {shown_call(tool, shown_args(catalog, tool, args))}.",
            f"Class: {label}. {_UNDO_SAYS.get(cls, '')}".rstrip(),
            "Allow this call?",
        ]
    )


def refusal_text(tool: str, catalog: Catalog) -> str:
    """What the model is told when the person does not approve (the call was not made)."""
    cls, _ = _class_of(catalog, tool)
    return f"amends: the user did not approve {tool} ({cls}); the call was not made"


# --- tokens a framework call spent -------------------------------------------------------


def tokens_of(usage: Any) -> int:
    """Total tokens of a framework's usage record or run result (LangChain ``AIMessage`` /
    ``usage_metadata``, Pydantic AI ``RunUsage`` / ``result.usage()``, OpenAI Agents ``Usage`` /
    ``result.context_wrapper.usage``), for ``call.spend(tokens=...)`` in a compensation that
    runs an agent: the reversal's budget counts them.

    Raises:
        ConfigError: No token count can be found in ``usage``.
    """
    inner = getattr(usage, "usage", None)  # pydantic_ai run result (a property since 2.x)
    if inner is not None and not isinstance(usage, Mapping):
        usage = inner if hasattr(inner, "total_tokens") or not callable(inner) else inner()
    wrapper = getattr(usage, "context_wrapper", None)  # openai-agents RunResult
    if wrapper is not None:
        usage = wrapper.usage
    meta = getattr(usage, "usage_metadata", None)  # langchain AIMessage
    if meta is not None:
        usage = meta
    if isinstance(usage, Mapping):
        total = usage.get("total_tokens")
        if total is None and ("input_tokens" in usage or "output_tokens" in usage):
            total = int(usage.get("input_tokens", 0)) + int(usage.get("output_tokens", 0))
    else:
        total = getattr(usage, "total_tokens", None)
    if not isinstance(total, int) or total < 0:
        raise amends.ConfigError(
            f"no token count in {usage!r}; pass a usage record or run result of LangChain, "
            f"Pydantic AI or OpenAI Agents, or call call.spend(tokens=n) yourself"
        )
    return total


def spend(call: amends.Call, usage: Any) -> int:
    """``call.spend(tokens=tokens_of(usage))``; returns the tokens spent."""
    n = tokens_of(usage)
    call.spend(tokens=n)
    return n
