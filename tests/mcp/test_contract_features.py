"""Contract declarations through the gateway: undo order (rule 3), sensitive arguments
(rule 11), and a person resolving an in-doubt step then continuing the reversal (rule 6)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from conftest import KV_CONTRACTS, KvSetup, text_of, write_kv_config

pytestmark = pytest.mark.slow


@pytest.fixture
def kv_extra(tmp_path: Path) -> KvSetup:
    """The kv contracts plus: charge's refund waits for kv_set's inverse; send_email has a
    sensitive subject."""
    text = KV_CONTRACTS.read_text()
    text = text.replace(
        '[[tool]]\nname = "charge"\nreversibility = "compensable"\n',
        '[[tool]]\nname = "charge"\nreversibility = "compensable"\nundo_after = ["kv_set"]\n',
    )
    text += (
        '\n[[tool]]\nname = "send_email"\nreversibility = "irreversible"\n'
        'sensitive = ["subject"]\n'
        'acknowledge = { who = "the sender", parties = ["{args.to}"] }\n'
    )
    contracts = tmp_path / "contracts.toml"
    contracts.write_text(text)
    setup = write_kv_config(tmp_path)
    setup.config.write_text(setup.config.read_text().replace(str(KV_CONTRACTS), str(contracts)))
    return setup


async def test_undo_after_blocks_the_refund_when_the_inverse_it_waits_for_drifted(
    kv_extra: KvSetup,
) -> None:
    """rule 3: the charge's compensation waits for kv_set's inverse; that one drifted, so the
    refund is blocked, not sent."""
    from mcp import Client

    async with Client(kv_extra.gateway()) as c:
        await c.call_tool("kv_kv_set", {"key": "deal", "value": "won"})
        await c.call_tool("kv_charge", {"customer": "c1", "cents": 100})
        kv_extra.human_sets("deal", "reopened by a person")
        undo = await c.call_tool("amends_undo", {})
    states = {s["tool"]: s["state"] for s in undo.structured_content["steps"]}
    assert states == {"kv.kv_set": "drifted", "kv.charge": "blocked"}
    assert kv_extra.world()["charges"]["ch_1"]["refunded"] == 0


async def test_sensitive_argument_never_reaches_the_log_or_the_agent_reports(
    kv_extra: KvSetup,
) -> None:
    """rule 11: the upstream gets the subject; the saga log and amends_status never hold it."""
    from mcp import Client

    secret = "card 4111-1111-1111-1111"
    async with Client(kv_extra.gateway()) as c:
        r = await c.call_tool("kv_send_email", {"to": "bob@example.com", "subject": secret})
        status = await c.call_tool("amends_status", {})
        undo = await c.call_tool("amends_undo", {})
    assert not r.is_error
    assert kv_extra.world()["emails"] == [{"to": "bob@example.com", "subject": secret}]
    assert secret not in text_of(status) and secret not in str(status.structured_content)
    assert secret not in str(undo.structured_content)
    con = sqlite3.connect(kv_extra.db)
    try:
        dumped = "\n".join(con.iterdump())
    finally:
        con.close()
    assert secret not in dumped
    assert "bob@example.com" in dumped  # the log does hold the step (not an empty file)


async def test_resolve_an_in_doubt_step_then_continue(kv: KvSetup) -> None:
    """amends_resolve records who handled the manual action -- the gateway's principal, never
    a name the agent typed (issue 21 item 5) -- and the report lists it as handled. A
    continuation afterwards has nothing left to attempt (the only step was in doubt, now handled
    by a person) and says so (issue 23), rather than running a continuation."""
    from mcp import Client

    kv.config.write_text(
        kv.config.read_text().replace(
            'title = "kv session"', 'title = "kv session"\nprincipal = "ann@example.com"'
        )
    )
    async with Client(kv.gateway()) as c:
        flaky = await c.call_tool("kv_flaky_write", {"key": "k", "value": "v"})
        step_id = flaky.meta["amends/step"]["step_id"]
        undo = await c.call_tool("amends_undo", {})
        resolved = await c.call_tool("amends_resolve", {"step_id": step_id, "note": "checked"})
        again = await c.call_tool("amends_undo", {"continue": True})
        status = await c.call_tool("amends_status", {})
    assert undo.structured_content["steps"][0]["state"] == "in_doubt"
    assert not resolved.is_error, text_of(resolved)
    assert resolved.structured_content["by"] == "ann@example.com"
    assert again.is_error and "nothing to continue" in text_of(again)
    report = status.structured_content["report"]
    assert "ann@example.com" in str(report)


async def test_the_approval_question_never_shows_a_sensitive_argument(kv_extra: KvSetup) -> None:
    """rule 11 holds for the approval gate too: the user is asked without the secret."""
    import mcp_types as types

    from mcp import Client

    text = kv_extra.config.read_text()
    kv_extra.config.write_text(
        text.replace('title = "kv session"', 'title = "kv session"\napproval = "irreversible"')
    )
    asked: list[str] = []

    async def elicit(context: object, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"approve": True})

    secret = "card 4111-1111-1111-1111"
    async with Client(kv_extra.gateway(), elicitation_callback=elicit) as c:
        r = await c.call_tool("kv_send_email", {"to": "bob@example.com", "subject": secret})
    assert not r.is_error
    assert len(asked) == 1 and "bob@example.com" in asked[0]
    # the marker the docs and the log use (issue 24 item 11)
    assert secret not in asked[0] and "subject='[redacted:subject]'" in asked[0]


async def test_a_contract_that_cannot_be_filled_is_reported_with_its_cause(tmp_path: Path) -> None:
    """rule 2 and rule 8: the write happened, its inverse cannot be filled in; the step is
    irreversible, its effect stands, and the manual action names the real cause."""
    from mcp import Client

    contracts = tmp_path / "contracts.toml"
    contracts.write_text(
        '[[tool]]\nname = "kv_get"\nreversibility = "read_only"\n'
        '[[tool]]\nname = "kv_set"\nreversibility = "reversible"\n'
        'inverse = { tool = "kv_set", args = { key = "{args.key}", value = "{result.nope}" } }\n'
        'expect = { probe = "kv_get", args = { key = "{args.key}" }, path = "value", '
        'equals = "{args.value}" }\n'
    )
    setup = write_kv_config(tmp_path)
    setup.config.write_text(setup.config.read_text().replace(str(KV_CONTRACTS), str(contracts)))
    async with Client(setup.gateway()) as c:
        r = await c.call_tool("kv_kv_set", {"key": "k", "value": "v"})
        undo = await c.call_tool("amends_undo", {})
    assert not r.is_error  # the write happened and the agent gets its result
    report = undo.structured_content
    assert report["status"] == "cannot_undo"
    assert report["steps"][0]["state"] == "acknowledged"
    what = report["manual_actions"][0]["what"]
    assert "could not be applied" in what and "'nope'" in what
    assert setup.world()["kv"] == {"k": "v"}
