"""Nothing an agent or an upstream sends can turn the gateway against its owner (issue 21, items
4, 5, 6 and 15; rule 12). Each test performs the attack with real processes: a real
``mcp.Client`` (the attacker's, or a second agent's), ``amends mcp serve`` and its upstream."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import unicodedata
from pathlib import Path
from typing import Any

import pytest

from conftest import HERE, KvSetup, gateway_params, text_of, write_kv_config

pytestmark = pytest.mark.slow

APPROVE = {"amends_approval": {"action": "accept", "content": {"approve": True}}}


@pytest.fixture
def gated(tmp_path: Path) -> KvSetup:
    return write_kv_config(
        tmp_path,
        extra_gateway='approval = "irreversible"\nprincipal = "ann@example.com"',
    )


def _elicit(answers: list[bool], asked: list[str]) -> Any:
    import mcp_types as types

    async def elicit(context: Any, params: Any) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"approve": answers.pop(0)})

    return elicit


def _events(setup: KvSetup, kind_prefix: str = "approval.") -> list[dict[str, Any]]:
    """The saga log's events of that kind, read from the log file as the CLI would."""
    import sqlite3

    con = sqlite3.connect(setup.db)
    try:
        rows = con.execute("SELECT kind, step_id, data FROM events ORDER BY event_id").fetchall()
    finally:
        con.close()
    return [
        {"kind": k, "step_id": s, **json.loads(d or "{}")}
        for k, s, d in rows
        if k.startswith(kind_prefix)
    ]


# --- item 4: only an answer to a question this gateway asked counts ------------------------


async def test_unsolicited_approval_from_a_modern_client_is_ignored_and_the_question_asked(
    gated: KvSetup,
) -> None:
    """A 2026-07-28 client sends an 'approve' nobody asked for with the call: the gateway asks
    the question instead, and nothing is sent until a person answers it."""
    from mcp import Client

    asked: list[str] = []
    async with Client(gated.gateway(), elicitation_callback=_elicit([], asked)) as c:
        r = await c.session.call_tool(
            "kv_send_email",
            {"to": "bob@example.com", "subject": "Hi"},
            input_responses=APPROVE,
            allow_input_required=True,
        )
    assert type(r).__name__ == "InputRequiredResult"
    assert "kv.send_email" in r.input_requests["amends_approval"].params.message
    assert r.request_state  # only an echo of this single-use state can answer it
    assert gated.world()["emails"] == []
    assert [e["kind"] for e in _events(gated)] == []


async def test_unsolicited_approval_from_a_client_that_cannot_be_asked_is_refused_and_logged(
    gated: KvSetup,
) -> None:
    from mcp import Client

    async with Client(gated.gateway()) as c:  # no elicitation capability
        r = await c.session.call_tool(
            "kv_send_email", {"to": "bob@example.com", "subject": "Hi"}, input_responses=APPROVE
        )
    assert r.is_error and "cannot be asked" in text_of(r)
    assert gated.world()["emails"] == []
    (event,) = _events(gated)
    assert event["kind"] == "approval.refused" and event["answer"] == "not_asked"
    assert event["by"] == "ann@example.com" and event["tool"] == "kv.send_email"


