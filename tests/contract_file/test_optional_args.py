"""Issue 24 item 11 (the language side): a template over an optional argument has a default
(``{args.folder|default:inbox}``), so a call that omits the argument is not refused; a template
without one refuses the call in the contract's own words, never Python's; and
``amends mcp audit --json`` puts the class value in ``class`` (its label in ``label``).
Through a real gateway in front of an ordinary mcp 2.x server."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from contract_setup import Plain, plain_gateway, text_of

pytestmark = pytest.mark.slow

MAIL = """
[[tool]]
name = "mail_get"
reversibility = "read_only"

[[tool]]
name = "mail_archive"                     # folder is optional (the server's default: inbox)
describe = "Archive message {message_id}"
reversibility = "reversible"
resources = ["mail:{args.folder|default:inbox}"]
inverse = { tool = "mail_move", args = { message_id = "{args.message_id}", folder = "{args.folder|default:inbox}" } }
expect = { probe = "mail_get", args = { message_id = "{args.message_id}" }, path = "folder", equals = "archive" }

[[tool]]
name = "mail_move"
reversibility = "irreversible"
resources = ["mail:{args.folder}"]        # no default: a call without folder is refused
"""  # noqa: E501


@pytest.fixture
def mail(tmp_path: Path) -> Plain:
    return plain_gateway(tmp_path, MAIL)


async def test_a_template_default_fills_an_omitted_optional_argument(mail: Plain) -> None:
    from mcp import Client

    async with Client(mail.gateway()) as c:
        r = await c.call_tool("mail_archive", {"message_id": "m1"})
        assert not r.is_error, text_of(r)
        undo = await c.call_tool("amends_undo", {})
    assert undo.structured_content["status"] == "fully_reversed", undo.structured_content
    assert mail.world()["mail"]["m1"] == {"folder": "inbox"}  # moved back where it was
    dump = mail.dump()
    assert '"resources":["mail:inbox"]' in dump.replace(" ", "")
    assert "|default" not in dump  # filled, never stored as a template


async def test_a_missing_argument_without_default_is_refused_in_the_contracts_words(
    mail: Plain,
) -> None:
    """Nothing reaches the upstream; the message names the argument and the default syntax,
    and no Python (no KeyError, no exception class, no 'resources function')."""
    from mcp import Client

    async with Client(mail.gateway()) as c:
        r = await c.call_tool("mail_move", {"message_id": "m1"})
    said = text_of(r)
    assert r.is_error
    assert (
        "template '{args.folder}' needs the argument 'folder', which this call did not pass; "
        "pass it, or give the template a default, e.g. '{args.folder|default:...}'"
    ) in said, said
    for python in ("KeyError", "Error(", "resources function", "amends.", "Traceback"):
        assert python not in said, said
    assert mail.world()["journal"] == []


def test_audit_json_puts_the_class_value_in_class_and_the_label_apart(mail: Plain) -> None:
    cmd = ["mcp", "audit", "--config", str(mail.config), "--json"]
    out = subprocess.run(
        [sys.executable, "-m", "amends.cli", *cmd],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(mail.dir),
    )
    assert out.returncode == 0, out.stderr[-2000:]
    rows = {r["tool"]: r for r in json.loads(out.stdout)}
    assert (rows["mail_archive"]["class"], rows["mail_archive"]["label"]) == (
        "reversible",
        "reversible",
    )
    assert (rows["note_set"]["class"], rows["note_set"]["label"]) == (
        "irreversible",
        "irreversible (no contract)",
    )
    assert {r["class"] for r in rows.values()} <= {
        "read_only",
        "reversible",
        "compensable",
        "irreversible",
    }
