"""``docs/papers.md``, the papers' headline ratios: the two commands it shows print exactly what it shows, every number
its results state (the ratios, their sensitivity, why they miss) is one that ``notebooks/papers.ipynb`` printed (which
``test_notebooks`` executes again), one the commands printed, or one of the page's own inputs; its ratio table has a
row for every baseline of the released codes the toolkit has; and what it says of the abstracts is what each version
of them says."""

from __future__ import annotations

import json
import re
import shlex

import pytest

from stragglerlab.cli import main
from stragglerlab.simulator.algorithms import names
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


#: the baselines each paper's released repository ships, by the toolkit's names (eager-SGD's: Horovod's and Deep500's
#: synchronous SGD; WAGMA-SGD's: Allreduce-SGD, local SGD, D-PSGD, AD-PSGD, SGP and SwarmSGD)
RELEASED = {
    "paper-eager": ("eager-solo", ["sync"]),
    "paper-wagma": ("wagma", ["d-psgd", "ad-psgd", "sgp", "local-sgd", "sync", "swarm-sgd"]),
}


def test_the_page_shows_both_commands():
    assert sorted(shown_commands()) == [
        "stragglerlab simulate --example paper-eager --compare sync,async-ps",
        "stragglerlab simulate --example paper-wagma --compare d-psgd,ad-psgd,sgp,local-sgd,sync,swarm-sgd",
    ]


def ratio_rows() -> list[tuple[str, str, str, str, str]]:
    """The rows of the page's ratio table: (algorithm, baseline, paper, computed, off); paper "not stated" and off ""
    where the paper gives no figure."""
    row = r"^\| (\S+) / (\S+) \| ([\d.]+|not stated) \| \*\*([\d.]+)\*\* \| ?((?:[+−-][\d.]+ %)?) ?\|"
    return re.findall(row, PAGE.read_text(), re.M)


@pytest.mark.parametrize("example", sorted(RELEASED))
def test_every_released_baseline_the_toolkit_has_is_run_and_has_a_row(example):
    algorithm, released = RELEASED[example]
    have = [name for name in released if name in names()]
    command = next(c for c in shown_commands() if f"--example {example} " in c)
    assert set(have) <= set(command.split("--compare ")[1].split(","))
    assert set(have) <= {baseline for a, baseline, *_ in ratio_rows() if a == algorithm}


