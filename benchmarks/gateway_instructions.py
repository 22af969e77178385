"""Instructions per ``tools/call`` of the MCP gateway's own work, counted by callgrind: the
deterministic twin of section 7's in-process rows ("amends' work alone"), whatever the load.

``python benchmarks/gateway_instructions.py ROOT [ROOT ...] [--annotate] [--counts]`` runs, for
each source tree ``ROOT`` (a checkout or a ``git archive`` snapshot, so two trees compare side by
side), a :class:`~amends.integrations.mcp.gateway.Gateway` in-process on a ``SqliteLog`` file
(the gateway's default, synchronous=FULL) in front of section 7's upstream (``python -m
benchmarks.mcp_gateway``: an in-memory key-value server in its own process, not counted), with
section 7's contracts. Under ``valgrind --tool=callgrind --instr-atstart=no`` it counts, every
thread of the gateway's process included, ``N`` sequential calls of each kind:

- ``direct send`` / ``direct set``: the gateway's own upstream connection's ``call`` (one stdio
  round trip through the SDK client; what section 7 calls "in-process direct");
- ``gateway send``: ``Gateway.call_tool`` of ``b_send``, a tool without a contract (an
  irreversible step: intent and result made durable, one round trip);
- ``gateway set``: ``Gateway.call_tool`` of ``b_set``, a reversible tool with one capture read
  (two round trips: the capture and the write) and an inverse and expectation recorded.

Each kind runs ``WARM`` calls first, uncounted (imports, the saga's opening, first-call
caches), then ``N`` calls between two callgrind dumps (``_callgrind.py``). Printed per call:
each kind, and amends' own work: ``gateway send - direct send`` and ``gateway set - 2 x direct
set`` (the capture's round trip is the upstream's, not amends'; a direct ``get`` costs what a
direct ``set`` does within 1%).

With ``--annotate`` the measured dumps of the two gateway kinds are kept and their C-level self
cost is printed by library. With ``--counts`` the same runs are made again without valgrind,
under cProfile (main thread: the event loop): Python function calls per ``tools/call``
(builtins apart; a coroutine counts once per resumption), event-loop passes per call, and the
amends functions called most.
"""

from __future__ import annotations

import os
import sys
import tempfile

N = 100
WARM = 20
KINDS = ("direct send", "gateway send", "direct set", "gateway set")

_CTX_FIELDS = {
    "meta": None,
    "protocol_version": "2026-07-28",
    "session": None,
    "request_id": None,
}


def _gateway(root: str, tmp: str) -> tuple[object, object]:
    """The config of an in-process gateway in front of section 7's upstream (``root``'s)."""
    import json

    sys.path[:0] = [os.path.join(root, "src"), root]
    from benchmarks.mcp_gateway import CONTRACTS

    contracts = os.path.join(tmp, "contracts.toml")
    with open(contracts, "w") as f:
        f.write(CONTRACTS)
    db = os.path.join(tmp, f"gw-{os.getpid()}.db")
    config = os.path.join(tmp, f"gw-{os.getpid()}.toml")
    with open(config, "w") as f:
        f.write(
            f'[gateway]\nlog = {json.dumps(db)}\n[[upstream]]\nname = "b"\n'
            f"command = {json.dumps(sys.executable)}\n"
            f'args = ["-m", "benchmarks.mcp_gateway"]\ncwd = {json.dumps(root)}\n'
            f"contracts = [{json.dumps(contracts)}]\n"
        )
    from amends.integrations.mcp import load_config
    from amends.integrations.mcp.gateway import Gateway

    return Gateway, load_config(config)


def _calls(gw: object, kind: str) -> object:
    """The coroutine function making ``n`` calls of ``kind`` from ``start`` on."""
    from typing import Any

    ctx = type("Ctx", (), dict(_CTX_FIELDS))()  # what the SDK hands a handler: fields read
    upstream = gw.upstreams[0]  # type: ignore[attr-defined]
    via, tool = kind.split()

    async def run(start: int, n: int) -> None:
        for i in range(start, start + n):
            a: dict[str, Any] = {"key": "k", "value": f"v{i}"} if tool == "set" else {"to": "x"}
            if via == "direct":
                r = await upstream.call(tool, a)
                assert r.ok, r.text
            else:
                r = await gw.call_tool(ctx, f"b_{tool}", a)  # type: ignore[attr-defined]
                assert not r.is_error, r.content

    return run


