"""``amends.run`` outside a running loop starts one after the "no running event loop" check,
not inside its ``except`` block: an error of the coroutine is raised as it was, without that
``RuntimeError`` as its context (lane mypyc: the compiled build re-raised it instead)."""

from __future__ import annotations

import pytest

import amends


async def _fails() -> None:
    raise ValueError("the tool said no")


def test_an_error_of_the_coroutine_has_no_running_loop_error_as_its_context() -> None:
    with pytest.raises(ValueError, match="the tool said no") as caught:
        amends.run(_fails())
    assert caught.value.__context__ is None


def test_a_value_comes_back_from_a_coroutine_function_too() -> None:
    async def answer() -> int:
        return 42

    assert amends.run(answer) == 42
