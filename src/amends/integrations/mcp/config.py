"""The gateway's configuration file (TOML): the saga log, the approval gate, the upstreams.

```toml
[gateway]
log = "amends.db"               # the saga log: a path (relative to this file) or a URL
title = "MCP session"           # title of the saga opened for each agent connection
approval = "off"                # "off" | "irreversible" | "residue" (irreversible or residue)
when_no_elicitation = "refuse"  # "refuse" | "allow": a client that cannot be asked
actor = "agent:mcp"             # who the sagas' steps are attributed to
principal = "ann@example.com"   # who approves and resolves through this gateway (default: OS user)
share_sagas = false             # true: any agent connection may act on any saga of the tenant
tenant = "acme"                 # optional: the tenant the sagas belong to (web page, tokens)
http = "127.0.0.1:8765"         # optional: serve streamable HTTP here instead of stdio
call_timeout = 300              # seconds a call may take (a contract's timeout wins)
lease_seconds = 15              # after a crash, another process recovers a saga after this

[[upstream]]
name = "fs"
command = "npx"
args = ["-y", "@modelcontextprotocol/server-filesystem", "/srv/files"]
contracts = ["builtin:filesystem"]
prefix = true                   # the agent sees fs_write_file (catalog name fs.write_file)

[[upstream]]
name = "crm"
url = "http://127.0.0.1:9000/mcp"
contracts = ["crm-contracts.toml"]
```

Parsing only: this module never starts a process or opens a connection.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from amends import ConfigError

__all__ = ["GatewayConfig", "UpstreamConfig", "load_config"]

# \Z, not $: "$" also matches before a final newline ("mail.send\n" was a tool name)
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_\-]*\Z")
_APPROVAL = ("off", "irreversible", "residue")


@dataclass(frozen=True)
class UpstreamConfig:
    """One upstream MCP server."""

    name: str
    """Short name; the prefix of its tools when ``prefix`` is on."""
    command: str | None = None
    """Program to start (stdio transport)."""
    args: tuple[str, ...] = ()
    env: dict[str, str] | None = None
    """Extra environment variables for the program (added to a safe default set)."""
    cwd: str | None = None
    url: str | None = None
    """Streamable HTTP endpoint, instead of ``command``."""
    contracts: tuple[str, ...] = ()
    """Contract files (paths relative to the config file, or ``builtin:<name>``)."""
    prefix: bool = True
    """Re-export tools as ``<name>_<tool>`` (catalog name ``<name>.<tool>``); off: as they are."""


@dataclass(frozen=True)
class GatewayConfig:
    """The whole gateway configuration."""

    log: str
    """Saga log path or URL."""
    upstreams: tuple[UpstreamConfig, ...]
    title: str = "MCP session"
    """Title of the saga opened for each agent connection (``amends_begin`` sets another)."""
    approval: str = "off"
    """``off``; ``irreversible``: ask the user before an irreversible call; ``residue``: also
    before a call whose undo leaves residue (compensable)."""
    when_no_elicitation: str = "refuse"
    """What the gate does when the client cannot be asked: ``refuse`` the call or ``allow`` it."""
    actor: str = "agent:mcp"
    """Who the gateway's sagas are attributed to (shown in manual actions)."""
    principal: str = ""
    """The identity approvals and resolutions made through this gateway are recorded under
    (``by``), never a name the agent typed (rule 12). Default: the OS user running it."""
    share_sagas: bool = False
    """``False``: an agent connection acts only on the sagas it started (rule 12); ``True``: on
    any saga of the gateway's tenant (one agent on several connections, or a supervisor)."""
    tenant: str | None = None
    """The tenant the gateway's sagas belong to (the web page and tokens filter by it)."""
    http: str | None = None
    """``HOST:PORT`` to serve streamable HTTP on (``--http`` overrides); ``None``: stdio."""
    call_timeout: float = 300.0
    """Seconds an upstream call may take when its contract gives no timeout; past it the step is
    ``in_doubt`` (rule 9), so a hung upstream never holds a saga forever."""
    lease_seconds: float = 15.0
    """How long a crashed gateway's open saga stays claimed before recovery marks its
    unfinished steps ``in_doubt`` (rule 1)."""
    source: str = ""


def _os_user() -> str:
    import getpass

    try:
        return f"{getpass.getuser()} (OS user running the gateway)"
    except (KeyError, OSError):
        return "the operator of this gateway"


def _str(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where} must be a non-empty string, got {value!r}")
    return value


