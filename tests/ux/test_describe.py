"""Plain-language steps (issue 17, item 1): ``describe=`` templates on contracts, a sensible
default, and every report and preview carrying the sentences."""

from __future__ import annotations

import inspect
import string
from pathlib import Path

import pytest

import amends
from amends.sandbox import World, sandbox_catalog
from amends.sandbox.catalog import DESCRIBE


def catalog_with_mail() -> tuple[amends.Catalog, list[str]]:
    sent: list[str] = []
    catalog = amends.Catalog()

    @catalog.tool("mail.send", describe="Email '{subject}' to {to}")
    async def send(call: amends.Call, to: str, subject: str) -> None:
        sent.append(to)
        call.acknowledge(who="the sender", parties=[to])

    @catalog.tool("kv.get", reversibility="read_only")
    async def get(call: amends.Call, key: str) -> str:
        return "v"

    @catalog.tool(
        "kv.set",
        reversibility="reversible",
        describe="Set {key} to {value} with token {token}",
        sensitive=["token"],
        resolve_secret=lambda req: "tok-SECRET",
    )
    async def put(call: amends.Call, key: str, value: str, token: str) -> None:
        call.inverse("kv.delete", key=key)
        call.expect("kv.get", {"key": key}, equals="v")

    @catalog.tool("kv.delete", reversibility="irreversible")
    async def delete(call: amends.Call, key: str) -> None:
        """Delete a key."""

    return catalog, sent


def test_a_template_is_filled_from_the_arguments() -> None:
    """describe= gives the sentence; a tool without one says its description (docstring) and
    its arguments; an unknown tool its name and arguments."""
    catalog, _ = catalog_with_mail()
    assert catalog.describe("mail.send", {"to": "bob@x.test", "subject": "Won"}) == (
        "Email 'Won' to bob@x.test"
    )
    assert catalog.describe("kv.delete", {"key": "k1"}) == "Delete a key (key='k1')"
    assert catalog.describe("kv.get", {"key": "k1"}) == "kv.get(key='k1')"
    assert catalog.describe("nowhere.tool", {"n": 3}) == "nowhere.tool(n=3)"


def test_a_sensitive_argument_is_never_in_a_sentence_even_when_the_template_names_it() -> None:
    """Rule 11: the template says {token}; the sentence shows the redaction marker."""
    catalog, _ = catalog_with_mail()
    text = catalog.describe("kv.set", {"key": "a", "value": "1", "token": "tok-SECRET"})
    assert text == "Set a to 1 with token [redacted:token]"


def test_a_template_naming_an_argument_not_passed_falls_back_to_the_default() -> None:
    """A sentence never fails a report: a missing field gives the default sentence."""
    catalog, _ = catalog_with_mail()
    assert catalog.describe("mail.send", {"to": "bob@x.test"}) == "mail.send(to='bob@x.test')"


@pytest.mark.parametrize(
    ("template", "fragment"),
    [
        ("", "must be a sentence"),
        (42, "must be a sentence"),
        ("Email {to", "not a valid template"),
        ("Email {0}", "fields name arguments"),
        ("Email {msg.to}", "fields name arguments"),
    ],
)
def test_a_bad_template_is_a_contract_error_naming_the_tool_and_an_example(
    template: object, fragment: str
) -> None:
    catalog = amends.Catalog()
    with pytest.raises(amends.ContractError) as err:
        catalog.register("mail.send", lambda call, to: None, describe=template)  # type: ignore[arg-type]
    assert fragment in str(err.value)
    assert "'mail.send'" in str(err.value)
    assert "describe=\"Email '{subject}' to {to}\"" in str(err.value)


async def test_the_report_and_the_preview_carry_the_step_and_inverse_sentences() -> None:
    """Each step of the preview and of the report says what it did and what undo does, in
    sentences; the text rendering shows them instead of tool names; no secret in any of it."""
    catalog, _ = catalog_with_mail()
    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"))
    async with engine.saga("Tell Bob") as saga:
        a = saga.call("kv.set", key="deal", value="won", token="tok-SECRET")
        saga.call("mail.send", to="bob@x.test", subject="Won", after=[a])
    preview = await engine.preview(saga.id)
    assert [(p.description, p.inverse_description) for p in preview.steps] == [
        ("Set deal to won with token [redacted:token]", "Delete a key (key='deal')"),
        ("Email 'Won' to bob@x.test", ""),
    ]
    assert preview.to_dict()["steps"][1]["description"] == "Email 'Won' to bob@x.test"
    report = await engine.undo(saga.id)
    assert [(s.description, s.inverse_description) for s in report.steps] == [
        ("Set deal to won with token [redacted:token]", "Delete a key (key='deal')"),
        ("Email 'Won' to bob@x.test", ""),
    ]
    text = report.render("text")
    assert "  s1   Revert      reverted     Set deal to won with token [redacted:token]\n" in text
    assert "       undo: Delete a key (key='deal')\n" in text
    assert "  s2   Acknowledge acknowledged Email 'Won' to bob@x.test\n" in text
    assert "'Email 'Won' to bob@x.test'" not in report.manual_actions[0].what
    assert report.manual_actions[0].what == "\"Email 'Won' to bob@x.test\" cannot be taken back"
    assert "tok-SECRET" not in report.to_json() + text + report.render("html")
    again = amends.UndoReport.from_dict(report.to_dict())
    assert again.steps == report.steps  # the sentences survive the log and the API
    await engine.close()


