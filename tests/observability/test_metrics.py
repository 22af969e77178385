"""Issue 28 item 2: the figures of a reversal as OpenTelemetry metrics (recorded as it finishes)
and as the Prometheus text ``amends serve`` derives from the log; both from the one derivation,
both equal to the report's counts."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import pytest
from otel_capture import Points, Spans
from otel_capture import attrs as span_attrs
from otel_world import otel_world, scene
from prometheus_client.parser import text_string_to_metric_families

import amends
from amends._observe import LatencyPairs
from amends._resolution import UNCHECKED
from amends.server.metrics import LogMetrics, _Totals, render

FAST = amends.RetryPolicy(initial_backoff=0.001, max_backoff=0.01, jitter=0.0)


def parse(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Prometheus text, parsed by Prometheus' own client library: (sample, labels) -> value."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def by(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str) -> dict[Any, float]:
    """The samples of ``name``, keyed by their labels' values in label-name order."""
    return {
        tuple(v for _, v in sorted(labels)): value
        for (n, labels), value in samples.items()
        if n == name and value
    }


def report_counts(reports: list[amends.UndoReport]) -> dict[str, dict[Any, float]]:
    """What the metrics must show for these reports, counted from the reports themselves."""
    out: dict[str, dict[Any, float]] = {
        "steps": {}, "residue": {}, "manual": {}, "drift": {}, "outcome": {}
    }  # fmt: skip
    for r in reports:
        tools = {s.step_id: s.tool for s in r.steps}
        out["outcome"][(r.status.value,)] = out["outcome"].get((r.status.value,), 0) + 1
        for s in r.steps:
            key = (s.state.value, s.tool)
            out["steps"][key] = out["steps"].get(key, 0) + 1
            if s.state.value == "drifted" and not s.detail.startswith(UNCHECKED):
                out["drift"][(s.tool,)] = out["drift"].get((s.tool,), 0) + 1
            if s.residue:
                out["residue"][(s.tool,)] = out["residue"].get((s.tool,), 0) + len(s.residue)
        opened = {m.step_id for m in r.open_manual_actions}  # the report's own categories
        for m in r.manual_actions:
            status = (
                "open"
                if m.step_id in opened
                else "in_doubt"
                if m.step_id in r.in_doubt
                else "handled"
            )
            key = (status, tools[m.step_id])
            out["manual"][key] = out["manual"].get(key, 0) + 1
    return out


async def test_otel_metrics_of_an_undo_equal_its_report_and_its_latency_the_logs(
    points: Points,
) -> None:
    """Counters by outcome, state and tool, residue, manual actions, drift; the latency
    histogram holds one value per dispatched compensation, summing to what the log's
    timestamps give (the same ``now`` lands in both)."""
    world, catalog = otel_world()
    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"), retry=FAST)
    saga_id = await scene(engine)
    world.core.human_edit("r2", "owner", "yan")
    report = await engine.undo(saga_id)
    scraped = parse(await LogMetrics(engine.log).scrape())
    await engine.close()

    want = report_counts([report])
    flat = {
        name: {tuple(v for _, v in sorted(attrs)): n for attrs, n in points.counts(name).items()}
        for name in (
            "amends.reversals",
            "amends.reversal.steps",
            "amends.residue.items",
            "amends.manual_actions",
            "amends.drift.detections",
            "amends.budget.exhausted",
        )
    }
    assert flat["amends.reversals"] == want["outcome"] == {("cannot_undo",): 1}
    assert flat["amends.reversal.steps"] == want["steps"]  # (state, tool)
    assert flat["amends.residue.items"] == want["residue"] == {("pay.charge",): 1}
    assert flat["amends.manual_actions"] == want["manual"]  # (status, tool)
    assert flat["amends.drift.detections"] == want["drift"] == {("crm.update_field",): 1}
    assert flat["amends.budget.exhausted"] == {}

    latency = points.counts("amends.compensation.duration")
    by_tool: dict[str, tuple[int, float]] = {}
    for attrs, (count, total) in latency.items():
        tool = dict(attrs)["tool"]
        c, t = by_tool.get(tool, (0, 0.0))
        by_tool[tool] = (c + count, t + total)
    assert sorted(by_tool) == ["card.hold", "crm.update_field", "pay.charge"]  # the steps' tools
    for tool, (count, total) in by_tool.items():
        assert scraped[("amends_compensation_seconds_count", frozenset({("tool", tool)}))] == count
        assert math.isclose(
            scraped[("amends_compensation_seconds_sum", frozenset({("tool", tool)}))],
            total,
            abs_tol=1e-9,
        )


