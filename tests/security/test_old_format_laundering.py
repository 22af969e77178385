"""Rule 12: a log rewritten into an older schema version is not signed by the upgrade.

Someone who can write the log (but does not hold ``AMENDS_LOG_KEY``) undoes nothing by hand;
they cut an undone saga's reversal off, drop ``log_heads`` and ``sagas.head`` and set the stored
schema version to 3. Before, opening the log ran the version-4 data step, which computed the
saga's head with the key over the truncated history: ``amends doctor --verify`` found nothing
and a second undo sent the refund again. The same held for a forged version-1 log (its
chains are computed by the upgrade). Now, with a key, a log below version 4 that holds sagas is
upgraded only when the operator says so (``AMENDS_SIGN_OLD_HISTORY=1``).
"""

from __future__ import annotations

from typing import Any

import pytest
from test_tamper_evidence import Psp, _charge, _tamper, psp_catalog

import amends


async def _rewrite_as_v3(engine: amends.Engine) -> None:
    """Cut the undone saga's reversal off, then make the log look like version 3."""
    events = await engine.log.events("paid")
    cut = next(e.event_id for e in events if e.kind == "reversal.requested")
    await _tamper(
        engine,
        ("DELETE FROM records WHERE saga_id='paid' AND rec_id>=?", (cut,)),
        ("DELETE FROM reversals WHERE saga_id='paid'", ()),
        ("DROP TABLE log_heads", ()),
        ("DROP TABLE log_tally", ()),  # and version 6's tally of reversal records
        ("ALTER TABLE sagas DROP COLUMN head", ()),
        ("UPDATE amends_meta SET value='3' WHERE key='schema_version'", ()),
    )


async def test_a_log_rewritten_as_version_3_is_not_signed_and_no_refund_is_sent_again(
    log_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AMENDS_LOG_KEY", "k-secret")
    monkeypatch.delenv("AMENDS_SIGN_OLD_HISTORY", raising=False)
    url = log_url.removeprefix("sqlite:///")
    psp = Psp()
    engine = amends.Engine(psp_catalog(psp), log=url)
    await _charge(engine, "paid")
    assert (await engine.undo("paid")).status == "fully_reversed"
    assert psp.refunds == ["ch_1"]
    await _rewrite_as_v3(engine)
    await engine.close()
    with pytest.raises(amends.SchemaVersionError) as info:
        amends.Engine(psp_catalog(psp), log=url)
    said = str(info.value)
    assert "stores schema version 3, and upgrading it would sign its history" in said
    assert "AMENDS_SIGN_OLD_HISTORY=1 amends recover --db" in said
    assert psp.refunds == ["ch_1"]  # nothing was sent again


async def test_the_operator_can_upgrade_a_genuinely_old_log_once_on_purpose(
    log_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same version-3 log, upgraded with the operator's consent: it is signed as it is (the
    operator vouched for it) and works as any log."""
    monkeypatch.setenv("AMENDS_LOG_KEY", "k-secret")
    url = log_url.removeprefix("sqlite:///")
    psp = Psp()
    engine = amends.Engine(psp_catalog(psp), log=url)
    await _charge(engine, "kept")
    await _tamper(
        engine,
        ("DROP TABLE log_heads", ()),
        ("DROP TABLE log_tally", ()),  # and version 6's tally of reversal records
        ("ALTER TABLE sagas DROP COLUMN head", ()),
        ("UPDATE amends_meta SET value='3' WHERE key='schema_version'", ()),
    )
    await engine.close()
    monkeypatch.setenv("AMENDS_SIGN_OLD_HISTORY", "1")
    engine = amends.Engine(psp_catalog(psp), log=url)
    try:
        assert await engine.log.schema_version() == 6  # type: ignore[attr-defined]
        assert await engine.log.verify() == []
        assert (await engine.undo("kept")).status == "fully_reversed"
    finally:
        await engine.close()


async def test_without_a_key_an_old_log_upgrades_as_before(
    log_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a key the hashes are plain SHA-256 (anyone who can write the log can recompute
    them): nothing is lost by upgrading, and old logs upgrade on open as they always did."""
    monkeypatch.delenv("AMENDS_LOG_KEY", raising=False)
    monkeypatch.delenv("AMENDS_SIGN_OLD_HISTORY", raising=False)
    url = log_url.removeprefix("sqlite:///")
    psp = Psp()
    engine = amends.Engine(psp_catalog(psp), log=url)
    await _charge(engine, "kept")
    await _tamper(
        engine,
        ("DROP TABLE log_heads", ()),
        ("DROP TABLE log_tally", ()),  # and version 6's tally of reversal records
        ("ALTER TABLE sagas DROP COLUMN head", ()),
        ("UPDATE amends_meta SET value='3' WHERE key='schema_version'", ()),
    )
    await engine.close()
    engine = amends.Engine(psp_catalog(psp), log=url)
    try:
        assert await engine.log.verify() == []
        got: Any = await engine.log.get_saga("kept")
        assert got is not None and got.title == "Charge kept"
    finally:
        await engine.close()