@pytest.mark.parametrize("command", sorted(shown_commands()))
@pytest.mark.timeout(300)
def test_each_command_prints_what_the_page_shows(command, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(shlex.split(command)[1:]) == 0
    printed = [line for line in capsys.readouterr().out.splitlines() if not line.startswith("run folders:")]
    assert printed == shown_commands()[command]


def test_the_ratio_table_is_the_commands_samples_per_second():
    rates = {}  # each command's rates, by the algorithm it runs first (its paper's): the examples share baselines
    for lines in shown_commands().values():
        table = [line.split() for line in lines[2:] if ": " not in line]  # the table, not its legend lines
        run = {row[0]: float(row[1].replace(",", "")) for row in table}
        rates[next(iter(run))] = run
    rows = ratio_rows()
    assert len([row for row in rows if row[2] != "not stated"]) == 5  # the papers' three figures, over five baselines
    for algorithm, baseline, paper, computed, off in rows:
        ratio = rates[algorithm][algorithm] / rates[algorithm][baseline]
        assert float(computed) == round(ratio, 3)
        if paper != "not stated":
            assert float(off.removesuffix(" %").replace("−", "-")) == round((ratio / float(paper) - 1) * 100, 1)


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


#: what each version of the abstracts says: eager-SGD's arXiv 1908.04207 v2 gives 1.27x over synchronous SGD;
#: 1.29x and 2.64x appear in the PPoPP'20 version and in an arXiv version after v2. WAGMA-SGD's (every version) states
#: its 2.1x as training throughput.
LATER_FIGURES = re.compile(r"\b(1\.29|2\.64) ?(x|×)")
EARLY_VERSIONS = re.compile(r"(?<!after )(?<!than )\bv[12]\b|1908\.04207v[12]")
LATER_VERSIONS = re.compile(r"\bv[345]\b|after v2|PPoPP")
VERSIONED = re.compile(r"1908\.04207 ?v[1-5]|\bv[1-5]\b")
DOUBT = re.compile(r"\b(not|neither|nor|whether|may)\b", re.I)
BOTH = re.compile(r"\b(neither|either|both) abstracts?\b|\babstracts\b", re.I)
EXAMPLES = [PAGE.parent.parent / "simulator" / "examples" / f"paper-{name}.toml" for name in ("eager", "wagma")]


def statements(lines: list[str]) -> list[str]:
    """The statements of prose lines: a paragraph's lines joined (a table row is one paragraph), split at sentence
    and clause ends."""
    paragraphs, current = [], []
    for line in [*lines, ""]:
        line = line.strip()
        if line and not line.startswith(("|", "```")):
            current.append(line)
            continue
        if current:
            paragraphs.append(" ".join(current))
            current = []
        if line.startswith("|"):
            paragraphs.append(line)
    return [c.strip() for p in paragraphs for c in re.split(r"(?<=[.;])\s+(?=[A-Z(*\[])|;\s", p) if c.strip()]


def comments(toml: str) -> list[str]:
    """A TOML file's comments, a line each (an empty line where a line has none, which ends a paragraph)."""
    return [line.partition("#")[2] for line in toml.splitlines()]


def misattributions(clauses: list[str]) -> list[str]:
    """Statements that give 1.29x or 2.64x to an abstract without naming a version that has them, or to v1 or v2,
    cite eager-SGD's arXiv paper without its version, or doubt that WAGMA's abstract states throughput."""
    found = []
    for clause in clauses:
        unversioned = "1908.04207" in clause and not VERSIONED.search(clause)
        if "abstract" not in clause.lower() and not unversioned:
            continue
        later = LATER_FIGURES.search(clause) and (
            not LATER_VERSIONS.search(clause) or (EARLY_VERSIONS.search(clause) and "1.27" not in clause)
        )
        # doubt of "throughput" may concern eager-SGD's abstract only, named as such
        doubt = "throughput" in clause and DOUBT.search(clause)
        wagma = doubt and (
            re.search(r"WAGMA|2\.1 ?x", clause) or BOTH.search(clause) or not re.search(r"eager|1\.2[79]|2\.64", clause)
        )
        if later or wagma or unversioned:
            found.append(clause)
    return found


def notebook_prose() -> list[str]:
    cells = json.loads((NOTEBOOKS / "papers.ipynb").read_text())["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]


def test_the_page_examples_and_notebook_give_each_figure_to_the_abstract_that_has_it():
    text = PAGE.read_text()
    assert misattributions(statements(text.splitlines())) == []
    for example in EXAMPLES:
        assert misattributions(statements(comments(example.read_text()))) == [], example.name
    assert misattributions([c for cell in notebook_prose() for c in statements(cell.splitlines())]) == []
    assert "significantly improves training throughput (e.g., 2.1x on 1,024 GPUs for reinforcement learning)" in text
    assert re.search(r"abstract of v2[^|]*\*\*1\.27x\*\*", text)


@pytest.mark.parametrize(
    "wrong",
    [
        "The abstract reports 1.29x over synchronous SGD.",
        "eager-SGD's abstract (arXiv 1908.04207v2) gives 2.64x over asynchronous SGD.",
        "The v2 abstract gives 1.29x.",
        "Neither abstract says whether its figure is a ratio of throughput or of time to accuracy (eager-SGD).",
        "WAGMA's abstract does not say that 2.1x is throughput.",
        "| eager paper | S. Li et al., PPoPP'20, arXiv 1908.04207 (abstract) |",
    ],
)
def test_the_check_finds_a_misattributed_figure(wrong):
    assert misattributions(statements([wrong]))


def test_the_check_passes_a_figure_given_to_its_version():
    right = [
        "The abstract of v3 gives 1.29x and 2.64x; the v2 abstract gives 1.27x.",
        "WAGMA's abstract states throughput.",
        "eager-SGD's abstract (PPoPP'20) also does not say that 2.64x is a ratio of throughput.",
        "The abstract of an arXiv version after v2 gives 1.29x.",
    ]
    assert misattributions(statements("\n\n".join(right).splitlines())) == []