async def test_a_reversal_stopped_by_its_budget_counts_as_budget_exhaustion(
    points: Points, tmp_path: Path
) -> None:
    """Over budget is its own figure (rule 7), in both; the continuation finishing it is a
    second run of the same reversal: runs count 2, reversals 1 with its current outcome."""
    _, catalog = otel_world()
    engine = amends.Engine(catalog, log=str(tmp_path / "a.db"), retry=FAST)
    saga_id = await scene(engine)
    first = await engine.undo(saga_id, budget=amends.Budget(tool_calls=2))
    assert any(s.state.value == "over_budget" for s in first.steps)
    metrics = LogMetrics(engine.log)
    before = parse(await metrics.scrape())
    second = await engine.resume(saga_id, budget=amends.Budget(tool_calls=50))
    after = parse(await metrics.scrape())
    await engine.close()

    assert points.counts("amends.budget.exhausted") == {frozenset(): 1}
    assert by(before, "amends_reversals_over_budget") == {(): 1}
    assert by(after, "amends_reversals_over_budget") == {}
    assert by(after, "amends_reversals") == {(second.status.value,): 1}
    assert by(after, "amends_reversal_runs_total") == (
        {(first.status.value,): 2}
        if first.status == second.status
        else {(first.status.value,): 1, (second.status.value,): 1}
    )
    assert by(after, "amends_reversal_steps") == report_counts([second])["steps"]


async def test_log_metrics_follow_the_log_per_tenant_and_as_people_resolve(tmp_path: Path) -> None:
    """Two tenants' reversals in one log: each tenant's view counts its own; a resolution moves
    a manual action from open to handled at the next scrape; a second reader (a restarted
    server) reads the same figures from the log."""
    _, catalog = otel_world()
    db = str(tmp_path / "a.db")
    engine = amends.Engine(catalog, log=db, retry=FAST)
    acme = await scene(engine)
    async with engine.saga("globex deal", tenant="globex") as saga:
        saga.call("pay.charge", customer="g1", cents=100)
    reports = {"acme": await engine.undo(acme), "globex": await engine.undo(saga.id)}
    metrics = LogMetrics(engine.log)
    for tenant, report in reports.items():
        got = parse(await metrics.scrape(tenant=tenant))
        want = report_counts([report])
        assert by(got, "amends_reversals") == want["outcome"]
        assert by(got, "amends_reversal_steps") == want["steps"]
        assert by(got, "amends_residue_items") == want["residue"]
        assert by(got, "amends_manual_actions") == want["manual"]
    everyone = parse(await metrics.scrape())
    assert by(everyone, "amends_reversal_steps") == report_counts(list(reports.values()))["steps"]
    assert by(everyone, "amends_reversals_with_residue") == {(): 2}

    await engine.resolve(acme, "s5", by="ann@example.com", note="sent the draft")
    resolved = parse(await metrics.scrape(tenant="acme"))
    assert by(everyone, "amends_manual_actions") == {("open", "mail.send"): 1}
    assert by(resolved, "amends_manual_actions") == {("handled", "mail.send"): 1}
    restarted = parse(await LogMetrics(amends.SqliteLog(db)).scrape(tenant="acme"))
    assert restarted == resolved
    await engine.close()


async def test_a_saga_whose_history_does_not_verify_is_numbered_not_counted(
    tmp_path: Path,
) -> None:
    """Rule 12: a report that may have been edited does not feed a dashboard."""
    _, catalog = otel_world()
    engine = amends.Engine(catalog, log=str(tmp_path / "a.db"), retry=FAST)
    saga_id = await scene(engine)
    await engine.undo(saga_id)
    got = parse(await LogMetrics(engine.log).scrape(unverified=[saga_id]))
    await engine.close()
    assert by(got, "amends_reversals") == {}
    assert by(got, "amends_reversal_steps") == {}
    assert by(got, "amends_sagas_unverified") == {(): 1}


