"""Hypothesis state machine: the same record / undo / edit / recover operations applied to a
SQLite log and a PostgreSQL log must give identical histories (event kinds per saga and step),
identical reports (``to_dict()`` minus ids and timestamps) and identical worlds."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections import defaultdict
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, rule, run_state_machine_as_test

import amends
from core_world import CoreWorld, fresh
from pg import PgServer

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

SHAPES = ["crm", "charge", "mail", "note", "crm+charge", "crm+mail", "crm-chain"]
_VOLATILE = {"reversal_id", "requested_at", "finished_at", "seconds"}


def _normal(report: amends.UndoReport) -> dict[str, Any]:
    return {k: v for k, v in report.to_dict().items() if k not in _VOLATILE}


class _Side:
    def __init__(self, url: str) -> None:
        self.world, catalog = fresh()
        self.engine = amends.Engine(
            catalog, log=url, retry=amends.RetryPolicy(initial_backoff=0.001, max_backoff=0.01)
        )


def make_machine(server: PgServer) -> type[RuleBasedStateMachine]:
    class LogsAgree(RuleBasedStateMachine):
        sagas = Bundle("sagas")

        def __init__(self) -> None:
            super().__init__()
            self.loop = asyncio.new_event_loop()
            self.tmp = tempfile.mkdtemp(prefix="amends-sm-")
            self.sides = [_Side(f"sqlite:///{self.tmp}/log.db"), _Side(server.new_database())]
            self.n = 0

        def run(self, fn: Any) -> list[Any]:
            async def both() -> list[Any]:
                out = []
                for side in self.sides:  # one after the other: same order on both
                    try:
                        out.append(("ok", await fn(side)))
                    except amends.AmendsError as exc:
                        out.append(("error", type(exc).__name__))
                return out

            return self.loop.run_until_complete(both())

        @rule(target=sagas, shape=st.sampled_from(SHAPES), record=st.sampled_from(["r1", "r2"]))
        def record(self, shape: str, record: str) -> str:
            self.n += 1
            saga_id = f"saga-{self.n}"

            async def go(side: _Side) -> str:
                async with side.engine.saga(shape, saga_id=saga_id) as saga:
                    prev = None
                    for part in shape.split("+"):
                        after = [prev] if prev is not None else []
                        if part == "crm":
                            prev = saga.call(
                                "crm.update_field",
                                record_id=record,
                                field="stage",
                                value=f"v{self.n}",
                                after=after,
                            )
                        elif part == "crm-chain":
                            a = saga.call(
                                "crm.update_field", record_id=record, field="owner", value="x"
                            )
                            prev = saga.call(
                                "crm.update_field",
                                record_id=record,
                                field="owner",
                                value="y",
                                after=[a],
                            )
                        elif part == "charge":
                            prev = saga.call("pay.charge", customer="c", cents=100, after=after)
                        elif part == "mail":
                            prev = saga.call("mail.send", to="a@x", subject="s", after=after)
                        else:
                            prev = saga.call("crm.note", record_id=record, text=f"n{self.n}")
                return saga.id

            results = self.run(go)
            assert results[0] == results[1]
            return saga_id

        @rule(saga_id=sagas)
        def undo(self, saga_id: str) -> None:
            async def go(side: _Side) -> dict[str, Any]:
                return _normal(await side.engine.undo(saga_id))

            results = self.run(go)
            assert results[0] == results[1]

        @rule(record=st.sampled_from(["r1", "r2"]))
        def human_edit(self, record: str) -> None:
            for side in self.sides:
                side.world.human_edit(record, "stage", "edited-by-a-person")

        @rule()
        def recover(self) -> None:
            async def go(side: _Side) -> tuple[Any, ...]:
                rec = await side.engine.recover()
                return (rec.in_doubt, [_normal(r) for r in rec.resumed])

            results = self.run(go)
            assert results[0] == results[1]

        def teardown(self) -> None:
            try:
                histories = self.run(self._history)
                assert histories[0] == histories[1]
                assert histories[0][0] == "ok"
                assert all(h[None][0] == "saga.started" for h in histories[0][1].values())
                worlds = [self._world(s.world) for s in self.sides]
                assert worlds[0] == worlds[1]
            finally:
                for side in self.sides:
                    self.loop.run_until_complete(side.engine.close())
                self.loop.close()
                shutil.rmtree(self.tmp, ignore_errors=True)

        async def _history(self, side: _Side) -> dict[str, dict[str | None, list[str]]]:
            out: dict[str, dict[str | None, list[str]]] = {}
            for i in range(1, self.n + 1):
                per: dict[str | None, list[str]] = defaultdict(list)
                for e in await side.engine.log.events(f"saga-{i}"):
                    per[e.step_id].append(e.kind)
                out[f"saga-{i}"] = dict(per)
            return out

        @staticmethod
        def _world(world: CoreWorld) -> Any:
            return (world.crm, world.charges, world.outbox, world.effects)

    return LogsAgree


def test_sqlite_and_postgres_logs_agree(pg_server: PgServer) -> None:
    run_state_machine_as_test(
        make_machine(pg_server),
        settings=settings(
            max_examples=12,
            stateful_step_count=8,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
            database=None,
        ),
    )
