"""The shipped contracts builtin:memory against the real reference knowledge-graph server
(@modelcontextprotocol/server-memory from npm, installed by scripts/mcp-deps.sh; issue 24 item 8).

Each write takes a list and its inverse maps a list (``{ each = ..., as = ... }``); each test
checks the graph file the server itself wrote, after undo."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, installed, shipped_gateway

pytestmark = pytest.mark.slow

MEMORY_SERVER = (
    ROOT / ".amends-mcp" / "node" / "node_modules" / "@modelcontextprotocol" / "server-memory"
    / "dist" / "index.js"
)  # fmt: skip

ADA = {"name": "Ada", "entityType": "person", "observations": ["mathematician", "wrote notes"]}
BOB = {"name": "Bob", "entityType": "person", "observations": ["engineer"]}
CAROL = {"name": "Carol", "entityType": "person", "observations": ["manager"]}
ADA_KNOWS_BOB = {"from": "Ada", "to": "Bob", "relationType": "knows"}
CAROL_MANAGES_BOB = {"from": "Carol", "to": "Bob", "relationType": "manages"}


@pytest.fixture(scope="module")
def memory_server() -> Path:
    return installed(MEMORY_SERVER, "the memory server")


class Graph:
    """The server's own JSONL file: written here to set the world up, read to check it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, entities: list[dict[str, Any]], relations: list[dict[str, Any]]) -> None:
        lines = [{"type": "entity", **e} for e in entities]
        lines += [{"type": "relation", **r} for r in relations]
        self.path.write_text("\n".join(json.dumps(x) for x in lines))

    def read(self) -> dict[str, list[dict[str, Any]]]:
        graph: dict[str, list[dict[str, Any]]] = {"entities": [], "relations": []}
        for line in self.path.read_text().splitlines():
            item = json.loads(line)
            kind = item.pop("type")
            graph["entities" if kind == "entity" else "relations"].append(item)
        return graph


def memory_gateway(tmp_path: Path, server: Path) -> tuple[Any, Graph]:
    graph = Graph(tmp_path / "memory.jsonl")
    env = {"MEMORY_FILE_PATH": str(graph.path)}
    return shipped_gateway(tmp_path, "mem", "memory", ["node", str(server)], env), graph


async def _calls(c: Any, calls: list[tuple[str, dict[str, Any]]]) -> None:
    for tool, args in calls:
        r = await c.call_tool(tool, args)
        assert not r.is_error, (tool, r.content)


async def test_creates_and_additions_are_taken_back_exactly_what_they_added(
    tmp_path: Path, memory_server: Path
) -> None:
    """create_entities, create_relations and add_observations skip what already exists; undo
    deletes only what each call added (the inverse maps the call's answer, a list), and the graph
    is as it was."""
    from mcp import Client

    params, graph = memory_gateway(tmp_path, memory_server)
    graph.write([ADA], [])
    before = graph.read()
    async with Client(params) as c:
        await _calls(
            c,
            [
                ("mem_create_entities", {"entities": [ADA, BOB]}),  # Ada exists: skipped
                ("mem_create_relations", {"relations": [ADA_KNOWS_BOB]}),
                (
                    "mem_add_observations",
                    {
                        "observations": [
                            {"entityName": "Ada", "contents": ["mathematician", "poet"]}
                        ]
                    },
                ),
            ],
        )
        assert graph.read()["entities"][0]["observations"] == [
            "mathematician",
            "wrote notes",
            "poet",
        ]
        undo = await c.call_tool("amends_undo", {})
    report = undo.structured_content
    assert [(s["tool"], s["state"]) for s in report["steps"]] == [
        ("mem.create_entities", "reverted"),
        ("mem.create_relations", "reverted"),
        ("mem.add_observations", "reverted"),
    ]
    assert report["status"] == "fully_reversed", report
    assert graph.read() == before  # Ada and her 'mathematician' kept: they were there before


async def test_deletes_are_taken_back_from_what_was_read_before(
    tmp_path: Path, memory_server: Path
) -> None:
    """delete_observations, delete_relations and delete_entities are taken back from captures:
    the deleted observations, relation and entity come back, and nothing that was never there
    ('x') is created. Observations come back at the end of their list: residue says so."""
    from mcp import Client

    params, graph = memory_gateway(tmp_path, memory_server)
    graph.write([ADA, BOB, CAROL], [ADA_KNOWS_BOB])
    async with Client(params) as c:
        await _calls(
            c,
            [
                (
                    "mem_delete_observations",
                    {"deletions": [{"entityName": "Ada", "observations": ["mathematician", "x"]}]},
                ),
                ("mem_delete_relations", {"relations": [ADA_KNOWS_BOB]}),
                ("mem_delete_entities", {"entityNames": ["Carol"]}),
            ],
        )
        assert [e["name"] for e in graph.read()["entities"]] == ["Ada", "Bob"]
        assert graph.read()["relations"] == []
        undo = await c.call_tool("amends_undo", {})
    report = undo.structured_content
    assert [(s["tool"], s["state"]) for s in report["steps"]] == [
        ("mem.delete_observations", "compensated"),
        ("mem.delete_relations", "reverted"),
        ("mem.delete_entities", "compensated"),
    ]
    after = graph.read()
    ada = {**ADA, "observations": ["wrote notes", "mathematician"]}  # 'x' was never there
    assert after == {"entities": [ada, BOB, CAROL], "relations": [ADA_KNOWS_BOB]}
    assert [r["what"] for r in report["residue"]] == [
        'observations deleted from [{"entityName": "Ada", "observations": ["mathematician", '
        '"x"]}] were added back at the end of each entity\'s list, not in their old place',
    ]


