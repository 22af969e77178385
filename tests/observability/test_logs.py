"""Issue 28 item 3: one JSON line per reversal event (``--log-format json``'s formatter on the
``amends.events`` logger): every line parses, names its event, carries no secret and no
control character, and the last one sums up the report."""

from __future__ import annotations

import json
import logging
import re
from typing import Any

import pytest
from otel_capture import Lines
from otel_world import CARD, otel_world, scene

import amends
from amends._telemetry import JsonLines, clean

FAST = amends.RetryPolicy(initial_backoff=0.001, max_backoff=0.01, jitter=0.0)
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


async def test_an_undo_writes_one_json_line_per_reversal_event_and_no_secret(
    lines: Lines,
) -> None:
    """started, then each compensation event the log got (dispatched before, the state after),
    then finished with the report's outcome and counts."""
    world, catalog = otel_world()
    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"), retry=FAST)
    saga_id = await scene(engine)
    world.core.human_edit("r2", "owner", "yan")
    report = await engine.undo(saga_id)
    history = [e for e in await engine.log.events(saga_id) if e.kind.startswith("compensation.")]
    await engine.close()

    got = lines.parsed()
    assert [e["event"] for e in got] == [
        "reversal.started",
        *(e.kind for e in history),
        "reversal.finished",
    ]
    assert all(e["logger"] == "amends.events" and e["level"] == "info" for e in got)
    assert all(e["saga_id"] == saga_id and e["reversal_id"] == report.reversal_id for e in got)
    comps = got[1:-1]
    assert [(e["step_id"], e["state"], e["attempts"]) for e in comps] == [
        (e.step_id, e.kind.removeprefix("compensation."), e.data.get("attempts", 0))
        for e in history
    ]
    tools = {s.step_id: s.tool for s in report.steps}
    assert all(e["tool"] == tools[e["step_id"]] for e in comps)
    released = next(e for e in comps if e["step_id"] == "s3" and e["state"] == "reverted")
    assert released["seconds"] >= 0  # the compensation's latency: from its dispatch to here
    finished = got[-1]
    assert finished["outcome"] == report.status.value == "cannot_undo"
    assert finished["states"] == {"reverted": 2, "compensated": 1, "drifted": 1, "acknowledged": 1}
    assert (finished["residue"], finished["manual_actions_open"], finished["tool_calls"]) == (
        len(report.residue),
        len(report.open_manual_actions),
        report.tool_calls,
    )
    for raw in lines.raw():
        assert raw.isascii() and raw.isprintable()
    assert CARD not in "\n".join(lines.raw())


async def test_a_failure_message_quoting_a_secret_and_a_terminal_escape_is_logged_clean(
    lines: Lines,
) -> None:
    """The vendor's message quotes the card and carries an escape sequence that would repaint a
    terminal: the line holds the step's detail with the card redacted (rule 11) and the escape
    shown as text (issue 11 item 6), in the raw line and in the parsed value alike."""
    world, catalog = otel_world()
    world.release_error = "\x1b[2J\x1b[32missuer said OK\u202e for card {card}"
    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"), retry=FAST)
    async with engine.saga("Hold a card") as saga:
        saga.call("card.hold", card=CARD, cents=700)
    report = await engine.undo(saga.id)
    await engine.close()
    assert report.steps[0].state.value == "failed"

    (failed,) = lines.events("compensation.failed")
    assert failed["detail"] == (
        "card.release failed permanently: \\x1b[2J\\x1b[32missuer said OK\\u202e for card "
        "[redacted:card]"
    )
    for raw in lines.raw():
        assert CARD not in raw and not CONTROL.search(raw)
    for e in lines.parsed():
        assert not CONTROL.search(json.dumps(e, ensure_ascii=False))


def test_the_json_formatter_writes_any_record_as_one_clean_line() -> None:
    """A record of another logger (the server's, uvicorn's access log) is one JSON line too:
    the message cleaned, an exception named by its type (its message may hold a secret)."""
    fmt = JsonLines()
    try:
        raise ValueError(f"card {CARD}")
    except ValueError:
        import sys

        exc_info = sys.exc_info()
    rec = logging.LogRecord(
        "amends.server", logging.ERROR, __file__, 1, "bad\nline\x07", (), exc_info
    )
    out = json.loads(fmt.format(rec))
    assert (out["logger"], out["level"], out["message"], out["error"]) == (
        "amends.server",
        "error",
        "bad\\nline\\x07",
        "ValueError",
    )
    access = logging.LogRecord(
        "uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5000", "GET", "/metrics", "1.1", 200), None,
    )  # fmt: skip
    out = json.loads(fmt.format(access))
    assert (out["client"], out["method"], out["path"], out["status"]) == (
        "127.0.0.1:5000",
        "GET",
        "/metrics",
        200,
    )
    assert CARD not in fmt.format(rec)


def test_a_record_whose_arguments_do_not_fit_its_format_is_still_one_json_line() -> None:
    """A library's record with one argument too many (or too few): logging's own error path
    printed a traceback and the arguments (a card, here) on stderr, in no JSON."""
    rec = logging.LogRecord(
        "some.library", logging.WARNING, __file__, 1, "charged %s", (CARD, "extra"), None
    )
    out = json.loads(JsonLines().format(rec))
    assert (out["logger"], out["level"], out["message"]) == (
        "some.library",
        "warning",
        "charged %s",
    )


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("plain", "plain"),
        ("\x1b[31mred", "\\x1b[31mred"),
        ("a\u202eb", "a\\u202eb"),
        ({"k\n": ["\x00", 1, None]}, {"k\\n": ["\\x00", 1, None]}),
        ("a\u2028b\u2029", "a\\u2028b\\u2029"),  # a line break to many readers
        ("t\ud800x", "t\\ud800x"),  # a lone surrogate: no UTF-8 encoder can write it
    ],
)
def test_clean_shows_control_characters_as_text_in_keys_and_values(
    value: object, shown: object
) -> None:
    assert clean(value) == shown


