"""Every command of docs/recipes.md runs as written, in order, in one fresh folder, and prints exactly the output the
page shows (as the README's commands do, :mod:`tests.test_readme`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_readme import run_step, steps

RECIPES = Path(__file__).resolve().parents[1] / "docs" / "recipes.md"
STEPS = steps(RECIPES)


def test_five_questions_each_a_command_with_its_output():
    assert len(STEPS) == 5 and all(kind == "command" and shown for kind, _, shown in STEPS)
    for _, command, shown in STEPS:
        assert "--example" not in command and ".toml" not in command  # nothing borrowed: every key stated
        assert "stale" in shown and "fresh" in shown  # the legend says what the columns mean


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("recipes")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("step", STEPS, ids=[" ".join(s[1].split())[:60] for s in STEPS])
def test_each_recipe_runs_as_written(folder, step):
    run_step(folder, step)
