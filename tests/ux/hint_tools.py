"""A catalog at module level for the CLI subprocesses of ``test_printed_commands`` (issue 26
item 3): ``hint_tools:CATALOG``. Each process has its own in-memory world; the environment sets
what that world shows, so a command run later, in another process, meets the same world:

- ``HINT_STAGE``: what CRM record r1's stage reads (the agent's value, ``won``, for an undo);
- ``HINT_FAULT``: ``crm.update_field`` fails permanently once (the vendor key expired).
"""

from __future__ import annotations

import os

import amends
from core_world import fresh

WORLD, CATALOG = fresh()
if os.environ.get("HINT_STAGE"):
    WORLD.crm["r1"]["stage"] = os.environ["HINT_STAGE"]
if os.environ.get("HINT_FAULT"):
    WORLD.faults["crm.update_field"] = [amends.PermanentError("vendor API key expired")]
