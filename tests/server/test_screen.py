"""The Undo screen's wording (issue 17 item 7): the preview grouped by what will happen, and the
confirmation's sentence in the engine's verbs, whatever the button's label."""

from __future__ import annotations

from typing import Any

from amends.server.web import screen_of


def step(step_id: str, action: str, *, residue: bool = False, person: bool = False) -> Any:
    return {
        "step_id": step_id,
        "tool": f"t.{step_id}",
        "action": action,
        "description": f"Step {step_id}",
        "needs_person": person or action in ("acknowledge", "in_doubt", "review"),
        "expected_residue": [{"what": "Refund", "parties": ["c1"], "settles_at": "2026-12-07"}]
        if residue
        else [],
        "deadline": None,
    }


def test_the_summary_counts_each_verb_and_says_who_must_follow_up() -> None:
    plan = {
        "steps": [
            step("a", "revert"),
            step("b", "cancel"),
            step("c", "compensate", residue=True),
            step("d", "acknowledge"),
            step("e", "review"),
            step("f", "skip"),
            step("g", "wait"),
        ]
    }
    screen = screen_of(plan)
    assert screen["summary"] == (
        "Revert 1, Cancel 1, Compensate 1 with residue, Acknowledge 2 — a person must follow up"
    )
    assert screen["confirm"] == "Yes: Revert 1, Cancel 1, Compensate 1, Acknowledge 2"
    assert [(g["key"], [s["step_id"] for s in g["steps"]]) for g in screen["groups"]] == [
        ("revert", ["a", "b"]),
        ("compensate", ["c"]),
        ("person", ["d", "e"]),
        ("wait", ["g"]),
        ("none", ["f"]),
    ]
    assert screen["residue"] == [
        {"what": "Refund", "parties": ["c1"], "settles_at": "2026-12-07", "step": "Step c"}
    ]
    assert [s["step_id"] for s in screen["cannot"]] == ["d", "e"]
    assert screen["actionable"] is True


def test_a_compensation_without_residue_is_not_said_to_leave_any() -> None:
    screen = screen_of({"steps": [step("a", "compensate")]})
    assert screen["summary"] == "Compensate 1"
    assert screen["confirm"] == "Yes: Compensate 1"


def test_nothing_to_undo_says_so_and_offers_no_action() -> None:
    screen = screen_of({"steps": [step("a", "skip")]})
    assert screen["summary"] == "Nothing to undo"
    assert screen["actionable"] is False and screen["cannot"] == []
