"""Rule 10, issue 23 (a variation of "the someone was the agent's own later step"): the agent
writes a file, then moves it. The write's probe cannot read the old path now — the agent's own
move took it — so the preview said the write "could not check the world ... needs review" while
undo moved the file back first and then restored the write. The move's inverse declares what it
lands (``call.landed``: the old path shows the content again); the preview, which "sent" that
inverse, predicts the write as undo does it."""

from __future__ import annotations

from typing import Any

import amends
from amends import StepState


def files_catalog(fs: dict[str, str]) -> amends.Catalog:
    catalog = amends.Catalog()

    @catalog.tool("fs.read", reversibility="read_only")
    async def read(call: amends.Call, path: str) -> str:
        if path not in fs:
            raise amends.PermanentError(f"ENOENT: {path}")
        return fs[path]

    @catalog.tool("fs.write", reversibility="reversible", resources=lambda a: [f"file:{a['path']}"])
    async def write(call: amends.Call, path: str, content: str) -> None:
        old = fs[path]
        fs[path] = content
        call.inverse("fs.write", path=path, content=old)
        call.expect("fs.read", {"path": path}, equals=content)

    @catalog.tool(
        "fs.move",
        reversibility="reversible",
        resources=lambda a: [f"file:{a['source']}", f"file:{a['destination']}"],
    )
    async def move(call: amends.Call, source: str, destination: str) -> None:
        if destination in fs:
            raise amends.PermanentError(f"EEXIST: {destination}")
        fs[destination] = moved = fs.pop(source)
        call.inverse("fs.move", source=destination, destination=source)
        call.expect("fs.read", {"path": destination}, equals=moved)
        call.landed("fs.read", {"path": source}, equals=moved)

    return catalog


async def write_then_move(engine: amends.Engine) -> str:
    async with engine.saga("file the plan") as saga:
        await saga.call("fs.write", path="plan.txt", content="plan: agent")
        await saga.call("fs.move", source="plan.txt", destination="done.txt")
    return saga.id


def states(report: Any) -> dict[str, StepState | None]:
    if isinstance(report, amends.Preview):
        return {p.step_id: p.predicted for p in report.steps}
    return {s.step_id: s.state for s in report.steps}


async def test_a_write_the_agent_then_moved_is_predicted_reverted_as_undo_does_it() -> None:
    fs = {"plan.txt": "plan: keep"}
    engine = amends.Engine(files_catalog(fs), log=amends.SqliteLog(":memory:"))
    try:
        saga_id = await write_then_move(engine)
        preview = await engine.preview(saga_id)
        assert states(preview) == {"s1": StepState.REVERTED, "s2": StepState.REVERTED}
        assert preview.needs_review == []
        assert preview["s1"].check == (
            "fs.read cannot read it now (fs.read failed permanently: ENOENT: plan.txt), after "
            "s2 of this saga; undo reverts s2 first, whose inverse puts 'plan: agent' back"
        )
        report = await engine.undo(saga_id)
        assert states(report) == states(preview)
        assert fs == {"plan.txt": "plan: keep"}
    finally:
        await engine.close()


async def test_a_person_who_took_the_moved_file_since_is_still_drift() -> None:
    """The landed declaration explains only the agent's own move: a person who moved the file
    on since is drift in the preview as in undo (rule 4), and nothing is overwritten."""
    fs = {"plan.txt": "plan: keep"}
    engine = amends.Engine(files_catalog(fs), log=amends.SqliteLog(":memory:"))
    try:
        saga_id = await write_then_move(engine)
        fs["archive.txt"] = fs.pop("done.txt")  # a person filed it elsewhere
        preview = await engine.preview(saga_id)
        assert states(preview) == {"s1": StepState.BLOCKED, "s2": StepState.DRIFTED}
        report = await engine.undo(saga_id)
        assert states(report) == states(preview)
        assert fs == {"archive.txt": "plan: agent"}
    finally:
        await engine.close()
