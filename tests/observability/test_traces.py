"""Issue 28 item 1: a saga and its reversal as OpenTelemetry spans, exported with the SDK's
in-memory exporter: the tree, the vocabulary's attributes, the link from the reversal to the saga
(and so to the agent run around it), and never a secret."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from otel_capture import Spans, attrs, everything, span_id
from otel_world import CARD, otel_world, scene

import amends

FAST = amends.RetryPolicy(initial_backoff=0.001, max_backoff=0.01, jitter=0.0)


async def test_a_saga_and_its_undo_make_one_span_tree_with_the_vocabulary_and_no_secret(
    spans: Spans,
) -> None:
    """Saga under the agent's span, a step span per call with the call's span under it; the
    reversal span links to the saga span, an undo-step span per step carries the report's verb
    and state, and the probes and compensations sit under their step. The card number is in no
    name, attribute, event, link or status."""
    world, catalog = otel_world()
    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"), retry=FAST)
    agent = trace.get_tracer("the-agent-framework")
    with agent.start_as_current_span("agent run") as run:
        saga_id = await scene(engine)
    world.core.human_edit("r2", "owner", "yan")  # drift: someone changed it since
    with agent.start_as_current_span("Undo clicked"):
        report = await engine.undo(saga_id, budget=amends.Budget(tool_calls=40))
    await engine.close()
    assert report.status == "cannot_undo"  # the drifted owner and the email stand

    saga = spans.one("amends.saga", saga_id=saga_id)
    assert saga.parent is not None and saga.parent.span_id == run.get_span_context().span_id
    assert attrs(saga) == {
        "amends.saga_id": saga_id,
        "amends.tenant": "acme",
        "amends.state": "completed",
    }
    steps = spans.children(saga)
    assert sorted((attrs(s)["amends.step_id"], s.name) for s in steps) == [
        (f"s{i}", "amends.step") for i in range(1, 6)
    ]
    hold = spans.one("amends.step", step_id="s3")
    assert attrs(hold) == {
        "amends.saga_id": saga_id,
        "amends.step_id": "s3",
        "amends.tool": "card.hold",
        "amends.reversibility": "reversible",
        "amends.state": "done",
    }
    (call,) = spans.children(hold)
    assert (call.name, attrs(call)["amends.phase"], attrs(call)["amends.attempt"]) == (
        "amends.call",
        "forward",
        1,
    )

    rev = spans.one("amends.reversal", reversal_id=report.reversal_id)
    assert rev.parent is not None and rev.parent.span_id != span_id(saga)  # the caller's child
    assert [(link.context.trace_id, link.context.span_id) for link in rev.links] == [
        (saga.context.trace_id, span_id(saga))  # type: ignore[union-attr]
    ]
    assert {
        k: v for k, v in attrs(rev).items() if k.startswith(("amends.outcome", "amends.sp"))
    } == {
        "amends.outcome": "cannot_undo",
        "amends.spent.tool_calls": report.tool_calls,
        "amends.spent.tokens": 0,
        "amends.spent.seconds": round(report.seconds, 6),
    }
    assert attrs(rev)["amends.budget.tool_calls"] == 40
    undo_steps = {attrs(s)["amends.step_id"]: s for s in spans.children(rev)}
    assert {
        k: (attrs(s)["amends.state"], attrs(s).get("amends.verb")) for k, s in undo_steps.items()
    } == {o.step_id: (o.state.value, o.verb) for o in report.steps}
    assert {k for k, s in undo_steps.items() if attrs(s)["amends.drift_found"]} == {"s2"}
    assert attrs(undo_steps["s4"])["amends.residue"] == 1  # the refund settles later
    under_hold = spans.children(undo_steps["s3"])
    assert sorted((s.name, attrs(s)["amends.tool"]) for s in under_hold) == [
        ("amends.compensation", "card.release"),
        ("amends.probe", "card.status"),  # the drift check first (rule 4)
    ]
    assert [s.name for s in spans.children(undo_steps["s5"])] == []  # Acknowledge: no call
    assert world.holds == {}  # the card's hold was released with the resolved secret
    assert CARD not in everything(spans.all())


async def test_a_failing_compensation_is_an_error_span_named_by_its_type_never_its_message(
    spans: Spans,
) -> None:
    """The vendor's message quotes the card (rule 11: it may not reach a span); the span's
    status names the exception type, the undo-step span the step's state."""
    world, catalog = otel_world()
    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"), retry=FAST)
    async with engine.saga("Hold a card") as saga:
        saga.call("card.hold", card=CARD, cents=700)
    world.release_error = "issuer declined the release of card {card}"
    report = await engine.undo(saga.id)
    await engine.close()
    assert [(s.step_id, s.state.value) for s in report.steps] == [("s1", "failed")]
    comp = spans.one("amends.compensation", tool="card.release")
    assert (comp.status.status_code.name, comp.status.description) == ("ERROR", "PermanentError")
    step = spans.one("amends.undo_step", step_id="s1")
    assert (step.status.status_code.name, step.status.description) == ("ERROR", "failed")
    assert comp.events == ()  # no exception event: its message would carry the card
    assert CARD not in everything(spans.all())
    assert CARD not in report.to_json()