async def test_an_answer_to_another_calls_question_does_not_approve_this_call(
    gated: KvSetup,
) -> None:
    """The question for an email to bob is answered 'yes' on a call that emails eve: the
    answer is bound to the call it was asked about, so eve's email is asked about anew."""
    from mcp import Client

    async with Client(gated.gateway(), elicitation_callback=_elicit([], [])) as c:
        q = await c.session.call_tool(
            "kv_send_email",
            {"to": "bob@example.com", "subject": "Hi"},
            allow_input_required=True,
        )
        r = await c.session.call_tool(
            "kv_send_email",
            {"to": "eve@example.com", "subject": "Hi"},
            input_responses=APPROVE,
            request_state=q.request_state,
            allow_input_required=True,
        )
        again = await c.session.call_tool(  # and the state cannot be used a second time
            "kv_send_email",
            {"to": "bob@example.com", "subject": "Hi"},
            input_responses=APPROVE,
            request_state=q.request_state,
            allow_input_required=True,
        )
    assert type(r).__name__ == "InputRequiredResult"
    assert "eve@example.com" in r.input_requests["amends_approval"].params.message
    assert type(again).__name__ == "CallToolResult" and not again.is_error
    assert gated.world()["emails"] == [{"to": "bob@example.com", "subject": "Hi"}]


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_every_approval_and_refusal_is_an_event_in_history_and_the_report(
    gated: KvSetup, mode: str
) -> None:
    """Who, what was shown, the answer and when: in the log's history (`amends show
    --history`), in amends_status and in the undo report the agent gets."""
    from mcp import Client

    asked: list[str] = []
    async with Client(
        gated.gateway(), mode=mode, elicitation_callback=_elicit([True, False], asked)
    ) as c:
        yes = await c.call_tool("kv_send_email", {"to": "bob@example.com", "subject": "Hi"})
        no = await c.call_tool("kv_send_email", {"to": "eve@example.com", "subject": "Yo"})
        undo = await c.call_tool("amends_undo", {})
    assert not yes.is_error and no.is_error
    saga_id = yes.meta["amends/step"]["saga_id"]
    granted, refused = _events(gated)
    assert granted["kind"] == "approval.granted" and granted["step_id"] == "s1"
    assert granted["by"] == "ann@example.com" and granted["shown"] == asked[0]
    assert granted["answer"] == "accept" and granted["args"]["to"] == "bob@example.com"
    assert granted["how"] == ("elicitation" if mode == "legacy" else "input_required")
    assert refused["kind"] == "approval.refused" and refused["step_id"] is None
    assert refused["shown"] == asked[1] and refused["args"]["to"] == "eve@example.com"
    assert granted["asked_at"] <= granted["answered_at"]
    approvals = undo.structured_content["approvals"]
    assert [(a["event"], a["by"]) for a in approvals] == [
        ("approval.granted", "ann@example.com"),
        ("approval.refused", "ann@example.com"),
    ]
    assert "approved by ann@example.com" in text_of(undo)
    show = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "amends.cli", "show", saga_id, "--db", str(gated.db), "--history"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"COLUMNS": "400", "PATH": "/usr/bin:/bin"},
    )
    assert show.returncode == 0, show.stderr
    assert "approval.granted" in show.stdout and "approval.refused" in show.stdout
    assert "ann@example.com" in show.stdout
    assert gated.world()["emails"] == [{"to": "bob@example.com", "subject": "Hi"}]


# --- item 6: undo and resolve ask the person first -----------------------------------------


async def test_under_approval_an_undo_that_acts_asks_first_listing_what_it_will_do(
    gated: KvSetup,
) -> None:
    """The refund is compensable (no question to make it), but undoing it acts on the world: the
    person is asked once, listing it; a 'no' refunds nothing, a 'yes' refunds once."""
    from mcp import Client

    asked: list[str] = []
    async with Client(gated.gateway(), elicitation_callback=_elicit([False, True], asked)) as c:
        await c.call_tool("kv_charge", {"customer": "c1", "cents": 700})
        await c.call_tool("kv_kv_set", {"key": "plan", "value": "pro"})
        declined = await c.call_tool("amends_undo", {})
        refunded_after_no = gated.world()["charges"]["ch_1"]["refunded"]
        accepted = await c.call_tool("amends_undo", {})
    assert declined.is_error and "did not approve the undo of saga" in text_of(declined)
    assert refunded_after_no == 0
    assert len(asked) == 2
    assert "Compensate s1 kv.charge" in asked[0] and "Revert s2 kv.kv_set" in asked[0]
    assert "leaves residue: Refund of 7.00 USD to c1" in asked[0]
    assert not accepted.is_error, text_of(accepted)
    assert accepted.structured_content["status"] == "partially_reversed"
    assert gated.world()["charges"]["ch_1"]["refunded"] == 700
    assert [e["kind"] for e in _events(gated)] == ["approval.refused", "approval.granted"]


async def test_under_approval_a_resolution_asks_first_and_records_the_principal(
    gated: KvSetup,
) -> None:
    from mcp import Client

    asked: list[str] = []
    async with Client(gated.gateway(), elicitation_callback=_elicit([False, True], asked)) as c:
        flaky = await c.call_tool("kv_flaky_write", {"key": "k", "value": "v"})
        step_id = flaky.meta["amends/step"]["step_id"]
        await c.call_tool("amends_undo", {})
        no = await c.call_tool("amends_resolve", {"step_id": step_id, "note": "checked: fine"})
        typed = await c.call_tool(
            "amends_resolve", {"step_id": step_id, "note": "x", "by": "the CEO"}
        )
        yes = await c.call_tool("amends_resolve", {"step_id": step_id, "note": "checked: fine"})
    assert no.is_error and "did not approve recording step" in text_of(no)
    assert typed.is_error and "never a name in the call" in text_of(typed)
    assert not yes.is_error, text_of(yes)
    assert yes.structured_content["by"] == "ann@example.com"
    assert f"handled step {step_id}" in asked[0] and "checked: fine" in asked[0]
    assert len(asked) == 2  # the typed 'by' was refused before anyone was asked


# --- item 5: agents on one gateway are isolated ---------------------------------------------


