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
