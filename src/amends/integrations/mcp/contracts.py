"""The MCP transport of the contract language: contract files for an upstream's tools.

A contract file for an MCP server is a file of the one contract language
(:mod:`amends.contract_file`, docs/toml-catalog.md), naming the server's tools by **their own
names** and without ``http`` tables: the gateway (:mod:`.gateway`) reaches each tool through its
upstream. A tool with no contract is irreversible (DESIGN.md). What is MCP's own is here: the
contract files shipped with amends (``builtin:<name>``) and how an MCP ``tools/call`` answer
reads as a :class:`~amends.contract_file.TransportResult` (:func:`mcp_result`).
"""

from __future__ import annotations

from importlib import resources as importlib_resources
from pathlib import Path
from typing import Any, Protocol

from amends import ConfigError
from amends.contract_file import (
    Capture,
    ContractFile,
    Effects,
    ErrorRules,
    ToolContract,
    TransportResult,
    read_file,
)
from amends.contract_file.templates import fill as render

__all__ = [
    "BUILTIN_CONTRACTS",
    "Capture",
    "ContractFile",
    "Effects",
    "ErrorRules",
    "ToolContract",
    "builtin_contract_path",
    "load_contracts",
    "mcp_result",
    "render",
]

BUILTIN_CONTRACTS = ("filesystem", "git", "memory", "sandbox")
"""Contract files shipped in the package, usable as ``"builtin:<name>"``."""


def builtin_contract_path(name: str) -> Path:
    """The path of a contract file shipped in the package (``filesystem``, ``git``, ``memory``,
    ``sandbox``).

    Raises:
        ConfigError: No such built-in contract file.
    """
    if name not in BUILTIN_CONTRACTS:
        raise ConfigError(
            f"no built-in contract file {name!r}; use one of "
            f"{', '.join('builtin:' + n for n in BUILTIN_CONTRACTS)} or a path to a TOML file"
        )
    ref = importlib_resources.files("amends.integrations.mcp") / "contracts" / f"{name}.toml"
    return Path(str(ref))


def load_contracts(source: str | Path) -> ContractFile:
    """Read a contract file: a path, or ``"builtin:filesystem"`` / ``"builtin:sandbox"``.

    Raises:
        ConfigError: The file is missing, not TOML, a draft not yet reviewed, or an entry is
            malformed (the message names the file, the tool and the key, and what to write
            instead).
    """
    text_source = str(source)
    path = (
        builtin_contract_path(text_source.removeprefix("builtin:"))
        if text_source.startswith("builtin:")
        else Path(source)
    )
    return read_file(path, transport="mcp", source=text_source)


class Answer(Protocol):
    """What :func:`mcp_result` reads of an upstream's answer (``upstream.UpstreamResult``)."""

    @property
    def ok(self) -> bool: ...

    @property
    def structured(self) -> Any: ...

    @property
    def text(self) -> str: ...

    @property
    def error_text(self) -> str | None: ...


def mcp_result(answer: Answer) -> TransportResult:
    """An MCP ``tools/call`` answer as the contract language reads it.

    ``structuredContent`` is the structured result (a lone ``{"result": x}`` wrapper, the SDK's
    shape for non-object outputs, unwrapped); the text blocks are the text. An ``isError``
    answer is an unknown outcome unless the contract's ``[errors]`` patterns read it (rule 9);
    its ``error_text`` -- the upstream's own words, which the gateway recovers when an mcp 2.x
    server withholds them -- is what those patterns and ``absent_when`` read (issue 24).
    """
    sc = answer.structured
    if isinstance(sc, dict) and set(sc) == {"result"}:
        sc = sc["result"]
    if not answer.ok:
        return TransportResult(
            "unknown",
            structured=sc,
            text=answer.text,
            error_text=answer.error_text or answer.text or None,
            detail="answered with an error its contract does not read as a refusal, so it may "
            "have taken effect",
        )
    return TransportResult("ok", structured=sc, text=answer.text)