async def _warmed(gw: object) -> dict[str, object]:
    """Each kind's calls (:func:`_calls`), after ``WARM`` uncounted calls of each."""
    runs = {kind: _calls(gw, kind) for kind in KINDS}
    for kind in KINDS:
        await runs[kind](0, WARM)  # type: ignore[operator]
    return runs


def child(root: str, client: str, tmp: str) -> None:
    import asyncio
    import ctypes
    import gc

    gateway, config = _gateway(root, tmp)
    cg = ctypes.CDLL(client)

    async def main() -> None:
        async with gateway(config) as gw:  # type: ignore[operator]
            runs = await _warmed(gw)
            for kind in KINDS:
                gc.collect()
                gc.freeze()
                cg.cg_start()
                cg.cg_dump()  # ends what came before: the next dump holds the run alone
                await runs[kind](WARM, N)  # type: ignore[operator]
                cg.cg_dump()
                cg.cg_stop()
                gc.unfreeze()

    asyncio.run(main())


def counts_child(root: str, tmp: str) -> None:
    import asyncio
    import cProfile
    import gc
    import pstats

    gateway, config = _gateway(root, tmp)

    async def main() -> None:
        async with gateway(config) as gw:  # type: ignore[operator]
            runs = await _warmed(gw)
            for kind in KINDS:
                gc.collect()
                prof = cProfile.Profile()
                prof.enable()
                await runs[kind](WARM, N)  # type: ignore[operator]
                prof.disable()
                stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
                py = {k: v for k, v in stats.items() if k[0] != "~"}
                total = sum(v[1] for v in py.values()) / N
                passes = sum(v[1] for k, v in py.items() if k[2] == "_run_once") / N
                print(
                    f"  {kind:13} {total:8.1f} Python calls per tools/call, "
                    f"{passes:5.2f} event-loop passes"
                )
                if kind.startswith("gateway"):  # amends' own functions making the most calls
                    mine = {k: v for k, v in py.items() if f"{os.sep}amends{os.sep}" in k[0]}
                    top = sorted(mine.items(), key=lambda kv: -kv[1][1])[:12]
                    for (file, line, fn), v in top:
                        where = f"{os.path.basename(file)}:{line}"
                        print(f"      {v[1] / N:6.1f}  {fn} ({where})")

    asyncio.run(main())


def measure(root: str, client: str, tmp: str, annotate: bool) -> dict[str, float]:
    from benchmarks._callgrind import dump_total, print_by_library, run_child

    out = os.path.join(tmp, f"cg.{abs(hash(root))}.out")
    run_child(__file__, [root, client, tmp], out)
    per_call = {}
    for i, kind in enumerate(KINDS):
        dump = f"{out}.{2 * i + 2}"  # odd dumps: what came before each run
        per_call[kind] = dump_total(dump) / N
        if annotate and kind.startswith("gateway"):
            print_by_library(dump, f"--- {root} {kind}, self cost by library", 8)
    return per_call


def main(roots: list[str], annotate: bool, counts: bool) -> None:
    import subprocess

    from benchmarks._callgrind import build_client

    with tempfile.TemporaryDirectory() as tmp:
        if counts:
            for root in roots:
                print(f"{root}:")
                subprocess.run([sys.executable, __file__, "--counts-child", root, tmp], check=True)
            return
        client = build_client(tmp)
        for root in roots:
            c = measure(root, client, tmp, annotate)
            own_send = c["gateway send"] - c["direct send"]
            own_set = c["gateway set"] - 2 * c["direct set"]
            print(
                f"{root}: per tools/call, k instructions: "
                + "  ".join(f"{k} {v / 1e3:.1f}" for k, v in c.items())
                + f"\n  amends' own work: no contract {own_send / 1e3:.1f} k, "
                f"one capture read {own_set / 1e3:.1f} k"
            )


if __name__ == "__main__":
    # run as a script, this file's folder would shadow the standard library's ``profile``
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    if sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], sys.argv[4])
    elif sys.argv[1] == "--counts-child":
        counts_child(sys.argv[2], sys.argv[3])
    else:
        sys.path.insert(0, os.path.dirname(here))  # benchmarks._callgrind
        args = [a for a in sys.argv[1:] if not a.startswith("--")]
        main(args, "--annotate" in sys.argv, "--counts" in sys.argv)
