"""Money for people: an amount in a currency's minor units (cents, yen, fils) written with the
currency's own number of decimals (ISO 4217), never an assumed two.

It must never guess: an amount that is not an integer count of minor units is shown as it is.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["CURRENCY", "minor_units", "money", "scaled"]

CURRENCY = re.compile(r"[A-Z]{3}")
"""An ISO 4217 alphabetic code."""

_EXPONENTS = {
    **dict.fromkeys(
        [
            "BIF",
            "CLP",
            "DJF",
            "GNF",
            "ISK",
            "JPY",
            "KMF",
            "KRW",
            "PYG",
            "RWF",
            "UGX",
            "UYI",
            "VND",
            "VUV",
            "XAF",
            "XOF",
            "XPF",
        ],
        0,
    ),
    **dict.fromkeys(["BHD", "IQD", "JOD", "KWD", "LYD", "OMR", "TND"], 3),
    **dict.fromkeys(["CLF", "UYW"], 4),
}
"""ISO 4217 currencies whose minor unit is not a hundredth; every other code has two."""


def minor_units(currency: str) -> int:
    """How many decimals ``currency`` (an ISO 4217 code) has: JPY 0, USD 2, KWD 3."""
    return _EXPONENTS.get(currency.upper(), 2)


def money(amount: Any, currency: str) -> str:
    """``amount`` minor units of ``currency`` for people: ``money(1200, "JPY")`` is
    "1,200 JPY", ``money(1200, "USD")`` "12.00 USD", ``money(1200, "KWD")`` "1.200 KWD"."""
    if not isinstance(amount, int) or isinstance(amount, bool):
        return f"{amount} {currency}"
    float(amount)  # OverflowError beyond any real amount (10**400), as a filter error says
    return f"{scaled(amount, minor_units(currency))} {currency.upper()}"


def scaled(amount: int, places: int) -> str:
    """``amount`` minor units with ``places`` decimals, grouped in thousands, exactly:
    ``scaled(100000000000000000001, 2)`` is "1,000,000,000,000,000,000.01" (integer arithmetic:
    a float, or a decimal at its default 28 digits, would show another amount)."""
    whole, part = divmod(abs(amount), 10**places)
    sign = "-" if amount < 0 else ""
    return f"{sign}{whole:,}.{part:0{places}d}" if places else f"{sign}{whole:,}"