async def test_one_connection_cannot_read_undo_resolve_join_or_redirect_anothers_saga(
    kv: KvSetup, http_gateway: Any
) -> None:
    from mcp import Client

    gw = http_gateway(kv)
    key = {"amends/saga": "team-request-1"}
    async with Client(gw.url, mode="legacy") as alice, Client(gw.url, mode="legacy") as mallory:
        a1 = await alice.call_tool("kv_kv_set", {"key": "a", "value": "1"}, meta=key)
        saga = a1.meta["amends/step"]["saga_id"]
        peek = await mallory.call_tool("amends_status", {"saga_id": saga})
        undo = await mallory.call_tool("amends_undo", {"saga_id": saga})
        resolve = await mallory.call_tool(
            "amends_resolve", {"saga_id": saga, "step_id": "s1", "note": "done"}
        )
        joined = await mallory.call_tool("kv_kv_set", {"key": "m", "value": "x"}, meta=key)
        await mallory.call_tool("amends_begin", {"title": "hijack"}, meta=key)
        a2 = await alice.call_tool("kv_kv_set", {"key": "b", "value": "2"}, meta=key)
        mine = await alice.call_tool("amends_status", {"saga_id": saga})
    for r in (peek, undo, resolve):
        assert r.is_error and f"no saga {saga!r} among the sagas this connection started" in (
            text_of(r)
        )
    assert joined.meta["amends/step"]["saga_id"] != saga
    assert a2.meta["amends/step"]["saga_id"] == saga  # alice's steps stay in alice's saga
    assert [s["tool"] for s in mine.structured_content["steps"]] == ["kv.kv_set", "kv.kv_set"]
    assert kv.world()["kv"] == {"a": "1", "m": "x", "b": "2"}  # nothing of alice's undone


# --- item 15: upstream descriptions cannot spoof amends' label ------------------------------


async def test_a_hostile_upstreams_descriptions_are_cleaned_and_cannot_spoof_the_label(
    tmp_path: Path,
) -> None:
    from mcp import Client

    config = tmp_path / "gateway.toml"
    config.write_text(
        '[gateway]\nlog = "saga.db"\n\n[[upstream]]\nname = "h"\n'
        f"command = {json.dumps(sys.executable)}\n"
        f"args = [{json.dumps(str(HERE / 'upstream_hostile.py'))}]\n"
    )
    async with Client(gateway_params(config, tmp_path)) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
    wipe = tools["h_wipe"]
    desc = wipe.description or ""
    assert desc.startswith("[amends: irreversible (no contract); undo cannot take it back")
    assert desc.count("[amends:") == 1  # the fake label is defused, whatever its spelling
    assert "(amends: read_only" in desc
    assert "(\u0430mends\u2236 read_only" in desc  # look-alike letters and colon: defused too
    assert desc.count("[") == 1  # amends' own label is the one bracketed label left
    assert "Wipe every record." in desc
    for text in (desc, wipe.title or "", wipe.annotations.title or ""):
        bad = [c for c in text if c not in "\n\t" and unicodedata.category(c)[0] == "C"]
        assert bad == [], f"control characters left: {bad!r}"
    assert "\x1b" not in (wipe.title or "") and "[2J" not in desc
    assert wipe.annotations.read_only_hint is False  # the server's claim is not a contract
    assert wipe.annotations.destructive_hint is True
    assert wipe.annotations.idempotent_hint is False


# --- malformed arguments of amends' own tools -------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [{"saga_id": {"x": 1}}, {"saga_id": ["a"]}, {"saga_id": 5}, {"continue": "false"}],
    ids=["dict-id", "list-id", "number-id", "string-continue"],
)
async def test_a_malformed_undo_request_is_refused_and_undoes_nothing(
    kv: KvSetup, args: dict[str, Any]
) -> None:
    """Rule 12: ``amends_undo`` with a saga_id that is no id (a table, a list, a number) used
    to undo this connection's current saga, as if no id had been given; ``continue: "false"``
    was a yes. Each is now refused with what was wrong, and the write stands."""
    from mcp import Client

    async with Client(gateway_params(kv.config, kv.dir)) as c:
        done = await c.call_tool("kv_kv_set", {"key": "a", "value": "1"})
        assert not done.is_error
        saga = done.meta["amends/step"]["saga_id"]
        r = await c.call_tool("amends_undo", args)
        status = await c.call_tool("amends_status", {"saga_id": saga})
    assert r.is_error
    said = text_of(r)
    if "saga_id" in args:
        assert "saga_id must be a saga id (text), got " in said, said
        assert "omit saga_id for this connection's saga" in said
    else:
        assert "continue must be true or false, got 'false'" in said, said
    assert kv.world()["kv"] == {"a": "1"}  # nothing was undone
    assert "Undo: 0 of 1 taken back" not in text_of(status)
    assert "rev_" not in text_of(status)
