"""The example scenarios shipped inside the package (``simulator/examples/*.toml``).

Each file's first line is a comment that describes it; ``stragglerlab examples`` lists them and
``stragglerlab simulate --example NAME`` runs one on a fresh install.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from stragglerlab.simulator.scenario import ScenarioError

_FOLDER = resources.files("stragglerlab.simulator") / "examples"


def examples() -> dict[str, str]:
    """Example name -> its one-line description, sorted by name."""
    out = {}
    for entry in sorted(_FOLDER.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".toml"):
            first = entry.read_text().splitlines()[0]
            out[entry.name.removesuffix(".toml")] = first.lstrip("# ").strip()
    return out


def example_path(name: str) -> Path:
    """The file of example ``name``; an unknown name is a one-line error listing the known ones."""
    known = examples()
    if name not in known:
        raise ScenarioError(f"--example {name}: no such example (known: {', '.join(known)})")
    return Path(str(_FOLDER / f"{name}.toml"))
