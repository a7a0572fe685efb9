"""How the package's modules import each other: at the top of each module, through the one namespace, and without
cycles, so no import has to hide inside a function to dodge one. Third-party heavy imports (torch, mpi4py,
matplotlib) may stay inside functions: ``pip install stragglerlab`` and ``stragglerlab simulate`` work without them.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: repository folder -> the package it is installed as
PACKAGES = {
    "stragglerlab": "stragglerlab",
    "simulator": "stragglerlab.simulator",
    "analysis": "stragglerlab.analysis",
    "realrun": "stragglerlab.realrun",
    "native": "stragglerlab.native",
}
OLD_NAMES = ("simulator", "analysis", "realrun", "native")


def modules() -> dict[str, ast.Module]:
    """Every module of the package by its dotted name, parsed."""
    out = {}
    for folder, package in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            name = ".".join((package, *parts[:-1])) if parts[-1] == "__init__" else ".".join((package, *parts))
            out[name] = ast.parse(path.read_text(), str(path))
    return out


def imported(node: ast.Import | ast.ImportFrom, known: dict[str, ast.Module]) -> list[str]:
    """The project's modules an import statement loads: ``from a import b`` loads ``a.b`` when that is a module."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names if alias.name in known]
    if node.module is None or node.module not in known:
        return []
    return [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known else node.module for a in node.names]


def top_level_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """The imports a module runs when it is imported (not those only type checkers read)."""
    out = []
    for node in tree.body:
        typing_only = isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
        if not typing_only and not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out += [n for n in ast.walk(node) if isinstance(n, ast.Import | ast.ImportFrom)]
    return out


def test_no_function_imports_a_module_of_the_project():
    known = modules()
    inside = []
    for name, tree in known.items():
        for function in ast.walk(tree):
            if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                for node in ast.walk(function):
                    if isinstance(node, ast.Import | ast.ImportFrom) and imported(node, known):
                        inside.append(f"{name}:{node.lineno}")
    assert not inside, inside


def test_the_runtime_imports_have_no_cycle():
    known = modules()
    edges = {
        name: {m for node in top_level_imports(tree) for m in imported(node, known)} for name, tree in known.items()
    }
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(edges[module]):
            assert state.get(target) != 1, "import cycle: " + " -> ".join([*path, module, target])
            if target not in state:
                visit(target, [*path, module])
        state[module] = 2

    for module in sorted(known):
        if module not in state:
            visit(module, [])


def test_every_import_of_the_project_goes_through_its_namespace():
    sources = [p for folder in (*PACKAGES, "tests") for p in (ROOT / folder).rglob("*.py")]
    cells = [c for nb in (ROOT / "notebooks").glob("*.ipynb") for c in json.loads(nb.read_text())["cells"]]
    texts = [p.read_text() for p in sources] + ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    bare = []
    for text in texts:
        for node in ast.walk(ast.parse(text)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            bare += [n for n in names if n.split(".")[0] in OLD_NAMES]
    assert not bare, bare


def test_a_scenario_and_its_plan_load_without_the_engines():
    # the scenario's keys and checks (the algorithms' records) and its plan (record, cost model, rules) stay apart
    # from the engines (numba, simpy) and the convergence replay (pandas)
    code = (
        "import sys\n"
        "from stragglerlab.simulator.plan import plan\n"
        "from stragglerlab.simulator.scenario import load\n"
        "for name in ('sync', 'wagma', 'lsgd', 'async-ps', 'ad-psgd'):\n"
        "    plan(load(text=f'[algorithm]\\nname = \"{name}\"'))\n"
        "print(sorted(m for m in ('numba', 'simpy', 'pandas', 'pyarrow') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
