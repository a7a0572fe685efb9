"""Algorithm styles: declared ones are kept and ordered, the others take what the palette and the markers have left;
analysis itself never tells algorithms apart by name."""

import ast
import itertools
from pathlib import Path

import pytest

from stragglerlab.analysis.style import DISTINCT, MARKERS, PALETTE, Style, assign, distance, lab
from stragglerlab.simulator.algorithms import RECORDS

ROOT = Path(__file__).resolve().parents[2]
#: the names of the algorithms the simulator ships
NAMES = ("sync", "eager-solo", "eager-majority", "wagma", "lsgd", "local-sgd")


def test_declared_styles_first_by_order_then_the_rest_by_name_with_what_is_left():
    declared = {"b": Style("#000000", "o", 2), "a": Style("#e69f00", "s", 2), "c": Style("#123456", "x", -1)}
    out = assign({**declared, "z": None, "y": None})
    assert list(out) == ["c", "a", "b", "y", "z"]  # order, then name; the unstyled after, by name
    assert [out[n] for n in "cab"] == [declared[n] for n in "cab"]
    # black and orange (any case) and markers o and s are taken: the next free ones, in order
    assert out["y"] == Style(PALETTE[2], "^", 3) and out["z"] == Style(PALETTE[3], "D", 4)


def test_once_the_palette_runs_out_it_starts_again():
    out = assign(dict.fromkeys((f"alg{i:02d}" for i in range(len(PALETTE) + 2)), None))
    colours = [s.colour for s in out.values()]
    assert colours == [*PALETTE, *PALETTE[:2]]
    assert [s.marker for s in out.values()][: len(MARKERS)] == list(MARKERS)


def test_analysis_never_tests_an_algorithm_name():
    """No string in analysis's code is an algorithm's name (docstrings, which are longer, aside)."""
    found = []
    for path in sorted((ROOT / "analysis").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in NAMES:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
    assert not found, found


def test_every_algorithm_has_a_colour_and_a_marker_of_its_own():
    styles = [record.style for record in RECORDS]
    assert len({s.colour.lower() for s in styles}) == len(styles)
    assert len({s.marker for s in styles}) == len(styles)


def test_every_algorithm_takes_its_colour_from_the_one_palette_which_leaves_room_for_more():
    colours = {record.style.colour.upper() for record in RECORDS}
    assert colours <= set(PALETTE)
    assert len(PALETTE) >= 14  # room beyond the twelve algorithms first shipped, for two more


def test_every_two_colours_of_the_palette_are_distinguishable():
    near = [(a, b) for a, b in itertools.combinations(PALETTE, 2) if distance(a, b) < DISTINCT]
    assert not near, near
    assert all(lab(c)[0] < 80 for c in PALETTE)  # none too light to see on white


def test_the_colour_difference_is_ciede2000():
    assert lab("#FFFFFF") == pytest.approx((100, 0, 0), abs=0.05) and lab("#000000") == (0, 0, 0)
    assert distance("#123456", "#123456") == 0
    assert distance("#000000", "#FFFFFF") == pytest.approx(100, abs=0.05)  # black to white: L* alone
    assert distance("#FF0000", "#0000FF") == pytest.approx(52.88, abs=0.05)  # the published red-blue value
