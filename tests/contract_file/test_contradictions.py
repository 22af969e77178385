"""A contract file that says two things, or says one in a way amends cannot use, is refused
when it is loaded -- by both transports, naming the file, the tool, the key and the fix --
instead of being acted on half-way: a ``read_only`` tool with an inverse was reported "nothing
to take back" while its effect stood; ``{args.x|Upper}`` was sent as written; a residue's
``settles_in_days = "three"`` turned every step irreversible *after* its effect."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import amends
from amends.contract_file import read_file

WRITE = """
[[tool]]
name = "notes.get"
reversibility = "read_only"
http = { url = "http://127.0.0.1:9/notes/{args.id}", method = "GET" }

[[tool]]
name = "notes.delete"
reversibility = "irreversible"
http = { url = "http://127.0.0.1:9/notes/{args.id}", method = "DELETE" }

[[tool]]
name = "notes.add"
http = { url = "http://127.0.0.1:9/notes" }
"""

REVERSIBLE = """reversibility = "reversible"
no_drift_check = "a note only this saga can see"
"""
INVERSE = """[tool.inverse]
tool = "notes.delete"
args = { id = "{result.id}" }
"""

CASES = [
    pytest.param(
        'reversibility = "read_only"\n' + INVERSE,
        "tool 'notes.add' is 'read_only' but declares inverse; a read_only tool changes "
        'nothing, so there is nothing to take back: declare reversibility = "reversible" or '
        '"compensable" if a call can take it back, or remove inverse',
        id="read_only-with-inverse",
    ),
    pytest.param(
        'reversibility = "irreversible"\n' + INVERSE,
        "tool 'notes.add' is 'irreversible' but declares inverse; undo never calls anything "
        "for an irreversible tool",
        id="irreversible-with-inverse",
    ),
    pytest.param(
        INVERSE,
        "tool 'notes.add' is not declared (treated as irreversible) but declares inverse;",
        id="undeclared-with-inverse",
    ),
    pytest.param(
        'reversibility = "irreversible"\n'
        '[tool.expect]\nprobe = "notes.get"\nargs = { id = "{result.id}" }\nequals = 1\n',
        "tool 'notes.add' is 'irreversible' but declares expect;",
        id="irreversible-with-expect",
    ),
    pytest.param(
        'reversibility = "irreversible"\nno_drift_check = "why not"\n',
        "tool 'notes.add' is 'irreversible' but declares no_drift_check;",
        id="irreversible-with-no_drift_check",
    ),
    pytest.param(
        'reversibility = "read_only"\n[tool.acknowledge]\nwho = "the sender"\n',
        "tool 'notes.add' is 'read_only' but declares acknowledge;",
        id="read_only-with-acknowledge",
    ),
    pytest.param(
        REVERSIBLE + '[tool.inverse]\ntool = "notes.delete"\nargs = { id = "{result.id|Upper}" }\n',
        "tool 'notes.add' inverse: '{result.id|Upper}' in '{result.id|Upper}' is not a "
        "template field, so it would be sent as written; a field is {root.path} with optional "
        "filters (default, join, json, money)",
        id="field-with-unknown-filter-spelling",
    ),
    pytest.param(
        REVERSIBLE + '[tool.inverse]\ntool = "notes.delete"\nargs = { id = "{args.note-id}" }\n',
        "'{args.note-id}' in '{args.note-id}' is not a template field",
        id="field-with-a-dash",
    ),
    pytest.param(
        REVERSIBLE + INVERSE + '[tool.residue]\nwhat = "x"\nwhen = "{result.shared"\n',
        "tool 'notes.add' residue: '{result.shared' in '{result.shared' is not a template "
        "field, so it would be sent as written; a field is {root.path} with optional filters "
        "(default, join, json, money), e.g. '{args.record_id}' or '{args.to|join}'; it has no "
        "closing '}'",
        id="unclosed-field",
    ),
    pytest.param(
        REVERSIBLE + INVERSE + '[tool.residue]\nwhat = "Shared"\nsettles_in_days = "three"\n',
        "tool 'notes.add': residue.settles_in_days must be a number of days, got 'three'; "
        "e.g. settles_in_days = 3",
        id="residue-days-as-text",
    ),
    pytest.param(
        REVERSIBLE + INVERSE + '[tool.residue]\nwhat = "Shared"\nsettles_in_business_days = 1.5\n',
        "residue.settles_in_business_days must be a whole number of days, got 1.5",
        id="business-days-fraction",
    ),
    pytest.param(
        REVERSIBLE
        + '[tool.inverse]\ntool = "notes.delete"\nargs = { id = "{result.id}" }\n'
        + 'deadline = "tomorrow"\n',
        "tool 'notes.add': inverse.deadline must be an ISO-8601 time with an offset or seconds "
        "since the epoch, got 'tomorrow'",
        id="deadline-not-a-time",
    ),
    pytest.param(
        REVERSIBLE
        + '[tool.inverse]\ntool = "notes.delete"\nargs = { id = "{result.id}" }\n'
        + 'deadline = "2030-01-01T12:00:00"\n',
        "inverse.deadline must be an ISO-8601 time with an offset",
        id="deadline-without-offset",
    ),
    pytest.param(
        REVERSIBLE + '[tool.inverse]\ntool = "notes.delete"\nargs = { at = 2030-01-01 }\n',
        "tool 'notes.add': inverse.args.at is the TOML date/time datetime.date(2030, 1, 1), "
        'which is not JSON data; write it as a string, e.g. "2030-01-01"',
        id="toml-date-in-arguments",
    ),
    pytest.param(
        '[tool.acknowledge]\nwho = ["the sender"]\n',
        "tool 'notes.add': acknowledge.who must be who can act, as text, got ['the sender']; "
        'e.g. who = "the sender"',
        id="acknowledge-who-a-list",
    ),
    pytest.param(
        '[tool.acknowledge]\nwho = "the sender"\nparties = [1]\n',
        "acknowledge.parties must be a list of names, got [1]",
        id="acknowledge-parties-numbers",
    ),
    pytest.param(
        REVERSIBLE
        + '[[tool.capture]]\nname = "old"\ntool = "notes.get"\nargs = { id = "{args.id}" }\n'
        + '[tool.inverse]\ntool = "notes.delete"\nargs = { id = "{capture.olde.id}" }\n',
        "tool 'notes.add': template '{capture.olde.id}' reads capture 'olde', which this tool "
        "does not declare (declared: old); fix the name or declare it in [[tool.capture]]",
        id="undeclared-capture-name",
    ),
    pytest.param(
        REVERSIBLE
        + INVERSE
        + '[[tool.observe]]\nname = "after"\ntool = "notes.get"\nargs = { id = "{result.id}" }\n'
        + '[tool.residue]\nwhat = "Note {observed.afterr.text} stays in the history"\n',
        "template '{observed.afterr.text}' reads observed 'afterr', which this tool does not "
        "declare (declared: after); fix the name or declare it in [[tool.observe]]",
        id="undeclared-observation-name",
    ),
    pytest.param(
        'reversibility = "reversible"\n'
        + INVERSE
        + '[tool.expect]\nprobe = "notes.get"\nargs = { id = "{result.id}" }\nequals = 1\n'
        + "path = 2.5\n",
        "tool 'notes.add' expect: path must be a key or a list of keys, got 2.5",
        id="expect-path-a-float",
    ),
]


@pytest.mark.parametrize(("body", "message"), CASES)
def test_a_contradictory_or_unusable_http_contract_is_refused_at_load(
    tmp_path: Path, body: str, message: str
) -> None:
    path = tmp_path / "notes.toml"
    path.write_text(WRITE + body)
    with pytest.raises(amends.ConfigError) as exc:
        amends.load_toml_catalog(path)
    assert str(path) in str(exc.value)
    assert message in str(exc.value)


@pytest.mark.parametrize(("body", "message"), CASES)
def test_the_mcp_transport_refuses_the_same_contract_with_the_same_words(
    tmp_path: Path, body: str, message: str
) -> None:
    path = tmp_path / "notes.toml"
    text = "\n".join(line for line in (WRITE + body).splitlines() if not line.startswith("http"))
    path.write_text(text + "\n")
    with pytest.raises(amends.ConfigError) as exc:
        read_file(path, transport="mcp")
    assert str(path) in str(exc.value)
    assert message in str(exc.value)


def test_the_cli_says_it_in_one_line_without_a_traceback(tmp_path: Path) -> None:
    path = tmp_path / "notes.toml"
    path.write_text(WRITE + 'reversibility = "read_only"\n' + INVERSE)
    done = subprocess.run(
        [sys.executable, "-m", "amends", "audit", "--catalog", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith(f"amends: error: {path}: tool 'notes.add' is 'read_only'")


def test_well_formed_neighbours_of_those_contracts_still_load(tmp_path: Path) -> None:
    """What the checks must not refuse: literal braces that start no field, a field whose
    time is filled when the step runs, a TOML datetime with an offset as a deadline, an
    irreversible tool that observes what it did for its acknowledgement."""
    path = tmp_path / "notes.toml"
    path.write_text(
        WRITE
        + REVERSIBLE
        + '[tool.inverse]\ntool = "notes.delete"\n'
        + 'args = { id = "{result.id}", body = "{\\"json\\": 1} { } {{args.id}}" }\n'
        + "deadline = 2030-01-01T12:00:00Z\n"
        + '[tool.residue]\nwhat = "Shared with {args.to|join}"\n'
        + 'settles_in_days = "{result.days}"\nparties = "{args.to}"\n'
        + '\n[[tool]]\nname = "notes.mail"\nreversibility = "irreversible"\n'
        + 'http = { url = "http://127.0.0.1:9/mail" }\n'
        + '[[tool.observe]]\nname = "sent"\ntool = "notes.get"\nargs = { id = "{result.id}" }\n'
        + '[tool.acknowledge]\nwho = "the sender"\nwhat = "Mail {observed.sent} went out"\n'
    )
    catalog = amends.load_toml_catalog(path)
    assert catalog.get("notes.add").reversibility is amends.Reversibility.REVERSIBLE
    assert catalog.get("notes.mail").reversibility is amends.Reversibility.IRREVERSIBLE
