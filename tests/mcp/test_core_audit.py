"""``amends audit --mcp-config`` (issue 14): the core command shows an MCP gateway's upstream tools
with their contract class and the server's ToolAnnotations as hints only, and ``--suggest``
writes a draft contract file that is refused until a person reviews it. Real upstream process,
the CLI as a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from amends import ConfigError
from amends.integrations.mcp import load_contracts
from conftest import KvSetup

pytestmark = pytest.mark.slow


def amends(setup: KvSetup, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "amends.cli", "audit", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(setup.dir),
    )


def test_core_audit_shows_hints_as_hints_and_suggest_writes_a_draft_refused_until_reviewed(
    kv: KvSetup,
) -> None:
    """A readOnlyHint never upgrades a tool without a contract; contracts win over hints; the
    draft covers exactly the tools without a contract, all irreversible, and is refused until
    `reviewed = false` is deleted."""
    draft = kv.dir / "draft.toml"
    out = amends(kv, "--mcp-config", str(kv.config), "--json", "--suggest", str(draft))
    assert out.returncode == 0, out.stderr[-2000:]
    rows = {r["tool"]: r for r in json.loads(out.stdout)}
    peek = rows["peek"]
    assert peek["hints"]["read_only_hint"] is True and peek["hints"]["idempotent_hint"] is True
    assert peek["class"] == "irreversible" and not peek["contract"]  # issue 24 item 11
    assert peek["label"] == "irreversible (no contract)"
    assert "a hint is not a contract" in peek["note"]
    assert rows["kv_set"]["class"] == "reversible" and rows["kv_set"]["contract"]
    assert rows["kv_get"]["class"] == "read_only"
    with pytest.raises(ConfigError, match="is a draft"):
        load_contracts(draft)
    text = draft.read_text()
    assert "# server hints: read_only_hint=True, idempotent_hint=True" in text
    draft.write_text(text.replace("reviewed = false\n", ""))
    reviewed = load_contracts(draft).tools
    assert set(reviewed) == {t for t, r in rows.items() if not r["contract"]}
    assert "peek" in reviewed and "kv_set" not in reviewed
    assert {c.reversibility for c in reviewed.values()} == {"irreversible"}


def test_core_audit_text_strict_and_an_existing_draft_is_never_overwritten(kv: KvSetup) -> None:
    """--strict exits 1 when a tool has no contract; an existing --suggest file is refused with
    a one-line error naming it (no traceback) and keeps its content."""
    out = amends(kv, "--mcp-config", str(kv.config), "--strict")
    assert out.returncode == 1, out.stderr[-2000:]
    line = next(x for x in out.stdout.splitlines() if x.startswith("kv_peek"))
    assert "irreversible (no contract)" in line and "read_only_hint=True" in line
    draft = kv.dir / "reviewed.toml"
    draft.write_text("# a person's reviewed contracts\n")
    out = amends(kv, "--mcp-config", str(kv.config), "--suggest", str(draft))
    assert out.returncode == 2
    assert f"--suggest {str(draft)!r} already exists" in out.stderr
    assert "Traceback" not in out.stderr
    assert draft.read_text() == "# a person's reviewed contracts\n"


def test_core_audit_suggest_needs_the_gateway_config(tmp_path: Path) -> None:
    """--suggest alone, or --catalog with --mcp-config, is a clear one-line error."""
    setup = KvSetup(tmp_path, tmp_path / "g.toml", tmp_path / "s.json", tmp_path / "x.db")
    out = amends(setup, "--suggest", "draft.toml")
    assert out.returncode == 2 and "--mcp-config gateway.toml --suggest draft.toml" in out.stderr
    out = amends(setup, "--mcp-config", "g.toml", "--catalog", "c.toml")
    assert out.returncode == 2 and "not both" in out.stderr
    assert not (tmp_path / "draft.toml").exists()
