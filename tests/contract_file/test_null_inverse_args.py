"""A vendor answering null for a field an inverse argument is built from (the whole argument is
``"{result.id}"``): the inverse could not address anything. It was caught only at undo time;
it is seen when the forward step is recorded (the step has no usable inverse, rule 2), so the
preview is honest, and no prose (residue, acknowledgement, report) prints Python's "None"."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler
from pathlib import Path

import amends
from amends import StepState
from contract_setup import Vendor, http_vendor, reply


def _contract(base: str, residue: str = "") -> str:
    return f'''
[[tool]]
name = "items.add"
reversibility = "compensable"
no_drift_check = "an item only this saga can see"
http = {{ url = "{base}/items" }}
inverse = {{ tool = "items.drop", args = {{ key = "{{result.id}}" }} }}
{residue}

[[tool]]
name = "items.drop"
reversibility = "irreversible"
http = {{ url = "{base}/items/{{args.key}}", method = "DELETE" }}
'''


async def test_a_null_whole_argument_of_the_inverse_is_seen_when_the_step_is_recorded(
    tmp_path: Path,
) -> None:
    def answer(req: BaseHTTPRequestHandler, vendor: Vendor) -> None:
        reply(req, 200, {"id": None, "created": True})

    path = tmp_path / "items.toml"
    with http_vendor(answer) as (base, vendor):
        path.write_text(_contract(base))
        engine = amends.Engine(amends.load_toml_catalog(path), log=amends.SqliteLog(":memory:"))
        async with engine.saga("add") as saga:
            await saga.call("items.add", name="x")
        preview = await engine.preview(saga.id)
        report = await engine.undo(saga.id)
        await engine.close()
    assert [(m, p) for m, p, _h in vendor.requests] == [("POST", "/items")]  # nothing sent
    assert preview["s1"].predicted is StepState.ACKNOWLEDGED  # honest before undo
    assert preview["s1"].action == "acknowledge"
    s1 = report.step("s1")
    assert s1.state is StepState.ACKNOWLEDGED
    assert report.status == amends.Outcome.CANNOT_UNDO
    assert (
        "items.add ran, but its contract could not be applied (contract of 'items.add' "
        "inverse: argument 'key' ('{result.id}') found null, and 'items.drop' writes it into "
        "its URL as '{args.key}', which has no spelling for null; give it a default if one "
        "is right, e.g. '{result.id|default:...}'); its effect stands and undo cannot take "
        "it back"
    ) in report.manual_actions[0].what
    assert "None" not in report.render("text")


async def test_a_null_in_the_text_of_residue_or_an_acknowledgement_reads_empty(
    tmp_path: Path,
) -> None:
    """Prose a contract fills (residue, an acknowledgement) printed a vendor's null as 'None'
    ("Item None stays listed"); it reads '(empty)', as a step's sentence writes it."""

    def answer(req: BaseHTTPRequestHandler, vendor: Vendor) -> None:
        reply(req, 200, {"id": "i1", "shelf": None})

    residue = 'residue = { what = "Item {result.id} stays listed on shelf {result.shelf}" }'
    path = tmp_path / "items.toml"
    with http_vendor(answer) as (base, vendor):
        path.write_text(
            _contract(base, residue)
            + f"""
[[tool]]
name = "items.tell"
reversibility = "irreversible"
http = {{ url = "{base}/tell" }}
acknowledge = {{ who = "the shop", what = "Told shelf {{result.shelf}} about it" }}
"""
        )
        engine = amends.Engine(amends.load_toml_catalog(path), log=amends.SqliteLog(":memory:"))
        async with engine.saga("add") as saga:
            await saga.call("items.add", name="x")
            await saga.call("items.tell", name="x")
        report = await engine.undo(saga.id)
        await engine.close()
    assert [(m, p) for m, p, _h in vendor.requests] == [
        ("POST", "/items"),
        ("POST", "/tell"),
        ("DELETE", "/items/i1"),
    ]
    assert report.step("s1").state is StepState.COMPENSATED
    assert [r.what for r in report.residue] == ["Item i1 stays listed on shelf (empty)"]
    assert [m.what for m in report.manual_actions] == ["Told shelf (empty) about it"]
    assert "None" not in report.render("text")


async def test_an_mcp_inverse_whose_input_schema_takes_no_null_is_refused_when_recorded(
    tmp_path: Path,
) -> None:
    """Over MCP the inverse's tool lists its input schema: an id typed "string" cannot be null.
    The step is acknowledged when recorded (nothing sent at undo), with the schema's words; a
    schema that allows null (restoring an empty value) keeps the inverse."""
    from types import SimpleNamespace

    import mcp_types

    from amends.contract_file import (
        Binding,
        TransportRequest,
        TransportResult,
        read_file,
        registration,
        tool_function,
    )
    from amends.integrations.mcp.gateway import schema_refuses_null

    sent: list[tuple[str, dict[str, object]]] = []

    async def transport(request: TransportRequest) -> TransportResult:
        sent.append((request.tool, dict(request.args)))
        return TransportResult("ok", structured={"id": None, "old": None})

    schema = {"type": "object", "properties": {"id": {"type": "string"}}}
    restore = {"type": "object", "properties": {"value": {"type": ["string", "null"]}}}
    up = SimpleNamespace(
        tools={
            "notes_delete": mcp_types.Tool(name="notes_delete", input_schema=schema),
            "notes_set": mcp_types.Tool(name="notes_set", input_schema=restore),
        }
    )
    path = tmp_path / "notes.toml"
    path.write_text(
        '[[tool]]\nname = "notes_add"\nreversibility = "reversible"\n'
        'no_drift_check = "a private note"\n'
        '[tool.inverse]\ntool = "notes_delete"\nargs = { id = "{result.id}" }\n\n'
        '[[tool]]\nname = "notes_put"\nreversibility = "reversible"\n'
        'no_drift_check = "a private note"\n'
        '[tool.inverse]\ntool = "notes_set"\nargs = { value = "{result.old}" }\n\n'
        '[[tool]]\nname = "notes_delete"\nreversibility = "irreversible"\n\n'
        '[[tool]]\nname = "notes_set"\nreversibility = "irreversible"\n'
    )
    cf = read_file(path, transport="mcp")
    binding = Binding(transport, cf.tools, refuses_null=lambda n, a: schema_refuses_null(up, n, a))  # type: ignore[arg-type]
    catalog = amends.Catalog()
    for name, contract in cf.tools.items():
        catalog.register(
            name, tool_function(contract, binding, name), **registration(contract, binding)
        )
    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"))
    async with engine.saga("notes") as saga:
        await saga.call("notes_add", title="t")
        await saga.call("notes_put", value="v")
    preview = await engine.preview(saga.id)
    assert (preview["s1"].predicted, preview["s2"].predicted) == (
        StepState.ACKNOWLEDGED,
        StepState.REVERTED,
    )
    report = await engine.undo(saga.id)
    await engine.close()
    assert sent == [
        ("notes_add", {"title": "t"}),
        ("notes_put", {"value": "v"}),
        ("notes_set", {"value": None}),  # null restored: the schema takes it
    ]
    assert report.step("s1").state is StepState.ACKNOWLEDGED
    assert report.step("s2").state is StepState.REVERTED
    assert (
        "notes_add ran, but its contract could not be applied (contract of 'notes_add' "
        "inverse: argument 'id' ('{result.id}') found null, and 'notes_delete' takes string "
        "for it, not null (its input schema); give it a default if one is right, e.g. "
        "'{result.id|default:...}'); its effect stands and undo cannot take it back"
    ) in report.manual_actions[0].what