async def test_a_reversal_in_another_engine_links_to_the_saga_span_through_the_log(
    spans: Spans, tmp_path: Path
) -> None:
    """The engine that undoes is not the one that ran the saga (another process, later): the
    saga span's ids travel in the log, and the reversal span links to them."""
    _, catalog = otel_world()
    db = str(tmp_path / "amends.db")
    forward = amends.Engine(catalog, log=db)
    with trace.get_tracer("agent").start_as_current_span("agent run"):
        saga_id = await scene(forward)
    await forward.close()
    undoer = amends.Engine(catalog, log=db, retry=FAST)
    report = await undoer.undo(saga_id)
    stored = await undoer.log.get_saga(saga_id)
    await undoer.close()
    saga = spans.one("amends.saga", saga_id=saga_id)
    assert stored is not None and stored.meta["trace"] == {
        "trace_id": f"{saga.context.trace_id:032x}",  # type: ignore[union-attr]
        "span_id": f"{span_id(saga):016x}",
    }
    rev = spans.one("amends.reversal", reversal_id=report.reversal_id)
    assert rev.parent is None  # nothing was current when this engine undid it
    assert [link.context.span_id for link in rev.links] == [span_id(saga)]


async def test_a_tampered_trace_reference_in_the_log_is_ignored_not_trusted(spans: Spans) -> None:
    """Rule 12: log contents are data. A saga whose recorded trace reference is not two hex ids
    is undone as any other, its reversal span simply has no link."""
    _, catalog = otel_world()
    log = amends.SqliteLog(":memory:")
    engine = amends.Engine(catalog, log=log, retry=FAST)
    await log.create_saga(
        "saga-x", "hand-made", tenant=None, actor=None, owner="o", lease_until=0.0, now=0.0,
        meta={"trace": {"trace_id": "zz" * 16, "span_id": "0" * 16}},
    )  # fmt: skip
    report = await engine.undo("saga-x")
    await engine.close()
    rev = spans.one("amends.reversal", reversal_id=report.reversal_id)
    assert rev.links == ()
    assert attrs(rev)["amends.outcome"] == "fully_reversed"


