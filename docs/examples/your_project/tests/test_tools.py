"""My tools' contracts, checked with amends.testing: any fan-out of settings.set calls is
undone completely, and the settings file is as it was."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import amends
from amends.testing import saga_dags
from myproj import tools

SETTINGS = {
    "settings.set": st.fixed_dictionaries(
        {"key": st.sampled_from(["beta", "plan", "region"]), "value": st.text(max_size=5)}
    )
}


@settings(max_examples=10, deadline=None)
@given(dag=saga_dags(SETTINGS, max_steps=6))
def test_any_saga_of_my_tools_is_undone_completely(
    dag: list, tmp_path_factory: pytest.TempPathFactory
) -> None:
    folder = tmp_path_factory.mktemp("run")
    tools.STORE = folder / "settings.json"
    tools.STORE.write_text(json.dumps({"beta": "off"}))

    async def run() -> amends.UndoReport:
        engine = amends.Engine(tools.catalog, log=amends.SqliteLog(":memory:"))
        async with engine.saga("generated") as saga:
            handles: dict[str, amends.Step] = {}
            for s in dag:
                handles[s.step_id] = saga.call(
                    s.tool, step_id=s.step_id, after=[handles[a] for a in s.after], **s.args
                )
        report = await engine.undo(saga.id)
        await engine.close()
        return report

    report = asyncio.run(run())
    assert report.status == "fully_reversed", report.render("text")
    assert {
        k: v for k, v in json.loads(Path(tools.STORE).read_text()).items() if v is not None
    } == {"beta": "off"}
