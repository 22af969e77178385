"""``amends follow-up send`` and ``amends follow-up list``: a person sends a manual action's
draft through a catalog tool, as a follow-up of the saga's reversal (issue 27, docs/follow-ups.md).

The person sees the tool, the recipients the manual action names, the arguments and the text
before anything is sent, and confirms (``--yes`` confirms without asking: scripts).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rich.console import Console

from amends import (
    Catalog,
    ConfigError,
    Engine,
    SagaRecord,
    SagaStateError,
    SentFollowUp,
    UndoReport,
)

from .._catalog_ref import choose_catalog
from ._common import (
    add_catalog_argument,
    add_db_argument,
    allowed_catalogs,
    markup,
    open_existing_log,
    print_item,
    print_json,
    run_async,
    screen,
)
from .core import _get, _os_user

__all__ = ["register"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    group = sub.add_parser(
        "follow-up",
        help="send a manual action's draft through a catalog tool (a follow-up of the "
        "reversal), or list the follow-ups sent",
    )
    cmds = group.add_subparsers(dest="follow_up_command", metavar="ACTION", required=True)
    send = cmds.add_parser(
        "send",
        help="send step STEP's manual action through --tool, after showing the recipients and "
        "the text; sent, it resolves the manual action; exits 1 if it was not sent",
    )
    send.add_argument("saga_id")
    send.add_argument("step_id")
    add_db_argument(send)
    add_catalog_argument(send)
    send.add_argument("--tool", required=True, help="catalog tool to send with, e.g. mail.send")
    send.add_argument(
        "--arg",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an argument of the tool (repeatable), e.g. --arg to=bob@example.com",
    )
    send.add_argument(
        "--text-arg",
        metavar="NAME",
        help="the tool's argument that carries the message (e.g. body); it gets --text, or "
        "the manual action's draft as it is",
    )
    send.add_argument("--text", help="the message as you edited it (default: the draft)")
    send.add_argument("--yes", action="store_true", help="send without asking to confirm")
    send.add_argument("--json", action="store_true", help="print the follow-up as JSON")
    send.set_defaults(handler=_send)
    listing = cmds.add_parser("list", help="the follow-ups people sent in a saga's reversal")
    listing.add_argument("saga_id")
    add_db_argument(listing)
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.set_defaults(handler=_list)


def _arguments(args: argparse.Namespace, draft: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in args.arg:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"--arg {item!r} is not NAME=VALUE; e.g. --arg to=bob@example.com")
        out[name.strip()] = value
    if args.text_arg:
        text = args.text if args.text is not None else draft
        if text is None:
            raise ConfigError(
                f"the manual action of step {args.step_id!r} has no draft; give the message "
                f"with --text"
            )
        out[args.text_arg] = text
    elif args.text is not None:
        raise ConfigError("--text needs --text-arg NAME: the tool's argument that carries it")
    return out


def _confirm(
    console: Console, args: argparse.Namespace, parties: tuple[str, ...], call: dict[str, Any]
) -> None:
    console.print(
        f"Follow-up for step {markup(args.step_id)} of saga {markup(args.saga_id)}, sent with "
        f"{markup(args.tool)}"
    )
    print_item(
        console, f"recipients named by the manual action: {markup(', '.join(parties) or '(none)')}"
    )
    for name, value in sorted(call.items()):
        print_item(console, f"{markup(name)}: {markup(value)}")
    console.print("A sent message cannot be taken back.")
    if args.yes:
        return
    if not sys.stdin.isatty():
        raise ConfigError("nothing was sent: confirm with --yes when not at a terminal")
    if input("Send it? [y/N] ").strip().lower() not in ("y", "yes"):
        raise ConfigError("nothing was sent: not confirmed")


def _send(args: argparse.Namespace) -> int:
    console = screen()

    async def go() -> SentFollowUp:
        log = open_existing_log(args.db)
        try:
            saga = await _get(log, args.saga_id)
            action = _manual_action(saga, args.step_id)
            call = _arguments(args, action.draft)
            _confirm(console, args, action.parties, call)
            _name, catalog = choose_catalog(
                saga.meta, allowed_catalogs(args.catalog, args.db), saga_id=saga.saga_id
            )
        except BaseException:
            await log.close()
            raise
        engine = Engine(catalog, log=log)
        try:
            return await engine.send_follow_up(
                args.saga_id, args.step_id, tool=args.tool, args=call, by=_os_user()
            )
        finally:
            await engine.close()

    sent = run_async(go())
    if args.json:
        print_json(sent.to_dict())
    else:
        _print(console, sent)
    return 0 if sent.state == "sent" else 1


def _manual_action(saga: SagaRecord, step_id: str) -> Any:
    rev = saga.reversal
    report = UndoReport.from_dict(rev.report) if rev is not None and rev.report else None
    if report is None:
        raise SagaStateError(
            f"saga {saga.saga_id!r} has no finished reversal, so no manual action to send; "
            f"undo it first: amends undo {saga.saga_id}",
            saga_id=saga.saga_id,
        )
    for m in report.manual_actions:
        if m.step_id == step_id:
            return m
    have = ", ".join(m.step_id for m in report.manual_actions) or "none"
    raise SagaStateError(
        f"step {step_id!r} of saga {saga.saga_id!r} has no manual action (steps with one: {have})",
        saga_id=saga.saga_id,
        step_id=step_id,
    )


def _print(console: Console, f: SentFollowUp) -> None:
    console.print(f"{markup(f.follow_up_id)} ({markup(f.tool)}, by {markup(f.by)}): "
                  f"{markup(f.state)} — {markup(f.detail)}")  # fmt: skip
    for r in f.residue:
        print_item(console, f"residue: {markup(r.what)}")


def _list(args: argparse.Namespace) -> int:
    async def go() -> list[SentFollowUp]:
        engine = Engine(Catalog(), log=open_existing_log(args.db, read_only=True))
        try:
            return await engine.follow_ups(args.saga_id)
        finally:
            await engine.close()

    sent = run_async(go())
    if args.json:
        print_json([f.to_dict() for f in sent])
        return 0
    console = screen()
    if not sent:
        console.print(f"no follow-up was sent in saga {markup(args.saga_id)}'s reversal")
    for f in sent:
        _print(console, f)
    return 0
