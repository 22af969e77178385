"""Issue 26 item 2: messages meant for people carry no developer text. A contract violation
says "amends cannot check this step safely" (not "drifted", and no ``call.expect(...)`` in a
draft); an agent id is not labelled a person; an empty value reads sensibly; money is formatted;
the standalone HTML report keeps ids, tool names and violations in a details fold."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import amends
from amends.sandbox import World, sandbox_catalog

CRM: dict[str, dict[str, Any]] = {}

REVIEW = (
    "amends cannot check this step safely: its tool does not say how to see whether someone "
    "changed it since, so it is not undone blindly; a person must check it"
)


def crm_catalog() -> amends.Catalog:
    catalog = amends.Catalog()

    @catalog.tool("crm.read", reversibility="read_only")
    async def read(call: amends.Call, record_id: str, field: str) -> Any:
        return CRM[record_id].get(field)

    @catalog.tool(
        "crm.set", reversibility="reversible", describe="Set {field} of {record_id} to '{value}'"
    )
    async def set_(call: amends.Call, record_id: str, field: str, value: Any) -> None:
        before = CRM[record_id].get(field)
        CRM[record_id][field] = value
        call.inverse("crm.set", record_id=record_id, field=field, value=before)
        call.expect("crm.read", {"record_id": record_id, "field": field}, equals=value)

    @catalog.tool(
        "crm.blind_set",
        reversibility="reversible",
        describe="Set {field} of {record_id} to '{value}'",
    )
    async def blind(call: amends.Call, record_id: str, field: str, value: Any) -> None:
        before = CRM[record_id].get(field)
        CRM[record_id][field] = value
        call.inverse("crm.blind_set", record_id=record_id, field=field, value=before)
        # no call.expect(...), no call.no_drift_check(...): a contract violation (rule 4)

    return catalog


def run(actor: str) -> amends.UndoReport:
    CRM.clear()
    CRM["acme"] = {"stage": "lead"}  # no "plan" yet: its undo sets an empty value

    async def go() -> amends.UndoReport:
        engine = amends.Engine(crm_catalog(), log=amends.SqliteLog(":memory:"))
        async with engine.saga("Upgrade ACME", actor=actor) as saga:
            await saga.call("crm.set", record_id="acme", field="plan", value="gold")
            await saga.call("crm.blind_set", record_id="acme", field="stage", value="won")
        try:
            return await engine.undo(saga.id)
        finally:
            await engine.close()

    return asyncio.run(go())


def test_a_contract_violation_reads_cannot_check_safely_and_an_agent_is_no_person() -> None:
    report = run("agent:fulfilment")
    s1, s2 = report.steps
    # an empty field's undo reads sensibly, and it did run
    assert s1.inverse_description == "Set plan of acme to an empty value"
    assert (s1.state.value, CRM["acme"]["plan"]) == ("reverted", None)
    # the violation: nothing drifted; the state stays drifted for programs, people read words
    assert (s2.state.value, s2.detail) == ("drifted", REVIEW)
    assert s2.violation is not None and "call.expect(...)" in s2.violation  # for engineers
    assert s2.manual_action is not None
    assert s2.manual_action.to_dict() == {
        "step_id": "s2",
        "what": "Check \"Set stage of acme to 'won'\" by hand and undo it if it should not "
        "stand: amends cannot check this step safely, so it was not undone automatically.",
        "who": "the person who asked the fulfilment agent",
        "parties": [],
        "draft": "Hello team: \"Set stage of acme to 'won'\", done by an assistant acting for "
        "us, was not undone automatically because we cannot check it safely. Please tell us "
        "whether it still stands and whether it should be reverted.",
    }
    text = report.render("text")
    assert "  s2   Acknowledge not checked  Set stage of acme to 'won'\n" in text
    assert "agent:fulfilment" not in text
    page = report.render("html")
    fold = page.index("<details>")
    assert "<td class='state'>not checked</td>" in page
    for engineer in ("call.expect", report.saga_id, report.reversal_id, "<code>crm.set</code>"):
        assert page.index(engineer) > fold, engineer
    assert "drifted" not in page[:fold]


def test_a_person_actor_is_still_named() -> None:
    report = run("ann@acme.test")
    assert report.steps[1].manual_action is not None
    assert report.steps[1].manual_action.who == "the person who asked the agent (ann@acme.test)"


def test_the_standalone_html_report_puts_what_a_person_must_do_first() -> None:
    """Issue 26 item 7: needs a person, then residue, then the steps; money formatted."""
    world = World()
    catalog = sandbox_catalog(world)

    async def go() -> amends.UndoReport:
        engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"))
        async with engine.saga("Bill ACME", actor="agent:billing") as saga:
            await saga.call("payments.charge", customer="cus_acme", cents=240000)
            await saga.call("chat.post", channel="#sales", text="Billed ACME")
            await saga.call("mail.send", to="ann@acme.test", subject="Invoice", body="...")
        try:
            return await engine.undo(saga.id)
        finally:
            await engine.close()

    report = asyncio.run(go())
    page = report.render("html")
    charge = report.steps[0]
    assert charge.description == "Charge 2,400.00 USD to cus_acme"
    assert charge.inverse_description == "Refund 2,400.00 USD of charge ch_1"
    assert "240000" not in page[: page.index("<details>")]
    order = [page.index(h) for h in ("<h2>Needs a person</h2>", "<h2>What remains</h2>")]
    order.append(page.index("<h2>Steps</h2>"))
    assert order == sorted(order)
    assert page.index("<h1>") < order[0]


@pytest.mark.parametrize(
    ("template", "why"),
    [
        ("Charge {cents:>9} to {customer}", "{cents:>9}"),
        ("Charge {cents!r} to {customer}", "{cents!r}"),
    ],
)
def test_a_describe_format_other_than_cents_or_when_is_refused(template: str, why: str) -> None:
    catalog = amends.Catalog()
    with pytest.raises(amends.ContractError) as err:
        catalog.tool("pay.charge", describe=template)(lambda call, cents, customer: None)
    assert str(err.value) == (
        f"describe= of tool 'pay.charge' has the field {why}; the formats are :cents (an "
        f"amount in cents shown as money, {{cents:cents}} -> 2,400.00) and :when (an ISO time "
        f"for people, {{start:when}} -> 10 Dec 2026 16:00 UTC); e.g. "
        f"describe=\"Email '{{subject}}' to {{to}}\""
    )


@pytest.mark.parametrize(
    ("start", "said"),
    [
        ("2026-12-10T16:00:00Z", "Invite ann at 10 Dec 2026 16:00 UTC"),
        ("2026-12-10T17:00:00+01:00", "Invite ann at 10 Dec 2026 16:00 UTC"),
        ("2026-12-10T16:00", "Invite ann at 10 Dec 2026 16:00"),  # no zone: none claimed
        ("next tuesday", "Invite ann at next tuesday"),  # not a time: as it is
    ],
)
def test_a_when_field_reads_as_a_time_for_people_never_raw_iso(start: str, said: str) -> None:
    """Issue 26: people never read raw ISO timestamps ("at 2026-12-10T16:00:00Z")."""
    catalog = amends.Catalog()
    catalog.tool("cal.invite", describe="Invite {who} at {start:when}")(
        lambda call, who, start: None
    )
    assert catalog.describe("cal.invite", {"who": "ann", "start": start}) == said