def test_every_sandbox_tool_has_a_template_over_its_own_arguments() -> None:
    """The sandbox catalog speaks in sentences, and no template names an argument the tool
    does not take (it would always fall back to the default)."""
    catalog = sandbox_catalog(World())
    for spec in catalog:
        assert spec.describe == DESCRIBE[spec.name]
        params = set(inspect.signature(spec.fn).parameters) - {"call"}
        fields = {f for _, f, _, _ in string.Formatter().parse(spec.describe) if f}
        assert fields <= params, (spec.name, fields - params)


def test_a_toml_tool_takes_describe_and_a_bad_one_names_the_file_and_tool(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        '[[tool]]\nname = "mail.send"\ndescribe = "Email \'{subject}\' to {to}"\n'
        '[tool.http]\nurl = "https://mail.example/send"\n'
    )
    catalog = amends.load_toml_catalog(path)
    assert catalog.describe("mail.send", {"to": "a@b", "subject": "Hi"}) == "Email 'Hi' to a@b"
    path.write_text(
        '[[tool]]\nname = "mail.send"\ndescribe = "Email {to"\n'
        '[tool.http]\nurl = "https://mail.example/send"\n'
    )
    with pytest.raises(amends.ConfigError) as err:
        amends.load_toml_catalog(path)
    assert str(path) in str(err.value) and "'mail.send'" in str(err.value)
    assert "describe=" in str(err.value)


def test_the_text_report_fits_80_columns_and_never_breaks_an_id() -> None:
    """Long sentences, details and drafts wrap under their row; every id stays whole."""
    long_id = "saga_" + "f" * 26
    step = amends.StepOutcome(
        "email_finance_team",
        "mail.send",
        "Acknowledge",
        amends.StepState.ACKNOWLEDGED,
        "irreversible: no call can take it back; message msg_0123456789abcdef0123 was "
        "delivered to finance@acme.example and ops@acme.example an hour ago",
        description="Email 'Q4 renewal: contract, invoice and onboarding schedule' to "
        "finance@acme.example",
        manual_action=amends.ManualAction(
            "email_finance_team",
            "Email cannot be taken back " * 4,
            "the sender",
            ("finance@acme.example",),
            "Please disregard my earlier message " * 4,
        ),
    )
    report = amends.UndoReport(long_id, "rev_" + "e" * 26, "A title " * 12, (step,))
    text = report.render("text")
    assert all(len(line) <= 80 for line in text.splitlines()), text
    for word in (long_id, "rev_" + "e" * 26, "msg_0123456789abcdef0123", "email_finance_team"):
        assert word in text.split() or any(word in w for w in text.split()), word


def test_a_multi_line_draft_keeps_its_line_breaks_in_the_text_report() -> None:
    """Wrapping at 80 columns never joins the paragraphs of a draft a person will send."""
    step = amends.StepOutcome(
        "s1",
        "mail.send",
        "Acknowledge",
        amends.StepState.ACKNOWLEDGED,
        "irreversible",
        manual_action=amends.ManualAction(
            "s1", "Email cannot be taken back", "the sender", (), "Hello Bob,\n\nIgnore it."
        ),
    )
    text = amends.UndoReport("saga_1", "rev_1", "", (step,)).render("text")
    assert "    draft: Hello Bob,\n\n    Ignore it.\n" in text


@pytest.mark.parametrize(
    ("template", "args"),
    [
        ("Email '{subject}' to {to}", {"subject": "Won", "to": "bob@acme.test"}),
        ("Email '{subject}' to {to}", {"subject": "", "to": None}),
        ("Set \"{field}\" to '{value}'", {"field": "stage", "value": None}),
        ("'{a}''{b}' and '{a}'", {"b": "", "a": None}),
        ("'{a}'{b}'", {"a": "", "b": ""}),
        ("'{a}'{b}'", {"b": "", "a": ""}),
        ("Charge {cents:cents} USD at {start:when}", {"cents": 240000, "start": "2026-12-10"}),
        ("Charge '{cents:cents}' of {{literal}} braces", {"cents": None}),
        ("Invite {people} to {title}", {"people": ["ann@acme.test", "bob@acme.test"], "title": 7}),
        ("Long {text}", {"text": "x" * 200}),
        ("Missing {nothere}", {"to": "x"}),
    ],
)
def test_a_compiled_template_fills_exactly_as_the_formatter_does(
    template: str, args: dict[str, object]
) -> None:
    """Issue 29: templates are parsed once; the sentence must be the one the formatter gives."""
    from amends import _describe

    got = _describe.sentence("t.x", args, template=template)
    try:
        want = _describe._Sentence().vformat(_describe._unquoted(template, args), (), args)
    except KeyError:
        want = _describe.sentence("t.x", args)  # the default, without a template
    assert got == want
    assert _describe._compiled(template, tuple(k for k, v in args.items() if v in (None, "")))


def test_a_template_the_compiler_cannot_take_is_still_filled_by_the_formatter() -> None:
    """A field with a conversion is left to ``string.Formatter`` (never a wrong sentence)."""
    from amends import _describe

    assert _describe._compiled("Set {value!r}", ()) is None
    assert _describe.sentence("t.x", {"value": "v"}, template="Set {value!r}") == "Set 'v'"