async def test_a_saga_edited_before_its_undo_is_numbered_unverified_for_its_tenant(
    tmp_path: Path,
) -> None:
    """Rule 12: ``amends_sagas_unverified`` is what an operator alerts on ("has someone edited
    the history?"). It numbered only the altered sagas that had a reversal: a saga edited
    before anyone undid it (its charge's record changed so undo would not refund it) read 0.
    Now every saga the check found is numbered, for its own tenant and for every tenant."""
    _, catalog = otel_world()
    engine = amends.Engine(catalog, log=str(tmp_path / "a.db"), retry=FAST)
    undone = await scene(engine)
    await engine.undo(undone)
    edited = {}
    for tenant in ("acme", "globex"):
        async with engine.saga(f"{tenant} charge", tenant=tenant) as saga:
            saga.call("pay.charge", customer="c1", cents=100)
        edited[tenant] = saga.id

    def tamper(tx: Any) -> None:
        for saga_id in edited.values():
            tx.execute(
                "UPDATE records SET at = at + 1 WHERE saga_id = ? AND kind = 'step.done'",
                (saga_id,),
            )

    await engine.log.db.write(tamper)  # type: ignore[attr-defined]
    problems = {p.saga_id for p in await engine.log.verify()}
    assert problems == set(edited.values())
    metrics = LogMetrics(engine.log)
    unverified = {
        tenant: by(parse(await metrics.scrape(tenant=tenant, unverified=problems)),
                   "amends_sagas_unverified")
        for tenant in ("acme", "globex", "initech", None)
    }  # fmt: skip
    everyone = parse(await metrics.scrape(unverified=problems))
    await engine.close()
    assert unverified == {"acme": {(): 1}, "globex": {(): 1}, "initech": {}, None: {(): 2}}
    assert by(everyone, "amends_reversals") == {("cannot_undo",): 1}  # the intact one counted


def test_a_long_lived_workers_latency_pairs_stay_bounded() -> None:
    """On Temporal the final event of a compensation one worker dispatched may be written by
    another: each such dispatch waited in the first worker's pairs for good (a worker's pairs
    live as long as it does). The oldest go past the bound; a pair still pairs."""
    pairs, bound = LatencyPairs(), 10_000
    for i in range(bound + 5):
        assert pairs.feed("rev_a", f"s{i}", "compensation.dispatched", float(i)) is None
    assert len(pairs.open) == bound
    assert ("rev_a", "s0") not in pairs.open and ("rev_a", "s5") in pairs.open
    last = bound + 4
    assert pairs.feed("rev_a", f"s{last}", "compensation.reverted", last + 0.25) == 0.25
    assert pairs.feed("rev_a", "s0", "compensation.reverted", 1.0) is None  # dropped: unpaired


def test_label_values_from_the_log_are_escaped_and_cleaned() -> None:
    """A tool name is data from the log: quotes, backslashes, newlines and escape sequences
    cannot break a line of the exposition or reach a dashboard raw."""
    t = _Totals()
    t.steps[("failed", 'we"ird\\tool\nname\x1b[2J')] = 2
    t.latencies['we"ird'] = [0.004, 2.0, 400.0]
    got = parse(render(t))
    assert by(got, "amends_reversal_steps") == {("failed", 'we"ird\\tool\\nname\\x1b[2J'): 2}
    buckets = {
        dict(labels)["le"]: v
        for (n, labels), v in got.items()
        if n == "amends_compensation_seconds_bucket"
    }
    assert (buckets["0.005"], buckets["2.5"], buckets["300.0"], buckets["+Inf"]) == (1, 2, 2, 3)
    assert got[("amends_compensation_seconds_count", frozenset({("tool", 'we"ird')}))] == 3