async def test_a_retry_asked_and_a_follow_up_a_person_sends_are_json_lines_too(
    lines: Lines,
) -> None:
    """Every reversal event the log gets has its line, not only those of a run: a person's
    ``retry`` (``compensation.retry_asked``) and a follow-up a person sends after the reversal
    finished (``follow_up.dispatched``, ``follow_up.sent``) were in the log and on no line."""
    world, catalog = otel_world()
    world.release_error = "issuer down for card {card}"
    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"), retry=FAST)
    saga_id = await scene(engine)
    first = await engine.undo(saga_id)
    assert (first.step("s3").state.value, first.step("s1").state.value) == ("failed", "blocked")
    world.release_error = None  # a person fixed the issuer's side
    retried = await engine.retry(saga_id, ["s3"], by="ann")
    assert (retried.step("s3").state.value, retried.step("s1").state.value) == (
        "reverted",
        "reverted",
    )
    sent = await engine.send_follow_up(
        saga_id, "s5", tool="mail.send", by="ann@example.com",
        args={"to": "c1@acme.test", "subject": "Please disregard my welcome"},
    )  # fmt: skip
    assert sent.state == "sent"
    history = [e for e in await engine.log.events(saga_id) if e.reversal_id is not None]
    await engine.close()

    starts = {"reversal.requested", "reversal.continued"}
    want = [
        "reversal.started" if e.kind in starts else
        "reversal.finished" if e.kind == "reversal.done" else e.kind
        for e in history
    ]  # fmt: skip
    got = lines.parsed()
    assert [e["event"] for e in got] == want
    assert [e["event"] for e in got if not e["event"].startswith("reversal.")][-3:] == [
        "compensation.reverted",
        "follow_up.dispatched",
        "follow_up.sent",
    ]
    (asked,) = lines.events("compensation.retry_asked")
    assert (asked["step_id"], asked["tool"], asked["detail"]) == (
        "s3",
        "card.hold",
        "retry asked by ann",
    )
    follow_ups = [e for e in got if e["event"].startswith("follow_up.")]
    assert [(e["step_id"], e["tool"], e["state"]) for e in follow_ups] == [
        ("s5+f1", "mail.send", "dispatched"),
        ("s5+f1", "mail.send", "sent"),
    ]
    assert {e["reversal_id"] for e in got} == {first.reversal_id}
    assert CARD not in "\n".join(lines.raw())


@pytest.mark.parametrize(
    ("shape", "found"),
    [
        ("whole", "another value (not shown: the value expected there is a secret)"),
        ("inside", "{'name': 'api_key', 'value': '[redacted:value]', 'rotations': 2}"),
    ],
)
async def test_a_drift_where_a_secret_was_expected_never_quotes_what_the_world_shows_instead(
    lines: Lines, shape: str, found: str
) -> None:
    """The agent set an API key (a sensitive argument, expected back at undo time); an admin
    rotated it since. The drift detail quoted the world's value -- the new key -- in the
    report, the log and the JSON line: a secret no vault knows (rule 11). Expected as the whole
    value, it is not shown; inside a structure, its place shows the marker and the rest shows."""
    agent_key, rotated = "sk_agent_set_7Hq2", "sk_rotated_by_admin_9Zx4"
    store = {"api_key": "sk_before_agent_1Aa1"}
    rotations = {"api_key": 1}
    catalog = amends.Catalog()

    @catalog.tool("keys.read", reversibility="read_only")
    async def read(call: amends.Call, name: str) -> Any:
        if shape == "whole":
            return store[name]
        return {"name": name, "value": store[name], "rotations": rotations[name]}

    @catalog.tool(
        "keys.set",
        reversibility="reversible",
        sensitive=["value"],
        resolve_secret=lambda request: agent_key,  # the expectation's value, given back
    )
    async def set_key(call: amends.Call, name: str, value: str) -> None:
        call.inverse("keys.set", name=name, value=store[name])
        store[name] = value
        expected: Any = value
        if shape == "inside":
            expected = {"name": name, "value": value, "rotations": rotations[name]}
        call.expect("keys.read", {"name": name}, equals=expected)

    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"), retry=FAST)
    async with engine.saga("Rotate the key") as saga:
        saga.call("keys.set", name="api_key", value=agent_key)
    store["api_key"], rotations["api_key"] = rotated, 2  # an admin rotated it since
    report = await engine.undo(saga.id)
    history = await engine.log.events(saga.id)
    await engine.close()

    step = report.step("s1")
    assert step.state.value == "drifted"
    expected = (
        "'[redacted:value]'"
        if shape == "whole"
        else "{'name': 'api_key', 'rotations': 1, 'value': '[redacted:value]'}"
    )
    assert step.detail == (
        f"someone changed it since the agent acted: expected {expected}, found {found}; left "
        f"as it is"
    )
    assert store["api_key"] == rotated  # rule 4: never overwritten
    (drifted,) = lines.events("compensation.drifted")
    assert drifted["detail"] == step.detail
    everything = "\n".join([*lines.raw(), report.to_json(), repr([e.data for e in history])])
    assert rotated not in everything and agent_key not in everything