def _upstream(entry: Any, i: int, src: str, base: Path) -> UpstreamConfig:
    if not isinstance(entry, dict):
        raise ConfigError(f"{src}: upstream #{i} must be a table ([[upstream]])")
    name = entry.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigError(
            f"{src}: upstream #{i} needs a name of letters, digits, '_' or '-' "
            f'(e.g. name = "fs"), got {name!r}'
        )
    where = f"{src}: upstream {name!r}"
    known = {"name", "command", "args", "env", "cwd", "url", "contracts", "prefix"}
    unknown = set(entry) - known
    if unknown:
        raise ConfigError(
            f"{where} has unknown key(s) {', '.join(sorted(unknown))}; known: "
            f"{', '.join(sorted(known))}"
        )
    command, url = entry.get("command"), entry.get("url")
    if (command is None) == (url is None):
        raise ConfigError(
            f'{where} needs exactly one of command = "..." (stdio) or url = "http://..." '
            f"(streamable HTTP)"
        )
    args = entry.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ConfigError(f"{where}: args must be a list of strings, got {args!r}")
    env = entry.get("env")
    if env is not None and (
        not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values())
    ):
        raise ConfigError(f"{where}: env must be a table of strings, got {env!r}")
    contracts = entry.get("contracts", [])
    if not isinstance(contracts, list) or not all(isinstance(c, str) for c in contracts):
        raise ConfigError(f"{where}: contracts must be a list of file names, got {contracts!r}")
    resolved = tuple(c if c.startswith("builtin:") else str(base / c) for c in contracts)
    prefix = entry.get("prefix", True)
    if not isinstance(prefix, bool):
        raise ConfigError(f"{where}: prefix must be true or false, got {prefix!r}")
    cwd = entry.get("cwd")
    return UpstreamConfig(
        name=name,
        command=_str(command, f"{where} command") if command is not None else None,
        args=tuple(args),
        env=dict(env) if env is not None else None,
        cwd=str(base / _str(cwd, f"{where} cwd")) if cwd is not None else None,
        url=_str(url, f"{where} url") if url is not None else None,
        contracts=resolved,
        prefix=prefix,
    )


def load_config(path: str | Path) -> GatewayConfig:
    """Read the gateway configuration at ``path``.

    Raises:
        ConfigError: The file is missing or not TOML, or a key is missing, unknown or of the
            wrong kind (the message names the file, the key and the fix).
    """
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(
            f"gateway config {str(p)!r} does not exist; write one (see docs/mcp.md) or pass "
            f"--config with the right path"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(
            f"gateway config {str(p)!r} is not valid TOML: {exc}; fix the syntax at that line"
        ) from exc
    src = str(p)
    unknown = set(data) - {"gateway", "upstream"}
    if unknown:
        raise ConfigError(
            f"{src} has unknown top-level key(s) {', '.join(sorted(unknown))}; only [gateway] "
            f"and [[upstream]] are read"
        )
    gw = data.get("gateway", {})
    if not isinstance(gw, dict):
        raise ConfigError(f"{src}: [gateway] must be a table")
    known = {
        "log",
        "title",
        "approval",
        "when_no_elicitation",
        "lease_seconds",
        "actor",
        "tenant",
        "call_timeout",
        "http",
        "principal",
        "share_sagas",
    }
    bad = set(gw) - known
    if bad:
        raise ConfigError(
            f"{src}: [gateway] has unknown key(s) {', '.join(sorted(bad))}; known: "
            f"{', '.join(sorted(known))}"
        )
    base = p.resolve().parent
    log = gw.get("log", "amends.db")
    log = _str(log, f"{src}: gateway.log")
    if "://" not in log and log != ":memory:":
        log = str(base / log)
    approval = gw.get("approval", "off")
    if approval not in _APPROVAL:
        raise ConfigError(
            f"{src}: gateway.approval is {approval!r}; use one of {', '.join(_APPROVAL)}"
        )
    when_no = gw.get("when_no_elicitation", "refuse")
    if when_no not in ("refuse", "allow"):
        raise ConfigError(
            f"{src}: gateway.when_no_elicitation is {when_no!r}; use 'refuse' or 'allow'"
        )
    lease = gw.get("lease_seconds", 15.0)
    if isinstance(lease, bool) or not isinstance(lease, int | float) or lease <= 0:
        raise ConfigError(
            f"{src}: gateway.lease_seconds must be a positive number of seconds, got {lease!r}"
        )
    call_timeout = gw.get("call_timeout", 300.0)
    if (
        isinstance(call_timeout, bool)
        or not isinstance(call_timeout, int | float)
        or call_timeout <= 0
    ):
        raise ConfigError(
            f"{src}: gateway.call_timeout must be a positive number of seconds, "
            f"got {call_timeout!r}"
        )
    share = gw.get("share_sagas", False)
    if not isinstance(share, bool):
        raise ConfigError(f"{src}: gateway.share_sagas must be true or false, got {share!r}")
    principal = (
        _str(gw["principal"], f"{src}: gateway.principal") if "principal" in gw else _os_user()
    )
    ups = data.get("upstream", [])
    if not isinstance(ups, list) or not ups:
        raise ConfigError(
            f"{src} declares no upstream servers; add [[upstream]] tables with a name and a "
            f"command or url"
        )
    upstreams = tuple(_upstream(u, i, src, base) for i, u in enumerate(ups, 1))
    names = [u.name for u in upstreams]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ConfigError(f"{src}: upstream name(s) {', '.join(dup)} used twice; names are unique")
    return GatewayConfig(
        log=log,
        upstreams=upstreams,
        title=_str(gw.get("title", "MCP session"), f"{src}: gateway.title"),
        approval=approval,
        when_no_elicitation=when_no,
        lease_seconds=float(lease),
        call_timeout=float(call_timeout),
        http=_str(gw["http"], f"{src}: gateway.http") if "http" in gw else None,
        actor=_str(gw.get("actor", "agent:mcp"), f"{src}: gateway.actor"),
        principal=principal,
        share_sagas=share,
        tenant=_str(gw["tenant"], f"{src}: gateway.tenant") if "tenant" in gw else None,
        source=src,
    )