async def test_the_metrics_route_takes_a_token_and_the_metrics_listener_serves_nothing_else(
    tmp_path: Path,
) -> None:
    """On the API's listener ``/metrics`` is an API route (401 without a token, the token's
    tenant only); on the ``--metrics-bind`` listener it needs no token and every other path is
    404 (TestClient's connections arrive on port 80: here, the metrics listener's)."""
    from fastapi.testclient import TestClient

    from amends.server import ServerSettings, TokenStore, create_app

    _, catalog = otel_world()
    db = str(tmp_path / "a.db")
    engine = amends.Engine(catalog, log=db, retry=FAST)
    acme_saga = await scene(engine)
    await engine.undo(acme_saga)
    await engine.close()
    tokens = TokenStore(str(tmp_path / "a.tokens"))
    acme, globex = tokens.create("acme"), tokens.create("globex")
    factory = lambda: amends.Engine(catalog, log=db)  # noqa: E731

    with TestClient(create_app(factory, ServerSettings(tokens=tokens))) as api:
        assert api.get("/metrics").status_code == 401
        mine = api.get("/metrics", headers={"Authorization": f"Bearer {acme}"})
        theirs = api.get("/metrics", headers={"Authorization": f"Bearer {globex}"})
        assert api.get("/sagas", headers={"Authorization": f"Bearer {acme}"}).status_code == 200
    assert mine.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert by(parse(mine.text), "amends_reversals") == {("cannot_undo",): 1}
    assert by(parse(theirs.text), "amends_reversals") == {}

    listener = ServerSettings(tokens=tokens, metrics_port=80)
    with TestClient(create_app(factory, listener)) as only_metrics:
        assert parse(only_metrics.get("/metrics").text) == parse(mine.text)
        for path in ("/sagas", "/", "/login", "/static/app.js", "/openapi.json"):
            r = only_metrics.get(path, headers={"Authorization": f"Bearer {acme}"})
            assert (r.status_code, r.json()["error"]) == (404, "not_found"), path
        assert only_metrics.post("/metrics").status_code == 404
    tokens.close()


@pytest.mark.slow
@pytest.mark.postgres
async def test_log_metrics_read_a_postgresql_log_as_they_read_sqlite(
    pg_url: str, tmp_path: Path
) -> None:
    """The one query behind /metrics (``SagaLog.reversal_heads``) and the figures are the same
    on the shared PostgreSQL log as on a SQLite file, for the same sagas."""
    texts = []
    for url in (pg_url, str(tmp_path / "a.db")):
        world, catalog = otel_world()
        engine = amends.Engine(catalog, log=url, retry=FAST)
        saga_id = await scene(engine, title="same saga")
        world.core.human_edit("r2", "owner", "yan")
        report = await engine.undo(saga_id)
        heads = await engine.log.reversal_heads()
        assert [(h.reversal_id, h.saga_id, h.tenant, h.state) for h in heads] == [
            (report.reversal_id, saga_id, "acme", "done")
        ]
        got = parse(await LogMetrics(engine.log).scrape())
        await engine.close()
        assert by(got, "amends_reversal_steps") == report_counts([report])["steps"]
        texts.append({k: v for k, v in got.items() if "seconds" not in k[0]})
    assert texts[0] == texts[1]


async def test_a_manual_action_whose_follow_up_is_in_doubt_counts_as_the_report_counts_it(
    tmp_path: Path,
) -> None:
    """Issue 27: a follow-up whose answer was lost may have gone out, so its manual action is
    neither open nor handled: the report says "1 follow-up in doubt" and lists no open action.
    ``/metrics`` and the OpenTelemetry figures counted it ``open`` (an invitation to send the
    apology again by hand); they count it ``in_doubt`` now."""
    from amends._observe import figures

    _, catalog = otel_world()

    @catalog.tool("pager.send")  # a vendor that acts, then loses the answer (rule 9)
    async def pager_send(call: amends.Call, to: str, text: str) -> None:
        raise ConnectionResetError("connection reset by peer")

    engine = amends.Engine(catalog, log=str(tmp_path / "a.db"), retry=FAST)
    saga_id = await scene(engine)
    await engine.undo(saga_id)
    sent = await engine.send_follow_up(
        saga_id, "s5", tool="pager.send", by="ann", args={"to": "c1", "text": "sorry"}
    )
    assert sent.state == "in_doubt"
    report = await engine.report(saga_id)
    got = parse(await LogMetrics(engine.log).scrape())
    await engine.close()
    assert report is not None
    assert (len(report.open_manual_actions), sorted(report.in_doubt)) == (0, ["s5"])
    assert by(got, "amends_manual_actions") == {("in_doubt", "mail.send"): 1}
    assert figures(report).manual == {("in_doubt", "mail.send"): 1}