def test_without_a_tracer_provider_amends_imports_no_opentelemetry_and_logs_no_trace(
    tmp_path: Path,
) -> None:
    """No cost when not used: a saga and its undo import nothing of OpenTelemetry, and with the
    API imported but no provider set they record no trace reference in the log."""
    script = textwrap.dedent(
        f"""
        import asyncio, sys
        sys.path[:0] = [{str(Path(__file__).parents[1])!r}, {str(Path(__file__).parent)!r}]
        import amends
        from otel_world import otel_world, scene

        async def main(db):
            _, catalog = otel_world()
            engine = amends.Engine(catalog, log=db)
            saga_id = await scene(engine)
            report = await engine.undo(saga_id)
            saga = await engine.log.get_saga(saga_id)
            await engine.close()
            return report.status.value, "trace" in saga.meta

        print(asyncio.run(main({str(tmp_path / "a.db")!r})))
        print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))
        import opentelemetry.trace
        print(asyncio.run(main({str(tmp_path / "b.db")!r})))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    ).stdout.splitlines()
    assert out == [
        "('cannot_undo', False)",
        "[]",
        "('cannot_undo', False)",
    ]


async def test_a_traced_step_cancelled_before_it_started_leaves_no_coroutine_never_awaited(
    spans: Spans,
) -> None:
    """Issue 29 (found by lane fan4): with tracing on, a step's task runs its step inside a span
    wrapper; cancelled before it started (the agent's task cancelled right after ``saga.call``,
    or ``step.task.cancel()``), the wrapped runs were never started and Python warned "coroutine
    was never awaited" when they were freed, in whatever code ran then. They are closed when the
    task ends; the step never ran and the gather over it raises CancelledError."""
    import asyncio
    import gc
    import warnings

    catalog = amends.Catalog()

    @catalog.tool("t.noop")
    async def noop(call: amends.Call, i: int) -> int:
        return i

    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"))

    async def cancelled_before_it_started() -> None:
        async with engine.saga("cancelled before it started") as saga:
            assert saga.trace.span is not None  # the wrapped path
            gone = saga.call("t.noop", i=1)
            assert gone.task is not None
            gone.task.cancel()
            try:
                await saga.gather(gone)
            except asyncio.CancelledError:
                pass
            else:
                raise AssertionError("the gather returned over a cancelled step")
        assert gone.state == "pending"  # its tool was never called

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        await cancelled_before_it_started()
        await engine.close()
        for _ in range(3):
            await asyncio.sleep(0)
        gc.collect()
    assert [str(w.message) for w in caught if "never awaited" in str(w.message)] == []


async def test_a_saga_cancelled_while_its_log_entry_is_written_ends_its_span(
    spans: Spans, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent's task is cancelled while ``engine.saga(...)`` writes the saga's entry: its
    span was started and nothing ended it (only a log error did; ``__aexit__`` never runs), so
    the saga span stayed open for the life of the process and never reached the collector. It
    ends now, ``not_started``, and nothing else is left open."""
    import asyncio

    _, catalog = otel_world()
    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"))
    writing = asyncio.Event()
    real = engine.log.create_saga

    async def slow_create(*args: Any, **kwargs: Any) -> None:
        writing.set()
        await asyncio.sleep(30)  # a log slow to answer
        await real(*args, **kwargs)

    monkeypatch.setattr(engine.log, "create_saga", slow_create)
    ended: list[str] = []
    recording: list[Any] = []

    async def agent() -> None:
        saga = engine.saga("Cancelled while it starts", tenant="acme")
        try:
            async with saga:
                ended.append("entered")  # never: the entry was not written
        finally:
            recording.append(saga.trace.span)

    task = asyncio.create_task(agent())
    await writing.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await engine.close()
    assert ended == []
    (saga_span,) = spans.named("amends.saga")
    assert recording[0] is not None and not recording[0].otel.is_recording()  # ended
    assert attrs(saga_span)["amends.state"] == "not_started"
    assert saga_span.end_time is not None


async def test_span_attributes_show_control_characters_as_escapes_as_the_logs_do(
    spans: Spans,
) -> None:
    """Lane temporal2 item 4: a tenant comes from the caller (an HTTP header, an agent); the
    log records and metrics showed its control characters as escapes (``_telemetry.clean``),
    the saga span carried them raw to every trace viewer that renders it."""
    _, catalog = otel_world()
    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"), retry=FAST)
    async with engine.saga("Hold a card", tenant="acme\x1b[2J\x1b]8;;http://x\x07\n") as saga:
        saga.call("card.hold", card=CARD, cents=700)
    await engine.close()
    assert attrs(spans.one("amends.saga", saga_id=saga.id))["amends.tenant"] == (
        "acme\\x1b[2J\\x1b]8;;http://x\\x07\\n"
    )
    texts = [v for s in spans.all() for v in attrs(s).values() if isinstance(v, str)]
    assert not any(ch in t for t in texts for ch in "\x1b\x07\n")


async def test_a_follow_up_a_person_sends_later_is_a_span_linked_to_the_saga(
    spans: Spans, tmp_path: Path
) -> None:
    """Lane temporal2 item 4: a person sends a manual action's follow-up after the reversal
    finished, from another engine (another process): its call's span had no parent and no
    link, found from nothing. It is an ``amends.send_follow_up`` span linked to the saga's span (as
    the reversal's is), with the call under it and the reversal it belongs to."""
    _, catalog = otel_world()
    db = str(tmp_path / "amends.db")
    first = amends.Engine(catalog, log=db, retry=FAST)
    saga_id = await scene(first)
    report = await first.undo(saga_id)
    await first.close()
    later = amends.Engine(catalog, log=db, retry=FAST)
    sent = await later.send_follow_up(
        saga_id, "s5", tool="mail.send", by="ann@example.com",
        args={"to": "c1@acme.test", "subject": "Please disregard my welcome"},
    )  # fmt: skip
    await later.close()
    assert sent.state == "sent"
    saga = spans.one("amends.saga", saga_id=saga_id)
    fu = spans.one("amends.send_follow_up", saga_id=saga_id)
    assert [link.context.span_id for link in fu.links] == [span_id(saga)]
    assert attrs(fu) == {
        "amends.saga_id": saga_id,
        "amends.step_id": "s5",
        "amends.tool": "mail.send",
        "amends.reversal_id": report.reversal_id,
        "amends.state": "sent",
    }
    assert [(c.name, attrs(c)["amends.tool"]) for c in spans.children(fu)] == [
        ("amends.follow_up", "mail.send")
    ]
    assert CARD not in everything(spans.all())
