"""The core CLI commands (show, undo, audit) and the frozen public surface."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import amends
from amends.cli import main
from core_world import CoreWorld, fresh

# The public API is a contract (DESIGN.md): a change here must show up in review.
EXPORTED = [
    "NOTHING",
    "Acknowledgement",
    "AmendsError",
    "Budget",
    "Call",
    "Catalog",
    "ChainProblem",
    "Claim",
    "CompensationRecord",
    "CompensationWrite",
    "ConfigError",
    "ContractError",
    "Engine",
    "Event",
    "Expectation",
    "FollowUp",
    "FollowUpAgent",
    "FollowUpOutcome",
    "FollowUpProposal",
    "FollowUpSpend",
    "HistoryAlteredError",
    "IdemRecord",
    "Inverse",
    "LeaseLostError",
    "LogCorruptedError",
    "LogError",
    "LogHealth",
    "LogLockedError",
    "LogReadOnlyError",
    "ManualAction",
    "Outcome",
    "PermanentError",
    "Plan",
    "PlannedStep",
    "PostgresLog",
    "PreconditionFailed",
    "Preview",
    "PreviewStep",
    "RecoveryReport",
    "Redaction",
    "Ref",
    "Residue",
    "Resolution",
    "RetryPolicy",
    "ReversalHead",
    "ReversalRecord",
    "Reversibility",
    "Saga",
    "SagaClosedError",
    "SagaLog",
    "SagaNotFoundError",
    "SagaRecord",
    "SagaStateError",
    "SchemaVersionError",
    "SecretRequest",
    "SecretResolver",
    "SentFollowUp",
    "SqliteLog",
    "Step",
    "StepFailedError",
    "StepFinish",
    "StepIntent",
    "StepOutcome",
    "StepRecord",
    "StepState",
    "ToolError",
    "ToolSpec",
    "TransientError",
    "UndoReport",
    "current_call",
    "current_report",
    "from_env",
    "idempotency_key",
    "load_toml_catalog",
    "open_log",
    "plan",
    "run",
    "tag_catalog",
]


def test_exported_members_are_frozen_and_sorted() -> None:
    assert amends.__all__ == EXPORTED
    assert len(set(amends.__all__)) == len(amends.__all__)
    for name in amends.__all__:
        if name != "PostgresLog":  # optional extra, imported lazily
            assert getattr(amends, name) is not None


def test_error_tree() -> None:
    assert issubclass(amends.ContractError, TypeError)
    assert issubclass(amends.ConfigError, ValueError)
    assert issubclass(amends.SagaNotFoundError, LookupError)
    for err in (
        amends.TransientError,
        amends.PermanentError,
        amends.PreconditionFailed,
        amends.LogLockedError,
        amends.LeaseLostError,
        amends.StepFailedError,
    ):
        assert issubclass(err, amends.AmendsError)
    assert issubclass(amends.PreconditionFailed, amends.PermanentError)


# The CLI loads the catalog by MODULE:ATTR; this module's `cli_catalog` serves it.
_WORLD: CoreWorld
_WORLD, cli_catalog = fresh()


@pytest.fixture
async def saga_db(tmp_path: Path) -> tuple[str, str]:
    db = str(tmp_path / "cli.db")
    engine = amends.Engine(cli_catalog, log=db)
    async with engine.saga("Close the ACME deal", tenant="acme", actor="agent:sales") as saga:
        a = saga.call("crm.update_field", record_id="r1", field="stage", value="won")
        saga.call("mail.send", to="bob@acme.test", subject="Won", after=[a])
    await engine.close()
    return db, saga.id


SPEC = f"{__name__}:cli_catalog"


async def test_cli_undo_json_is_the_reports_to_dict_and_exit_code_is_honest(
    saga_db: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    db, saga_id = saga_db
    import asyncio

    code = await asyncio.to_thread(
        main, ["undo", saga_id, "--db", db, "--catalog", SPEC, "--json", "--budget-calls", "10"]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 1  # cannot_undo: the email stands
    assert out["status"] == "cannot_undo"
    assert [(s["step_id"], s["state"]) for s in out["steps"]] == [
        ("s1", "reverted"),
        ("s2", "acknowledged"),
    ]
    assert out["budget"]["tool_calls"] == 10
    code = await asyncio.to_thread(main, ["undo", saga_id, "--db", db, "--catalog", SPEC])
    text = capsys.readouterr().out
    assert code == 1
    assert "Please disregard my earlier message 'Won'." in text
    assert out["reversal_id"] in text  # the same reversal, joined


async def test_cli_show_prints_steps_and_history(
    saga_db: tuple[str, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    monkeypatch.setenv("COLUMNS", "200")

    db, saga_id = saga_db
    assert await asyncio.to_thread(main, ["show", saga_id, "--db", db, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [s["state"] for s in out["steps"]] == ["done", "done"]
    assert [h["kind"] for h in out["history"]] == [
        "saga.started",
        "step.intent",
        "step.done",
        "step.intent",
        "step.done",
        "saga.completed",
    ]
    assert await asyncio.to_thread(main, ["show", "--db", db, "--json"]) == 0
    assert [(s["saga_id"], s["state"]) for s in json.loads(capsys.readouterr().out)] == [
        (saga_id, "completed")
    ]
    assert await asyncio.to_thread(main, ["show", "--db", db]) == 0
    assert "Close the ACME deal" in capsys.readouterr().out
    assert await asyncio.to_thread(main, ["show", "nope", "--db", db]) == 2
    assert "no saga 'nope'" in capsys.readouterr().err


def test_cli_audit_flags_tools_without_a_declared_class(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["audit", "--catalog", SPEC, "--json"]) == 0
    rows = {r["tool"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["mail.send"] == {
        "tool": "mail.send",
        "reversibility": "irreversible",
        "explicit": False,
        "description": "",
        "catalog": SPEC,  # issue 26 item 4: which catalog was audited (several may be allowed)
    }
    assert rows["crm.update_field"]["explicit"] is True
    assert main(["audit", "--catalog", SPEC, "--strict"]) == 1
    assert "mail.send" in capsys.readouterr().out


def test_cli_bad_catalog_spec_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", "--catalog", "no_such_module_x:cat"]) == 2
    assert "cannot import 'no_such_module_x'" in capsys.readouterr().err
    assert main(["audit", "--catalog", "json"]) == 2
    assert "must look like MODULE:ATTR" in capsys.readouterr().err


def test_catalog_registration_errors_name_the_value_and_fix() -> None:
    cat = amends.Catalog()
    with pytest.raises(amends.ContractError, match="has reversibility 'undoable'; use one of"):
        cat.register("x.y", lambda call: None, reversibility="undoable")
    with pytest.raises(amends.ContractError, match="tool name 'bad name' is not valid"):
        cat.register("bad name", lambda call: None)
    with pytest.raises(amends.ContractError, match="must take the amends.Call as its first"):
        cat.register("x.z", lambda: None)
    cat.register("x.y", lambda call: None, reversibility="reversible")
    with pytest.raises(amends.ContractError, match="already registered"):
        cat.register("x.y", lambda call: None)
    with pytest.raises(amends.ContractError, match="is not in the catalog .registered: x.y."):
        cat.get("nope")
    with pytest.raises(amends.ConfigError, match="Budget.tool_calls must be non-negative, got -1"):
        amends.Budget(tool_calls=-1)
    with pytest.raises(amends.ConfigError, match="unknown budget field"):
        amends.Budget.from_dict({"calls": 3})


async def test_non_json_inverse_arguments_are_a_contract_error_and_step_is_in_doubt(
    engine: amends.Engine, catalog: amends.Catalog
) -> None:
    @catalog.tool("x.weird", reversibility="reversible")
    async def weird(call: amends.Call) -> None:
        call.inverse("x.weird", when=object())

    async with engine.saga("weird") as saga:
        step = saga.call("x.weird")
        with pytest.raises(amends.StepFailedError, match="must be JSON data"):
            await step
    report = await engine.undo(saga.id)
    assert report.step("s1").state is amends.StepState.IN_DOUBT


def test_the_worker_commands_default_task_queue_is_the_temporal_integrations() -> None:
    """`amends worker` names its default queue without importing temporalio (fast --help); the
    value must stay the one the Temporal runner starts reversals on."""
    from amends.cli.worker import DEFAULT_TASK_QUEUE as cli_queue
    from amends.integrations.temporal import DEFAULT_TASK_QUEUE as runner_queue

    assert cli_queue == runner_queue
