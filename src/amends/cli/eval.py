"""``amends eval``: the adversarial suite from the command line.

``amends eval --sagas N --seed S [--engine amends|naive|broken-...] [--json]`` runs the suite and
prints one table per invariant and one per scenario family; ``amends eval --replay SEED:INDEX``
prints one saga: its steps, mutations, faults, every report and the true world.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from amends import ConfigError

from ..evals.generator import FAMILIES, generate
from ..evals.invariants import INVARIANTS, check, true_outcome
from ..evals.suite import CONCURRENCY, ENGINES, EngineTally, default_jobs, engine_factory, run_suite
from ._common import markup

__all__ = ["register"]


def register(sub: Any) -> None:
    p = sub.add_parser(
        "eval",
        help="run the adversarial evaluation suite (amends vs the naive undo stack)",
    )
    p.add_argument("--sagas", type=int, default=200, help="sagas per engine (default 200)")
    p.add_argument("--seed", type=int, default=1, help="generator seed (default 1)")
    p.add_argument(
        "--engine",
        choices=ENGINES,
        action="append",
        help="engine to run (repeatable); default: amends and naive side by side",
    )
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.add_argument("--replay", metavar="SEED:INDEX", help="print one saga in full and exit")
    p.add_argument(
        "--concurrency",
        type=int,
        default=CONCURRENCY,
        help=f"sagas computing at once per process (default {CONCURRENCY})",
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="processes to shard the sagas over (default: one per core)",
    )
    p.set_defaults(handler=_eval)


def _eval(args: argparse.Namespace) -> int:
    engines = tuple(args.engine or ("amends", "naive"))
    if args.replay:
        return _replay(args.replay, engines, as_json=args.json)
    if args.sagas < 1:
        raise ConfigError(f"--sagas must be at least 1, got {args.sagas}")
    jobs = default_jobs() if args.jobs is None else args.jobs
    if jobs < 1:
        raise ConfigError(f"--jobs must be at least 1, got {jobs}; omit it for one per core")
    if args.concurrency < 1:
        raise ConfigError(f"--concurrency must be at least 1, got {args.concurrency}")
    console = Console(stderr=True)
    total = args.sagas * len(engines)
    t0 = time.monotonic()
    with Progress(
        TextColumn("[bold]amends eval[/bold]"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=args.json or not console.is_terminal,
        transient=True,
    ) as progress:
        task = progress.add_task("sagas", total=total)
        tallies = asyncio.run(
            run_suite(
                args.sagas,
                args.seed,
                engines,
                jobs=jobs,
                concurrency=args.concurrency,
                on_done=lambda n: progress.advance(task, n),
            )
        )
    elapsed = time.monotonic() - t0
    if args.json:
        out = {
            "command": f"amends eval --sagas {args.sagas} --seed {args.seed} --jobs {jobs}",
            "seconds": round(elapsed, 2),
            "sagas_per_second": round(args.sagas / elapsed, 1) if elapsed else None,
            "jobs": jobs,
            "load": _load(),
            "engines": {e: t.to_dict() for e, t in tallies.items()},
        }
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
    else:
        _print_tables(tallies, args.sagas, args.seed, elapsed, jobs)
    amends = tallies.get("amends")
    return 1 if amends is not None and any(amends.violations.values()) else 0


def _load() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _print_tables(
    tallies: dict[str, EngineTally], sagas: int, seed: int, elapsed: float, jobs: int
) -> None:
    out = Console()
    rate = sagas / elapsed if elapsed else 0.0
    out.print(
        f"[bold]amends eval[/bold] — {sagas} sagas, seed {seed}, {elapsed:.1f}s "
        f"({rate:.0f} sagas/s, {jobs} jobs, load {_load()})"
    )
    inv = Table(title="Invariants (sagas where it held)", header_style="bold")
    inv.add_column("invariant")
    for e in tallies:
        inv.add_column(e, justify="right")
    inv.add_column("reproduce a failing saga", overflow="fold")
    for name in INVARIANTS:
        cells = []
        repro = []
        for t in tallies.values():
            n = t.checked[name]  # preview: sagas whose world did not change before undo
            held = n - t.violations[name]
            colour = "green" if held == n else "red"
            cells.append(f"[{colour}]{held}/{n} ({100 * t.rate(name):.1f}%)[/]" if n else "—")
            if t.failing[name]:
                repro.append(f"{t.engine}: --replay {t.failing[name][0]}")
        inv.add_row(name, *cells, escape("; ".join(repro)) or "—")
    wrong = [f"{100 * t.silent_failure_rate:.1f}%" for t in tallies.values()]
    inv.add_row("[bold]report silently wrong[/bold]", *wrong, "")
    out.print(inv)
    fam = Table(title="Scenario families (report silently wrong / any invariant violated)",
                header_style="bold")  # fmt: skip
    fam.add_column("family")
    for e in tallies:
        fam.add_column(e, justify="right")
    for f in FAMILIES:
        row = []
        for t in tallies.values():
            c = t.by_family.get(f, {"sagas": 0, "wrong": 0, "violated": 0})
            row.append(f"{c['wrong']} / {c['violated']} of {c['sagas']}")
        fam.add_row(f, *row)
    out.print(fam)
    for t in tallies.values():
        for name, ex in t.examples.items():
            out.print(f"[dim]{t.engine} {name}:[/dim] {escape(ex)}")


def _replay(ref: str, engines: tuple[str, ...], *, as_json: bool) -> int:
    seed_s, _, index_s = ref.partition(":")
    try:
        seed, index = int(seed_s), int(index_s)
    except ValueError:
        raise ConfigError(f"--replay {ref!r} must be SEED:INDEX, e.g. --replay 1:42") from None
    from ..evals.runner import run_scenario

    sc = generate(seed, index)
    results = {}
    for e in engines:
        kind, factory = engine_factory(e)
        results[e] = asyncio.run(run_scenario(sc, kind, engine_factory=factory))
    if as_json:
        out = {"scenario": sc.to_dict(), "engines": {}}
        for e, r in results.items():
            status, truth = true_outcome(r)
            out["engines"][e] = {
                "forward": r.forward,
                "reports": [rep.to_dict() for rep in r.reports],
                "true_status": status,
                "true_steps": truth,
                "violations": check(r),
                "world": r.world,
                "effects": r.effects,
            }
        sys.stdout.write(json.dumps(out, indent=2, default=str) + "\n")
        return 0
    con = Console()
    crash = f"{sc.crash} in {sc.crash_op}" if sc.crash and sc.crash_op else str(sc.crash)
    stall = f", {sc.stall} stalls until undo answers (<= {sc.stall_seconds}s)" if sc.stall else ""
    con.print(f"[bold]saga {sc.ref}[/bold] family {sc.family}, {len(sc.steps)} steps, "
              f"requests {sc.requests} x{sc.n_requests}, crash {crash}{stall}, "
              f"budget {sc.budget_calls} calls, {sc.budget_seconds}s")  # fmt: skip
    steps = Table("step", "tool", "args", "after", "undo after", header_style="bold")
    for s in sc.steps:
        steps.add_row(s.step_id, s.tool, escape(json.dumps(s.args)), ", ".join(s.after),
                      ", ".join(s.undo_after))  # fmt: skip
    con.print(steps)
    for m in sc.mutations:
        value = markup(m.value if m.value is not None else "")
        con.print(f"mutation: {m.kind} on {m.step_id} {value}")
    for f in sc.forward_faults:
        con.print(f"forward fault: {f}")
    for sid, kind, times in sc.step_faults:
        con.print(f"forward fault on {sid}'s calls only: {kind} x{times}")
    for f in sc.reversal_faults:
        con.print(f"reversal fault: {f}")
    for e, r in results.items():
        status, truth = true_outcome(r)
        con.rule(f"{e}")
        rep = r.reports[-1] if r.reports else None
        table = Table("step", "tool", "forward", "report says", "world shows", header_style="bold")
        claimed = {o.step_id: o.state.value for o in rep.steps} if rep else {}
        for s in sc.steps:
            table.add_row(s.step_id, s.tool, r.forward.get(s.step_id, "-"),
                          claimed.get(s.step_id, "-"), truth[s.step_id])  # fmt: skip
        con.print(table)
        con.print(f"report status: {rep.status if rep else 'none'}; true status: {status}; "
                  f"{len(r.reports)} report(s), reversal ids "
                  f"{sorted({x.reversal_id for x in r.reports})}; crashed={r.crashed}")  # fmt: skip
        for name, msgs in check(r).items():
            for msg in msgs:
                con.print(f"[red]{name}[/red]: {markup(msg)}")
        con.print("true world:")
        # as ASCII JSON: what the agent and vendors wrote (a lone surrogate, U+2028, a terminal
        # escape: the hostile_words family) is shown escaped, never raw (the encoder raised)
        con.print_json(json.dumps(r.world, default=str), ensure_ascii=True)
    return 0
