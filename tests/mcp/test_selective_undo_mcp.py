"""Issue 27 through real processes: ``amends_undo {"steps": [...]}`` from a real ``mcp.Client``
to ``amends mcp serve`` (a subprocess) over an upstream SDK server (another subprocess)."""

from __future__ import annotations

from typing import Any

import pytest

from conftest import KvSetup, text_of

pytestmark = pytest.mark.slow


async def test_amends_undo_steps_takes_back_the_charge_and_keeps_the_rest(kv: KvSetup) -> None:
    from mcp import Client

    async with Client(kv.gateway()) as c:
        await c.call_tool("kv_kv_set", {"key": "greeting", "value": "hello"})
        r2 = await c.call_tool("kv_charge", {"customer": "c1", "cents": 5000})
        charge = r2.meta["amends/step"]["step_id"]
        preview = await c.call_tool("amends_preview", {"steps": [charge]})
        assert not preview.is_error
        assert [p["step_id"] for p in preview.structured_content["steps"]] == [charge]
        bad = await c.call_tool("amends_undo", {"steps": ["s99"]})
        assert bad.is_error and "has no step 's99'" in text_of(bad)
        clash = await c.call_tool("amends_undo", {"steps": [charge], "continue": True})
        assert clash.is_error and "continue=true keeps the reversal's selection" in text_of(clash)
        assert kv.world()["charges"]["ch_1"]["refunded"] == 0  # refused: nothing was done
        undo: Any = await c.call_tool("amends_undo", {"steps": [charge]})
        assert not undo.is_error, text_of(undo)
        report = undo.structured_content
        assert [s["step_id"] for s in report["steps"]] == [charge]
        assert report["steps"][0]["state"] == "compensated"
        assert report["selection"]["asked"] == [charge]
        world = kv.world()
        assert world["charges"]["ch_1"]["refunded"] == 5000
        assert world["kv"] == {"greeting": "hello"}  # kept
        whole: Any = await c.call_tool("amends_undo", {})
    assert whole.structured_content["selection"] is None
    assert whole.structured_content["reversal_id"] == report["reversal_id"]
    world = kv.world()
    assert world["kv"] == {}
    assert [j[0] for j in world["journal"]].count("refund") == 1