async def test_a_drift_check_that_could_not_run_is_no_drift_detection(
    points: Points, spans: Spans
) -> None:
    """The CRM's read API is down at undo time: both CRM steps stay ``drifted`` ("could not
    check the world before undoing"), but nobody was seen changing anything. They counted as
    drift detections, so "where do people change what the agent wrote?" blamed people for a
    probe's outage; only a check that ran and found another value is one (and only its undo
    step span says ``amends.drift_found``)."""
    world, catalog = otel_world()
    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"), retry=FAST)
    saga_id = await scene(engine)
    world.core.faults["crm.read_field"] = [amends.PermanentError("crm read API down")] * 2
    report = await engine.undo(saga_id)
    scraped = parse(await LogMetrics(engine.log).scrape())
    await engine.close()

    crm = [s for s in report.steps if s.tool == "crm.update_field"]
    assert [(s.step_id, s.state.value) for s in crm] == [("s1", "drifted"), ("s2", "drifted")]
    assert all(s.detail.startswith(UNCHECKED) for s in crm)
    assert by(scraped, "amends_reversal_steps")[("drifted", "crm.update_field")] == 2
    assert by(scraped, "amends_drift_detections") == {}
    assert points.counts("amends.drift.detections") == {}
    found = {
        span_attrs(s)["amends.step_id"]: span_attrs(s)["amends.drift_found"]
        for s in spans.named("amends.undo_step")
    }
    assert (found["s1"], found["s2"]) == (False, False)


async def test_a_follow_up_the_budget_cut_short_counts_as_budget_exhaustion(
    points: Points, tmp_path: Path
) -> None:
    """Lane temporal2 item 4: the refund's inverse asks a follow-up (tell the customer); the
    budget has room for the check and the refund only. The step is compensated (rule 7: the
    missing follow-up is residue), and the budget was spent all the same: the reversal counts
    as budget exhaustion, in the OpenTelemetry metrics and on /metrics (it counted none). A
    follow-up whose arguments only quote those words does not."""
    from amends._observe import figures

    catalog = amends.Catalog()
    told: list[str] = []

    @catalog.tool("pay.status", reversibility="read_only")
    async def status(call: amends.Call, charge_id: str) -> str:
        return "captured"

    @catalog.tool("pay.charge", reversibility="compensable")
    async def charge(call: amends.Call, cents: int) -> dict[str, Any]:
        call.inverse("pay.refund", charge_id="ch_1")
        call.expect("pay.status", {"charge_id": "ch_1"}, equals="captured")
        return {"id": "ch_1"}

    @catalog.tool("pay.refund", reversibility="irreversible")
    async def refund(call: amends.Call, charge_id: str) -> dict[str, Any]:
        call.follow_up("mail.send", to="c@acme.test", text="your charge was refunded")
        return {"id": "re_1"}

    @catalog.tool("mail.send", reversibility="irreversible")
    async def send(call: amends.Call, to: str, text: str) -> dict[str, Any]:
        told.append(text)
        return {"message_id": "m1"}

    engine = amends.Engine(catalog, log=str(tmp_path / "a.db"), retry=FAST)
    async with engine.saga("Charge", saga_id="saga-cut") as saga:
        saga.call("pay.charge", cents=500)
    report = await engine.undo("saga-cut", budget=amends.Budget(tool_calls=2))
    metrics = parse(await LogMetrics(engine.log).scrape())
    await engine.close()
    [step] = report.steps
    assert (step.state.value, told) == ("compensated", [])
    assert [r.what for r in step.residue] == [
        "follow-up mail.send(text='your charge was refunded', to='c@acme.test') was not made "
        "(tool-call budget of 2 spent before mail.send could run)"
    ]
    assert points.counts("amends.budget.exhausted") == {frozenset(): 1}
    assert by(metrics, "amends_reversals_over_budget") == {(): 1}
    quoted = dataclasses.replace(
        step,
        residue=(
            amends.Residue(
                "follow-up mail.send(text='was not made (tool-call budget of 2 spent before "
                "mail.send could run)') was not made (mail.send raised PermanentError: no)"
            ),
        ),
    )
    assert not figures(dataclasses.replace(report, steps=(quoted,))).over_budget
