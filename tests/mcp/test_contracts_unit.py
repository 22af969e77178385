"""Contract and config files: templates, filters, and a clear error for each mistake."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from amends import ConfigError
from amends.integrations.mcp import load_config, load_contracts
from amends.integrations.mcp.contracts import BUILTIN_CONTRACTS, render


def write(tmp_path: Path, text: str, name: str = "c.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_builtin_contract_files_load_and_name_every_inverse_and_probe() -> None:
    """Every shipped file parses; every reversible/compensable tool has an inverse and an
    expectation or a reason (rule 4)."""
    for name in BUILTIN_CONTRACTS:
        cf = load_contracts(f"builtin:{name}")
        assert cf.tools
        for c in cf.tools.values():
            if c.reversibility in ("reversible", "compensable"):
                assert c.effects.inverse is not None
                assert c.effects.expect is not None or c.effects.no_drift_check is not None
    fs = load_contracts("builtin:filesystem").tools
    assert {"write_file", "edit_file", "move_file", "create_directory"} <= set(fs)
    assert fs["write_file"].captures[0].name == "old"


def test_render_keeps_types_for_whole_fields_and_formats_filters() -> None:
    scope = {"args": {"cents": 1_200_000, "who": ["a@x", "b@x"]}, "result": {"id": "ch_1"}}
    assert render("{args.cents}", scope, "t") == 1_200_000
    assert render("{args.cents|money}", scope, "t") == "12,000.00 USD"
    assert render("to {args.who|join} for {result.id}", scope, "t") == "to a@x, b@x for ch_1"
    assert render(["{args.who}"], scope, "t") == [["a@x", "b@x"]]
    assert render("{args.who|json}", scope, "t") == '["a@x", "b@x"]'


def test_render_names_a_missing_value() -> None:
    with pytest.raises(ConfigError, match=r"'nope'"):
        render("{result.nope}", {"result": {"id": 1}}, "where")


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        (
            '[[tool]]\nname = "w"\nreversibility = "maybe"\n',
            "has reversibility 'maybe'; use one of",
        ),
        ('[[tool]]\nname = "w"\nreversibility = "reversible"\n', "declares no \\[tool.inverse\\]"),
        (
            '[[tool]]\nname = "w"\nreversibility = "reversible"\ninverse = { tool = "w" }\n',
            "neither \\[tool.expect\\] nor no_drift_check",
        ),
        ('[[tool]]\nname = "w"\nreversibility = "irreversible"\ncolour = 1\n', "unknown key"),
        (
            '[[tool]]\nname = "w"\nreversibility = "reversible"\nno_drift_check = "x"\n'
            'inverse = { tool = "w", args = { a = "{capture.old}" } }\n',
            "uses 'capture'",
        ),
        (
            '[[tool]]\nname = "w"\nreversibility = "irreversible"\n'
            'acknowledge = { who = "{args.x|shout}" }\n',
            "unknown filter 'shout'",
        ),
        ('[errors]\nrefused = "("\n', "not a valid regular expression"),
        (
            '[[tool]]\nname = "w"\nreversibility = "reversible"\nno_drift_check = "x"\n'
            'inverse = { tool = "w" }\nif_absent = { capture = "old" }\n',
            "capture 'old' is not declared",
        ),
        ("tool = [", "is not valid TOML"),
        (
            '[[tool]]\nname = "w"\nreversibility = "irreversible"\nsensitive = "api_key"\n',
            "sensitive must be a list of argument names",
        ),
        (
            '[[tool]]\nname = "w"\nreversibility = "irreversible"\nsensitive = ["api_key"]\n'
            'secret_env = { token = "TOKEN" }\n',
            "secret_env names token, which sensitive does not list",
        ),
        (
            '[[tool]]\nname = "w"\nreversibility = "irreversible"\nsensitive = ["api_key"]\n'
            'secret_env = { api_key = "not a variable" }\n',
            "secret_env must map argument names to variable names",
        ),
    ],
)
def test_contract_mistakes_are_clear_errors(tmp_path: Path, toml: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_contracts(write(tmp_path, toml))


def test_missing_contract_file_and_unknown_builtin() -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_contracts("/nonexistent/contracts.toml")
    with pytest.raises(ConfigError, match="builtin:filesystem"):
        load_contracts("builtin:nope")


def test_config_resolves_paths_next_to_the_file(tmp_path: Path) -> None:
    cfg = load_config(
        write(
            tmp_path,
            '[gateway]\nlog = "x.db"\napproval = "residue"\n'
            '[[upstream]]\nname = "fs"\ncommand = "node"\ncontracts = ["mine.toml", '
            '"builtin:filesystem"]\n',
            "g.toml",
        )
    )
    assert cfg.log == str(tmp_path / "x.db")
    assert cfg.approval == "residue"
    assert cfg.upstreams[0].contracts == (str(tmp_path / "mine.toml"), "builtin:filesystem")
    assert cfg.upstreams[0].prefix is True


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("", "declares no upstream servers"),
        ('[[upstream]]\nname = "a"\n', "exactly one of command"),
        ('[[upstream]]\nname = "a"\ncommand = "x"\nurl = "http://h"\n', "exactly one of"),
        ('[[upstream]]\nname = "a b"\ncommand = "x"\n', "needs a name of letters"),
        (
            '[[upstream]]\nname = "a"\ncommand = "x"\n[[upstream]]\nname = "a"\ncommand = "y"\n',
            "used twice",
        ),
        ('[gateway]\napproval = "always"\n[[upstream]]\nname = "a"\ncommand = "x"\n', "approval"),
        ('[gateway]\nlease_seconds = 0\n[[upstream]]\nname = "a"\ncommand = "x"\n', "positive"),
        ('[gateways]\n[[upstream]]\nname = "a"\ncommand = "x"\n', "unknown top-level"),
    ],
)
def test_config_mistakes_are_clear_errors(tmp_path: Path, toml: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, toml, "g.toml"))


def test_missing_config_names_the_fix() -> None:
    with pytest.raises(ConfigError, match="--config"):
        load_config("/nonexistent/gateway.toml")


def test_builtin_sandbox_contracts_agree_with_the_python_sandbox_catalog() -> None:
    """Same tools, classes and idempotency as amends.sandbox.sandbox_catalog, so a change to
    one without the other is caught here (the demo through MCP must equal in-process)."""
    from amends.sandbox import World, sandbox_catalog

    world = World()
    try:
        python = {s.name: s for s in sandbox_catalog(world)}
    finally:
        world.close()
    toml = load_contracts("builtin:sandbox").tools
    assert set(toml) == set(python)
    for name, spec in python.items():
        assert toml[name].reversibility == spec.reversibility.value, name
        assert toml[name].idempotent == spec.idempotent, name


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=10,
)


@given(value=_json, word=st.text(alphabet="abcdefghij -", min_size=1, max_size=10))
def test_a_whole_field_keeps_any_json_value_and_text_fields_embed_it(value: Any, word: str) -> None:
    """'{args.v}' alone is the value itself (type kept); inside text it is formatted as str,
    and a null reads '(empty)': words for people never print Python's 'None' (lane words
    item 3; a call's arguments refuse it instead)."""
    scope = {"args": {"v": value}}
    assert render("{args.v}", scope, "t") == value
    assert render([{"k": "{args.v}"}], scope, "t") == [{"k": value}]
    assert render(word + "{args.v}", scope, "t") == word + (
        "(empty)" if value is None else str(value)
    )


