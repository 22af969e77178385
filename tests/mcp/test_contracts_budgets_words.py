"""Issue 24 items 4, 7 and 11 through real processes: a contract naming a tool the server does
not list is refused (and audited), a small undo budget completes steps and says how to continue
in MCP words, and an in-doubt step is explained to an MCP user, not to a Python tool author."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from amends import ConfigError
from conftest import KV_CONTRACTS, KvSetup, text_of, write_kv_config

pytestmark = pytest.mark.slow


def _typo_setup(tmp_path: Path) -> KvSetup:
    contracts = tmp_path / "contracts.toml"
    contracts.write_text(
        KV_CONTRACTS.read_text().replace('name = "kv_delete"', 'name = "kv_delet"', 1)
    )
    setup = write_kv_config(tmp_path)
    setup.config.write_text(setup.config.read_text().replace(str(KV_CONTRACTS), str(contracts)))
    return setup


async def test_a_contract_for_a_tool_the_server_does_not_list_is_refused_at_start_up(
    tmp_path: Path,
) -> None:
    """`kv_delet` (a typo) would leave the real kv_delete running as 'irreversible (no
    contract)': the gateway refuses to start, naming the tool and the close match."""
    from amends.integrations.mcp import Gateway, load_config

    setup = _typo_setup(tmp_path)
    with pytest.raises(ConfigError) as exc:
        async with Gateway(load_config(setup.config)):
            pass
    msg = str(exc.value)
    assert "a contract names tool 'kv_delet', which the server does not list" in msg
    assert "did you mean 'kv_delete'?" in msg
    serve = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "amends.integrations.mcp", "serve", "--config", str(setup.config)],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert serve.returncode != 0
    assert "did you mean 'kv_delete'?" in serve.stderr
    assert "Traceback" not in serve.stderr


