"""The one template engine, over the whole input space (Hypothesis): an argument fills exactly
one URL path segment whatever its text, so no client normalisation can move the request
elsewhere (issue 21 item 10); a redacted secret never survives in any encoding a vendor echoes it
(issue 21 item 9); a default fills exactly the missing or null values (issue 24 item 11)."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote, quote_plus, unquote

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from amends import ConfigError
from amends.contract_file.templates import Redactor, SegmentError, UrlTemplate, check, fill

URL = UrlTemplate.parse("https://vendor.test/api/records/{args.id}/view?f={args.f}", {}, "t")


@given(value=st.text(max_size=20), query=st.text(max_size=10))
def test_an_argument_fills_exactly_one_path_segment_or_is_refused(value: str, query: str) -> None:
    try:
        url = URL.fill({"id": value, "f": query}, "t")
    except SegmentError:
        assert value in ("", ".", "..")
        return
    assert value not in ("", ".", "..")
    sent = httpx.URL(url)  # what the HTTP client puts on the wire, normalisation included
    segments = sent.raw_path.split(b"?")[0].split(b"/")
    assert segments[:3] == [b"", b"api", b"records"] and segments[4:] == [b"view"]
    assert unquote(segments[3].decode()) == value
    assert sent.host == "vendor.test"
    assert sent.params["f"] == query


@pytest.mark.parametrize(
    ("value", "sent"),
    [("%2e%2e", "%252e%252e"), ("a/b", "a%2Fb"), ("?", "%3F"), ("#", "%23"), ("\\", "%5C")],
)
def test_look_alikes_are_encoded_into_the_segment(value: str, sent: str) -> None:
    assert URL.fill({"id": value, "f": ""}, "t").split("/")[5] == sent


_secret = st.text(
    alphabet=st.characters(min_codepoint=33, max_codepoint=0x2FF, exclude_characters="\\"),
    min_size=4,
    max_size=16,
)


@given(secret=_secret, before=st.text(max_size=10), after=st.text(max_size=10))
def test_a_secret_never_survives_redaction_in_any_echoed_encoding(
    secret: str, before: str, after: str
) -> None:
    redact = Redactor.of_env({"VENDOR_KEY": secret})
    for form in (secret, quote(secret, safe=""), quote(secret), quote_plus(secret)):
        text = before + form + after
        assert form not in redact.text(text) or form in before + after
    echoed = json.dumps({"url": f"https://x/?k={secret}"})
    assert secret not in json.dumps(redact.data(json.loads(echoed)))
    assert "${env:VENDOR_KEY}" in redact.text(f"key={secret}")


@given(value=st.none() | st.integers() | st.text(max_size=8) | st.lists(st.integers(), max_size=3))
def test_a_default_fills_only_what_is_missing_or_null(value: Any) -> None:
    filled = fill("{args.folder|default:inbox}", {"args": {"folder": value}}, "t")
    assert filled == ("inbox" if value is None else value)
    assert fill("{args.folder|default:inbox}", {"args": {}}, "t") == "inbox"
    assert fill("in {args.folder|default:}", {"args": {}}, "t") == "in "


def test_filters_chain_after_a_default() -> None:
    assert fill("{args.cents|default:0|money}", {"args": {}}, "t") == "0.00 USD"
    assert fill("{args.cents|default:0|money}", {"args": {"cents": 150}}, "t") == "1.50 USD"


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("{args.x|default}", "default needs its value after a colon"),
        ("{args.x|json:1}", "filter 'json' takes no ':' argument"),
        ("{args.x|shout}", "unknown filter 'shout'"),
        ("{nope.x}", "uses 'nope'; use one of args, result"),
        ("${env:HOME}", "reads the environment"),
    ],
)
def test_template_mistakes_are_refused_when_the_file_loads(template: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        check(template, {"args", "result"}, "t")


def test_a_missing_argument_is_named_in_the_contracts_words() -> None:
    with pytest.raises(ConfigError) as exc:
        fill("mail:{args.folder}", {"args": {"id": 1}}, "contract of 'mail_move' resources")
    assert str(exc.value) == (
        "contract of 'mail_move' resources: template '{args.folder}' needs the argument "
        "'folder', which this call did not pass; pass it, or give the template a default, "
        "e.g. '{args.folder|default:...}'"
    )


def test_each_maps_a_list_to_a_list_with_the_element_as_item() -> None:
    """Issue 24 item 8: an inverse that takes back a list names each element (plucked or
    rebuilt as a table), nested maps see their own element, and types are kept."""
    scope = {
        "result": {
            "results": [
                {"entityName": "Ada", "addedObservations": ["poet"]},
                {"entityName": "Bob", "addedObservations": []},
            ]
        }
    }
    names = fill({"each": "{result.results}", "as": "{item.entityName}"}, scope, "t")
    assert names == ["Ada", "Bob"]
    deletions = fill(
        {
            "deletions": {
                "each": "{result.results}",
                "as": {
                    "entityName": "{item.entityName}",
                    "observations": "{item.addedObservations}",
                },
            }
        },
        scope,
        "t",
    )
    assert deletions == {
        "deletions": [
            {"entityName": "Ada", "observations": ["poet"]},
            {"entityName": "Bob", "observations": []},
        ]
    }
    nested = {
        "each": "{result.results}",
        "as": {"each": "{item.addedObservations}", "as": "{item}!"},
    }
    assert fill(nested, scope, "t") == [["poet!"], []]
    assert fill({"each": "{args.none}", "as": "{item}"}, {"args": {"none": None}}, "t") == []
    check({"each": "{result.results}", "as": {"n": "{item.entityName}"}}, {"result"}, "t")


def test_each_mistakes_are_refused_in_the_contracts_words() -> None:
    with pytest.raises(ConfigError, match=r"uses 'item'; use one of args \('item' is the element"):
        check({"names": "{item.name}"}, {"args"}, "t")
    with pytest.raises(ConfigError) as exc:
        fill({"each": "{args.name}", "as": "{item}"}, {"args": {"name": "Ada"}}, "contract of 'x'")
    assert str(exc.value) == (
        "contract of 'x': each = '{args.name}' must give a list to map, but gave 'Ada'; point "
        "it at a list, e.g. each = '{result.entities}'"
    )