async def test_an_entity_deleted_with_its_relations_comes_back_and_the_relations_are_residue(
    tmp_path: Path, memory_server: Path
) -> None:
    """The server deletes an entity's relations with it; undo creates the entity again (one
    inverse call) and says, with their content, which relations it did not create: compensated,
    never reverted."""
    from mcp import Client

    params, graph = memory_gateway(tmp_path, memory_server)
    graph.write([BOB, CAROL], [CAROL_MANAGES_BOB])
    async with Client(params) as c:
        await _calls(c, [("mem_delete_entities", {"entityNames": ["Carol"]})])
        undo = await c.call_tool("amends_undo", {})
    report = undo.structured_content
    assert [(s["tool"], s["state"]) for s in report["steps"]] == [
        ("mem.delete_entities", "compensated")
    ]
    assert graph.read() == {"entities": [BOB, CAROL], "relations": []}
    assert [r["what"] for r in report["residue"]] == [
        "the relations of the deleted entities were deleted with them and undo does not create "
        'them again: [{"from": "Carol", "relationType": "manages", "to": "Bob"}]'
    ]
    assert report["status"] == "partially_reversed"


def _person_adds(entity: str, text: str) -> Any:
    def change(graph: Graph) -> None:
        now = graph.read()
        for e in now["entities"]:
            if e["name"] == entity:
                e["observations"].append(text)
        graph.write(now["entities"], now["relations"])

    return change


def _person_recreates_carol(graph: Graph) -> None:
    now = graph.read()
    graph.write([*now["entities"], {**CAROL, "observations": ["re-hired"]}], now["relations"])


@pytest.mark.parametrize(
    ("call", "person"),
    [
        (("mem_create_entities", {"entities": [BOB]}), _person_adds("Bob", "by a person")),
        (
            ("mem_add_observations", {"observations": [{"entityName": "Ada", "contents": ["x"]}]}),
            _person_adds("Ada", "by a person"),
        ),
        (("mem_delete_entities", {"entityNames": ["Carol"]}), _person_recreates_carol),
        (
            (
                "mem_delete_observations",
                {"deletions": [{"entityName": "Ada", "observations": ["wrote notes"]}]},
            ),
            _person_adds("Ada", "by a person"),
        ),
        (
            ("mem_delete_relations", {"relations": [CAROL_MANAGES_BOB]}),
            lambda g: g.write(g.read()["entities"], [ADA_KNOWS_BOB]),
        ),
    ],
    ids=[
        "create_entities", "add_observations", "delete_entities", "delete_observations",
        "delete_relations",
    ],
)  # fmt: skip
async def test_what_a_person_changed_since_is_drifted_and_kept(
    tmp_path: Path, memory_server: Path, call: tuple[str, dict[str, Any]], person: Any
) -> None:
    """rule 4 by re-reading the graph: after each write a person changes what it touched (adds
    to an entity, creates a deleted name again, relates entities); undo leaves it standing,
    drifted, and the graph is exactly as the person left it."""
    from mcp import Client

    params, graph = memory_gateway(tmp_path, memory_server)
    graph.write(
        [ADA, BOB, CAROL] if call[0] != "mem_create_entities" else [ADA], [CAROL_MANAGES_BOB]
    )
    async with Client(params) as c:
        await _calls(c, [call])
        person(graph)  # through the server's own file, as another client of the graph would
        by_person = graph.read()
        undo = await c.call_tool("amends_undo", {})
    (step,) = undo.structured_content["steps"]
    assert (step["tool"], step["state"]) == (call[0].replace("mem_", "mem."), "drifted")
    assert step["detail"].startswith("someone changed it since the agent acted: expected ")
    assert graph.read() == by_person


async def test_observations_on_a_missing_entity_are_refused_and_nothing_is_written(
    tmp_path: Path, memory_server: Path
) -> None:
    """The server's "Entity with name ... not found" is a refusal (rule 9): the step failed, the
    graph is untouched, nothing to undo."""
    from mcp import Client

    params, graph = memory_gateway(tmp_path, memory_server)
    graph.write([ADA], [])
    before = graph.read()
    async with Client(params) as c:
        r = await c.call_tool(
            "mem_add_observations", {"observations": [{"entityName": "Nobody", "contents": ["x"]}]}
        )
    assert r.is_error and r.meta["amends/step"]["state"] == "failed"
    assert "Entity with name Nobody not found" in r.content[0].text
    assert graph.read() == before


def test_the_list_example_of_the_docs_is_the_shipped_contract() -> None:
    """docs/toml-catalog.md shows add_observations' inverse as a fragment: it is the one shipped
    (and run above), not a copy that could drift from it."""
    docs = (ROOT / "docs" / "toml-catalog.md").read_text()
    shipped = ROOT / "src" / "amends" / "integrations" / "mcp" / "contracts" / "memory.toml"
    fragment = docs.split("memory.toml -->\n```toml\n", 1)[1].split("```", 1)[0]
    assert fragment.strip().splitlines()[1:] == [
        line for line in fragment.strip().splitlines()[1:] if line in shipped.read_text()
    ]