async def test_amends_mcp_audit_flags_a_contract_for_an_unlisted_tool(tmp_path: Path) -> None:
    setup = _typo_setup(tmp_path)
    run = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "amends.cli", "mcp", "audit", "--config", str(setup.config)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 1, run.stderr[-2000:]
    assert "(contract error)" in run.stdout
    assert "did you mean 'kv_delete'?" in run.stdout
    assert "the gateway refuses to start" in run.stdout
    as_json = await asyncio.to_thread(
        subprocess.run,
        [
            sys.executable,
            "-m",
            "amends.cli",
            "mcp",
            "audit",
            "--config",
            str(setup.config),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    problems = [r["problem"] for r in json.loads(as_json.stdout) if r.get("problem")]
    assert len(problems) == 1 and "'kv_delet'" in problems[0]
    assert as_json.returncode == 1


async def test_a_small_budget_completes_steps_and_says_how_to_continue_in_mcp(
    kv: KvSetup,
) -> None:
    """Five independent writes, `tool_calls: 3`: one is reverted (its check and its inverse),
    four are over budget with a manual action naming amends_undo's continue; continuing
    reverts them."""
    from mcp import Client

    async with Client(kv.gateway()) as c:
        for i in range(5):
            await c.call_tool("kv_kv_set", {"key": f"k{i}", "value": "v"})
        kv.human_sets("seed", "x")  # an unrelated key: the world has more than the agent wrote
        first = await c.call_tool("amends_undo", {"tool_calls": 3})
        assert kv.world()["kv"].keys() - {"seed"} != set()
        more = await c.call_tool("amends_undo", {"continue": True, "tool_calls": 20})
    report = first.structured_content
    states = sorted(s["state"] for s in report["steps"])
    assert states == ["over_budget"] * 4 + ["reverted"]
    assert report["tool_calls"] == 2
    saga_id = report["saga_id"]
    for action in report["manual_actions"]:
        assert f'amends_undo {{"saga_id": "{saga_id}", "continue": true' in action["what"]
        assert "amends undo" not in action["what"]
    assert sorted(s["state"] for s in more.structured_content["steps"]) == ["reverted"] * 5
    assert kv.world()["kv"] == {"seed": "x"}


async def test_an_in_doubt_step_is_explained_in_mcp_words(kv: KvSetup) -> None:
    """The upstream said 'connection reset while committing' with isError: the step is in
    doubt; the detail says so once, in words for an MCP user (no Python exception names)."""
    from mcp import Client

    async with Client(kv.gateway()) as c:
        r = await c.call_tool("kv_flaky_write", {"key": "k", "value": "v"})
        status = await c.call_tool("amends_status", {})
    said = text_of(r)
    detail = status.structured_content["steps"][0]["error"]
    assert r.meta["amends/step"]["state"] == "in_doubt"
    for text in (said, detail):
        assert "amends.PermanentError" not in text and "UpstreamError" not in text
        assert "connection reset while committing" in text
        assert (text.count("whether it took effect is unknown") + text.count("may have taken")) == 1
    assert "its contract does not read as a refusal, so it may have taken effect" in detail


@pytest.mark.parametrize(
    ("second_file", "shown"),
    [
        ("", "'peek' has no contract"),
        ('[[tool]]\nname = "peek"\nreversibility = "irreversible"\n', "'peek' is 'irreversible'"),
    ],
    ids=["probe-without-contract", "probe-irreversible-in-another-file"],
)
async def test_a_probe_must_be_a_read_only_tool_across_an_upstreams_contract_files(
    tmp_path: Path, second_file: str, shown: str
) -> None:
    """An HTTP file refuses a probe that is not read_only; the gateway checked only that the
    server lists it, so an MCP contract could probe a tool with no contract (irreversible) or
    one another file declares irreversible: a 'probe' that may change the world (rule 4)."""
    from amends.integrations.mcp import Gateway, load_config

    first = tmp_path / "contracts.toml"
    first.write_text(
        KV_CONTRACTS.read_text().replace(
            'probe = "kv_get"\nargs = { key = "{args.key}" }',
            'probe = "peek"\nargs = { key = "{args.key}" }',
            1,
        )
    )
    second = tmp_path / "more.toml"
    second.write_text(second_file or '[[tool]]\nname = "kv_get"\nreversibility = "read_only"\n')
    if not second_file:  # kv_get's contract moves to the second file: it is still known
        first.write_text(
            first.read_text().replace(
                '[[tool]]\nname = "kv_get"\nreversibility = "read_only"\n', ""
            )
        )
    setup = write_kv_config(tmp_path)
    setup.config.write_text(
        setup.config.read_text().replace(
            json.dumps(str(KV_CONTRACTS)), f"{json.dumps(str(first))}, {json.dumps(str(second))}"
        )
    )
    with pytest.raises(ConfigError) as exc:
        async with Gateway(load_config(setup.config)):
            pass
    assert str(exc.value) == (
        "upstream 'kv': the contract of 'kv_set': expect.probe 'peek' must be a read_only tool "
        f"(a probe never changes the world), and {shown}; give it a contract with "
        'reversibility = "read_only"'
    )


async def test_an_undo_after_naming_a_tool_the_server_does_not_list_is_refused(
    tmp_path: Path,
) -> None:
    """``undo_after = ["kv_sett"]`` (a typo) was never checked: the step's inverse silently
    waited for nothing, so the undo order the contract promised was not kept (rule 3)."""
    from amends.integrations.mcp import Gateway, load_config

    contracts = tmp_path / "contracts.toml"
    contracts.write_text(
        KV_CONTRACTS.read_text().replace(
            'name = "charge"\nreversibility = "compensable"\n',
            'name = "charge"\nreversibility = "compensable"\nundo_after = ["kv_sett"]\n',
            1,
        )
    )
    assert 'undo_after = ["kv_sett"]' in contracts.read_text()
    setup = write_kv_config(tmp_path)
    setup.config.write_text(setup.config.read_text().replace(str(KV_CONTRACTS), str(contracts)))
    with pytest.raises(ConfigError) as exc:
        async with Gateway(load_config(setup.config)):
            pass
    assert str(exc.value).startswith(
        "upstream 'kv': the contract of 'charge' uses tool(s) kv_sett that the server does not "
        "list; fix the contract or the upstream (it lists: "
    )
