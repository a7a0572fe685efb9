"""``docs/papers.md``, the papers' headline ratios: the two commands it shows print exactly what it shows, and every
number its results state (the ratios, their sensitivity, why they miss) is one that ``notebooks/papers.ipynb``
printed (which ``test_notebooks`` executes again), one the commands printed, or one of the page's own inputs."""

from __future__ import annotations

import re
import shlex

import pytest

from stragglerlab.cli import main
from tests.notebooks.test_notebooks import DOCS, NOTEBOOKS, execute

PAGE = DOCS / "papers.md"
#: the sections that state results; the others give the inputs and their sources
RESULTS = ("## The computed ratios", "## How each assumed input moves the ratios", "## Why the ratios miss")


def sections() -> dict[str, str]:
    """The page's level-2 sections by heading (a section includes its level-3 subsections)."""
    parts = re.split(r"^(?=## )", PAGE.read_text(), flags=re.M)
    return {part.splitlines()[0]: part for part in parts if part.startswith("## ")}


def shown_commands() -> dict[str, list[str]]:
    """Each command the page's console block shows (``$ ...``) -> the lines it shows printed."""
    block = re.search(r"^```\n(\$ .*?)^```$", sections()["## The computed ratios"], flags=re.M | re.S).group(1)
    shown: dict[str, list[str]] = {}
    for chunk in block.strip().split("\n\n"):
        command, *lines = chunk.splitlines()
        shown[command.removeprefix("$ ")] = lines
    return shown


def test_the_page_shows_both_commands():
    assert sorted(shown_commands()) == [
        "stragglerlab simulate --example paper-eager --compare sync,async-ps",
        "stragglerlab simulate --example paper-wagma --set algorithm.name=wagma --compare d-psgd,ad-psgd,sgp",
    ]


@pytest.mark.parametrize("command", sorted(shown_commands()))
@pytest.mark.timeout(300)
def test_each_command_prints_what_the_page_shows(command, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(shlex.split(command)[1:]) == 0
    printed = [line for line in capsys.readouterr().out.splitlines() if not line.startswith("run folders:")]
    assert printed == shown_commands()[command]


def test_the_ratio_table_is_the_commands_samples_per_second():
    rates = {}
    for lines in shown_commands().values():
        rows = [line.split() for line in lines[2:] if ": " not in line]  # the table, not its legend lines
        rates |= {row[0]: float(row[1].replace(",", "")) for row in rows}
    rows = re.findall(
        r"^\| (\S+) / (\S+) \| ([\d.]+) \| \*\*([\d.]+)\*\* \| ([+−-][\d.]+) % \|", PAGE.read_text(), re.M
    )
    assert len(rows) == 5
    for algorithm, baseline, paper, computed, off in rows:
        ratio = rates[algorithm] / rates[baseline]
        assert float(computed) == round(ratio, 3)
        assert float(off.replace("−", "-")) == round((ratio / float(paper) - 1) * 100, 1)


def test_every_result_the_page_states_was_printed():
    page = sections()
    sourced = execute.printed(NOTEBOOKS / "papers.ipynb")
    for heading, text in page.items():
        if not heading.startswith(RESULTS):
            sourced |= execute.numbers(text)  # the inputs and the sources: the results may restate them
    sourced |= execute.numbers("\n".join(line for lines in shown_commands().values() for line in lines))
    results = "\n".join(text for heading, text in page.items() if heading.startswith(RESULTS))
    assert execute.unstated(results, sourced) == []


def test_the_check_finds_a_result_nothing_printed():
    sourced = execute.printed(NOTEBOOKS / "papers.ipynb")
    assert [n.split(" ")[0] for n in execute.unstated("eager-solo over sync is 1.377x here", sourced)] == ["1.377"]