def test_builtin_sandbox_sentences_agree_with_the_python_sandbox_catalog() -> None:
    """Each step reads the same sentence through the gateway as in-process (issue 17)."""
    from amends.sandbox import World, sandbox_catalog

    world = World()
    try:
        python = {s.name: getattr(s, "describe", None) for s in sandbox_catalog(world)}
    finally:
        world.close()
    toml = load_contracts("builtin:sandbox").tools
    assert all(isinstance(toml[n].describe, str) for n in python)
    if any(v is not None for v in python.values()):  # this amends renders sentences
        assert {n: toml[n].describe for n in python} == python


def test_secret_env_gives_the_contract_a_resolver_reading_that_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rule 11: secret_env names the variable an inverse's sensitive argument is read from at
    undo time; without it the default is $API_KEY; with no sensitive argument, no resolver."""
    from amends._secrets import SecretRequest

    path = write(
        tmp_path,
        '[[tool]]\nname = "a"\nreversibility = "irreversible"\nsensitive = ["api_key"]\n'
        'secret_env = { api_key = "KV_TEST_KEY" }\n'
        '[[tool]]\nname = "b"\nreversibility = "irreversible"\nsensitive = ["api_key"]\n'
        '[[tool]]\nname = "c"\nreversibility = "irreversible"\n',
    )
    tools = load_contracts(path).tools
    monkeypatch.setenv("KV_TEST_KEY", "from-kv")
    monkeypatch.setenv("API_KEY", "from-default")
    req = SecretRequest("api_key", "a", "a", "s1", "st1", None, {})
    req_b = SecretRequest("api_key", "b", "b", "s1", "st1", None, {})
    resolve_a, resolve_b = tools["a"].resolve_secret, tools["b"].resolve_secret
    assert resolve_a is not None and resolve_b is not None
    assert (resolve_a(req), resolve_b(req_b)) == ("from-kv", "from-default")
    assert tools["a"].sensitive == ("api_key",) and tools["c"].resolve_secret is None
    monkeypatch.delenv("KV_TEST_KEY")
    with pytest.raises(ConfigError, match=r"\$KV_TEST_KEY, which is not set"):
        resolve_a(req)


@pytest.mark.parametrize(
    ("text", "rejected"),
    [
        ("Unknown tool: kv_set", True),  # the Python SDK, 1.x and 2.x
        (
            "Error executing tool kv_set: 1 validation error for kv_setArguments\nvalue\n"
            "  Input should be a valid string",
            True,
        ),
        ("Error executing tool kv_set: 2 validation errors for setArguments\nkey\n", True),
        ("MCP error -32602: Tool kv_set not found", True),  # the TypeScript SDK
        ("Tool kv_set disabled", True),
        (
            "MCP error -32602: Input validation error: Invalid arguments for tool kv_set: "
            '[{"code": "invalid_type", "path": ["value"]}]',
            True,
        ),
        ("Invalid arguments for tool kv_set: value: Required", True),
        # another tool's name, a tool's own words, or the shapes inside other text: in doubt
        ("Unknown tool: kv_get", False),
        ("MCP error -32602: Tool kv_setter not found", False),
        ("Unknown tool: kv_set (after writing the row)", False),
        ("Error executing tool kv_set: connection reset while committing", False),
        ("Error executing tool kv_set", False),
        ("wrote the row; then: Unknown tool: kv_set", False),
        ("Error executing tool kv_set: 1 validation error for Order", False),
    ],
)
def test_only_an_sdks_rejection_of_the_called_tool_before_it_ran_is_a_refusal(
    text: str, rejected: bool
) -> None:
    """The MCP gateway reads an upstream's ``isError`` result as "nothing ran" (failed) only in
    the shapes the official SDKs give a call they rejected before the tool ran, naming the
    tool called; every other error result stays an unknown outcome (rule 9)."""
    from amends.integrations.mcp.upstream import rejected_before_running

    assert rejected_before_running("kv_set", text) is rejected
