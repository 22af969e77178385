"""A saga's title, tenant or actor with a NUL character (or a lone surrogate) is refused alike
on every log.

PostgreSQL cannot store NUL in text: an agent's ``amends_begin {"title": "a\\u0000b"}`` was a
``LogError`` there ("PostgreSQL text fields cannot contain NUL", as if the log were broken)
and was stored as given on SQLite. Bad input now gets one clear ``ConfigError`` naming the
field and the fix, before anything is written, on both backends.
"""

from __future__ import annotations

import pytest

import amends


@pytest.mark.parametrize(
    ("title", "extra", "what"),
    [
        ("Close\x00 the deal", {}, "title"),
        ("Close the deal", {"tenant": "acme\x00"}, "tenant"),
        ("Close the deal", {"actor": "agent:\x00sales"}, "actor"),
        ("Close the deal", {"tenant": 42}, "tenant"),
        # a lone surrogate (JSON "\ud800" decodes to one): SQLite raised a bare
        # UnicodeEncodeError mid-write; no UTF-8 log can store it
        ("Close\ud800 the deal", {}, "title"),
        ("Close the deal", {"actor": "agent:\udfff"}, "actor"),
        ("Close the deal", {"tenant": "acme\udfff"}, "tenant"),
    ],
)
async def test_a_nul_in_a_sagas_words_is_refused_before_anything_is_written(
    log_url: str, title: str, extra: dict[str, object], what: str
) -> None:
    catalog = amends.Catalog()

    @catalog.tool("crm.read", reversibility="read_only")
    async def read(call: amends.Call, record_id: str) -> str:
        return record_id

    engine = amends.Engine(catalog, log=log_url)
    try:
        with pytest.raises(amends.ConfigError) as info:
            async with engine.saga(title, saga_id="s1", **extra) as saga:  # type: ignore[arg-type]
                saga.call("crm.read", record_id="r1")
        assert f"a saga's {what} must be text without NUL" in str(info.value)
        assert await engine.log.get_saga("s1") is None
        async with engine.saga("Close the deal", saga_id="s2") as saga:  # the log still works
            saga.call("crm.read", record_id="nul\x00inside")  # arguments are JSON: kept
        rec = await engine.log.get_saga("s2")
        assert rec is not None and rec.steps[0].args == {"record_id": "nul\x00inside"}
    finally:
        await engine.close()
