"""Money is written with its currency's own decimals (ISO 4217 minor units): an amount of
1200 minor units is "1,200 JPY", "12.00 USD", "1.200 KWD" -- `|money` wrote every currency as
USD with two decimals and `describe=` knew only `{cents:cents}` (two decimals)."""

from __future__ import annotations

import pytest

import amends
from amends import ConfigError
from amends._money import money
from amends.contract_file import templates


@pytest.mark.parametrize(
    ("amount", "currency", "words"),
    [
        (1200, "JPY", "1,200 JPY"),
        (1200, "USD", "12.00 USD"),
        (1200, "KWD", "1.200 KWD"),
        (1234567, "BHD", "1,234.567 BHD"),
        (5, "CLF", "0.0005 CLF"),
        (-250, "EUR", "-2.50 EUR"),
        (10**17 + 1, "USD", "1,000,000,000,000,000.01 USD"),
        (10**30 + 7, "KWD", "1,000,000,000,000,000,000,000,000,000.007 KWD"),
        (-(10**20) - 1, "JPY", "-100,000,000,000,000,000,001 JPY"),
    ],
)
def test_money_uses_the_currencys_minor_units(amount: int, currency: str, words: str) -> None:
    assert money(amount, currency) == words


def test_the_money_filter_takes_a_currency_and_refuses_what_is_not_a_code() -> None:
    scope = {"args": {"amount": 1200}}
    assert templates.fill("Refund of {args.amount|money:JPY}", scope, "t") == "Refund of 1,200 JPY"
    assert templates.fill("Refund of {args.amount|money:KWD}", scope, "t") == "Refund of 1.200 KWD"
    assert templates.fill("Refund of {args.amount|money}", scope, "t") == "Refund of 12.00 USD"
    with pytest.raises(ConfigError, match="money takes an ISO 4217 currency code"):
        templates.check("{args.amount|money:yen}", {"args"}, "t")


def test_describe_takes_a_currency_code_as_a_field_format() -> None:
    catalog = amends.Catalog()

    @catalog.tool(
        "pay.charge_jpy", reversibility="irreversible", describe="Charge {amount:JPY} to {who}"
    )
    async def charge(call: amends.Call, amount: int, who: str) -> None:
        return None

    assert (
        catalog.describe("pay.charge_jpy", {"amount": 1200, "who": "c1"})
        == "Charge 1,200 JPY to c1"
    )
    with pytest.raises(amends.ContractError, match=r"has the field \{amount:yen\}"):
        catalog.register("pay.bad", charge, describe="Charge {amount:yen}")


@pytest.mark.parametrize(
    ("cents", "words"),
    [
        (10**17 + 1, "Charge 1,000,000,000,000,000.01 USD"),  # a float showed ...000.00
        (-5, "Charge -0.05 USD"),
        (0, "Charge 0.00 USD"),
    ],
)
def test_describe_cents_shows_the_exact_amount(cents: int, words: str) -> None:
    """What a person is shown is the amount the call carries: ``{cents:cents}`` divided by a
    float, so 10**17 + 1 cents read "1,000,000,000,000,000.00" (and past 2**53 other digits)."""
    catalog = amends.Catalog()

    @catalog.tool("pay.charge", reversibility="irreversible", describe="Charge {cents:cents} USD")
    async def charge(call: amends.Call, cents: int) -> None:
        return None

    assert catalog.describe("pay.charge", {"cents": cents}) == words


@pytest.mark.parametrize(
    ("describe", "words"),
    [
        ("Charge {cents:cents} USD", "Charge 100," + "000," * 13 + "000… USD"),
        ("Charge {cents:JPY}", "Charge 1" + "0" * 58 + "…"),  # its digits, as they are
    ],
)
async def test_an_amount_past_any_real_one_never_stops_an_undo(describe: str, words: str) -> None:
    """10**400 cents in a ``describe=`` money field raised OverflowError from the sentence
    (a float division; ``money`` raises for a filter's sake) inside the reversal: every undo of
    the saga, and every one after a restart, raised it, and the saga could never be undone.
    A sentence never raises: the amount is shown as its digits, bounded."""
    catalog = amends.Catalog()
    ran: list[int] = []

    @catalog.tool("pay.charge", reversibility="irreversible", describe=describe)
    async def charge(call: amends.Call, cents: int) -> None:
        ran.append(cents)

    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"))
    async with engine.saga("big") as saga:
        await saga.call("pay.charge", cents=10**400)
    report = await engine.undo(saga.id)
    await engine.close()
    assert ran == [10**400]
    assert report.status is amends.Outcome.CANNOT_UNDO
    step = report.step("s1")
    assert step.state is amends.StepState.ACKNOWLEDGED
    assert step.description == words
    assert step.manual_action is not None
    assert step.manual_action.what == f"'{words}' cannot be taken back"
