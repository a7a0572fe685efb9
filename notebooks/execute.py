"""Execute the notebooks as Jupyter would, store what each cell printed and showed in the notebook, and their figures
in ``docs/figures/``; or execute them again and check that they still print exactly what is stored.

    python notebooks/execute.py                    # every notebook, outputs stored in place (20 min, busy 2 cores)
    python notebooks/execute.py baselines          # one
    python notebooks/execute.py --check            # execute into a scratch folder and compare (exit 1 on a difference)

Each notebook runs in a fresh Python process (as in a fresh kernel) from the ``notebooks`` folder, its code cells in
order in one namespace. A cell's output is what it printed (stdout, stderr) and the value of its last expression, if
any: a matplotlib figure is stored as a PNG, anything else as its ``repr``. No Jupyter package is needed.

A notebook reads two environment variables, which this script sets: ``STRAGGLERLAB_NOTEBOOK_OUT``, the folder for its
runs and tables (a temporary folder, so that every execution starts from nothing, unless the variable is set
already), and ``STRAGGLERLAB_NOTEBOOK_FIGURES``, where it saves the figures the documentation links to
(``docs/figures/``; with ``--check``, a scratch folder).

The check also reads the stored notebook's prose: every number a markdown cell states must be one its code cells
printed or set (rounded as the prose writes it), so the prose cannot drift from what the notebook computes. Numbers
in code spans, years and the digits of names (ResNet-50, CIFAR-10) are not read as results.
"""

from __future__ import annotations

import argparse
import ast
import base64
import contextlib
import io
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
FIGURES = ROOT / "docs" / "figures"
#: pixels per inch of the figures embedded in a notebook (the saved ones keep the toolkit's print resolution)
EMBED_DPI = 100


def notebooks(names: list[str]) -> list[Path]:
    """The notebooks named (all of them when none is), as paths; an unknown name is a one-line error."""
    every = sorted(HERE.glob("*.ipynb"))
    if not names:
        return every
    known = {p.stem: p for p in every}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"execute.py: no notebook {', '.join(unknown)} (notebooks: {', '.join(sorted(known))})")
    return [known[n] for n in names]


# --- the kernel: runs in the notebook's own process -------------------------------------------------------------


def _display(value) -> dict:
    """The ``execute_result`` data of a cell's last value: a figure as PNG (and closed), else its ``repr``."""
    from matplotlib.figure import Figure

    if isinstance(value, Figure):
        import matplotlib.pyplot as plt

        buffer = io.BytesIO()
        value.savefig(buffer, format="png", dpi=EMBED_DPI, metadata={"Software": None})
        plt.close(value)
        return {"image/png": base64.b64encode(buffer.getvalue()).decode(), "text/plain": [repr(value)]}
    return {"text/plain": repr(value).splitlines(keepends=True)}


def _run_cell(source: str, namespace: dict, name: str) -> list[dict]:
    """Execute one cell; its outputs in the notebook format (streams, then the last expression's value)."""
    tree = ast.parse(source, name)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        exec(compile(tree, name, "exec"), namespace)
        value = eval(compile(ast.Expression(last.value), name, "eval"), namespace) if last else None
    outputs = [
        {"output_type": "stream", "name": stream, "text": text.getvalue().splitlines(keepends=True)}
        for stream, text in (("stdout", out), ("stderr", err))
        if text.getvalue()
    ]
    if value is not None:
        outputs.append({"output_type": "execute_result", "data": _display(value), "metadata": {}})
    return outputs


def kernel(notebook: Path, results: Path) -> None:
    """Execute ``notebook``'s code cells in order and write their outputs (a list per code cell) to ``results``."""
    namespace: dict = {"__name__": "__main__"}
    cells = json.loads(notebook.read_text())["cells"]
    outputs = []
    for number, cell in enumerate(cells):
        if cell["cell_type"] == "code":
            outputs.append(_run_cell("".join(cell["source"]), namespace, f"{notebook.name} cell {number}"))
    results.write_text(json.dumps(outputs))


# --- the driver ----------------------------------------------------------------------------------------------------


def execute(notebook: Path, out: Path, figures: Path) -> list[list[dict]]:
    """Run ``notebook`` in a fresh process (runs and tables under ``out``, figures into ``figures``); the outputs of
    each code cell. A failing cell stops it: its traceback is the error."""
    env = dict(
        os.environ,
        STRAGGLERLAB_NOTEBOOK_OUT=str(out),
        STRAGGLERLAB_NOTEBOOK_FIGURES=str(figures),
        MPLBACKEND="Agg",
        PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    )
    figures.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        results = Path(scratch) / "outputs.json"
        proc = subprocess.run(
            [sys.executable, __file__, "--kernel", str(notebook), str(results)], cwd=HERE, env=env, check=False
        )
        if proc.returncode != 0:
            raise SystemExit(f"execute.py: {notebook.name} failed (its traceback is above)")
        return json.loads(results.read_text())


def store(notebook: Path, outputs: list[list[dict]]) -> None:
    """Write ``outputs`` into ``notebook``'s code cells, numbered as one run from the top."""
    data = json.loads(notebook.read_text())
    code = [cell for cell in data["cells"] if cell["cell_type"] == "code"]
    for count, (cell, cell_outputs) in enumerate(zip(code, outputs, strict=True), start=1):
        cell["execution_count"] = count
        cell["outputs"] = [
            {**o, "execution_count": count} if o["output_type"] == "execute_result" else o for o in cell_outputs
        ]
    notebook.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")


def _comparable(output: dict) -> tuple:
    """What must match between two executions: the text of streams and values; a figure only as being one."""
    if output["output_type"] == "stream":
        return ("stream", output["name"], "".join(output["text"]))
    data = output["data"]
    return ("figure",) if "image/png" in data else ("value", "".join(data["text/plain"]))


def differences(notebook: Path, outputs: list[list[dict]]) -> list[str]:
    """How the freshly executed ``outputs`` differ from those stored in ``notebook`` (empty: not at all)."""
    code = [c for c in json.loads(notebook.read_text())["cells"] if c["cell_type"] == "code"]
    found = []
    for number, (cell, fresh) in enumerate(zip(code, outputs, strict=True), start=1):
        stored = [_comparable(o) for o in cell["outputs"]]
        now = [_comparable(o) for o in fresh]
        if stored != now:
            found.append(f"code cell {number}: stored\n{_show(stored)}\nexecuted now\n{_show(now)}")
    return found


def _show(outputs: list[tuple]) -> str:
    return (
        "\n".join("    " + " | ".join(str(part) for part in o).replace("\n", "\n    ") for o in outputs)
        or "    nothing"
    )


# --- the prose's numbers -------------------------------------------------------------------------------------------

#: a number in prose: digits with thousands commas and a decimal part, not glued to a word (ResNet-50, P100), or
#: a ratio (1.29x)
NUMBER = re.compile(r"(?<![\w.\-/])(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(?=x(?!\w)|×|[^\w\-.]|\.(?!\d)|$)")
#: what the prose's numbers are not read from: code spans, links' targets
SKIPPED = re.compile(r"`[^`]*`|\]\([^)]*\)")
#: a number printed or written in code
ANY_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:e-?\d+)?")


def numbers(text: str) -> set[float]:
    """Every number written in ``text`` (absolute values, thousands commas read)."""
    values = set()
    for token in ANY_NUMBER.findall(text):
        with contextlib.suppress(ValueError):
            values.add(abs(float(token.replace(",", ""))))
    return values


def printed(notebook: Path) -> set[float]:
    """Every number ``notebook``'s code cells set or printed (absolute values)."""
    sourced: set[float] = set()
    for cell in json.loads(notebook.read_text())["cells"]:
        if cell["cell_type"] == "code":
            sourced |= numbers("".join(cell["source"]))
            for output in cell["outputs"]:
                text = output.get("text") or output.get("data", {}).get("text/plain", [])
                sourced |= numbers("".join(text))
    return sourced


def unstated(prose: str, sourced: set[float]) -> list[str]:
    """The numbers markdown ``prose`` states that are not in ``sourced``, each as ``"number (in: context)"``. A number
    of k decimals matches a sourced one that rounds to it at k decimals; a percentage also matches a fraction; an
    integer of 1990-2030 is read as a year."""
    prose = SKIPPED.sub(" ", prose)
    missing = []
    for match in NUMBER.finditer(prose):
        whole, decimals = match.group(1).replace(",", ""), match.group(2) or ""
        stated = float(whole + decimals)
        if not decimals and 1990 <= stated <= 2030:
            continue
        places = len(decimals) - 1 if decimals else 0
        candidates = [(stated, places)]
        if prose[match.end() : match.end() + 2].lstrip().startswith("%"):
            candidates.append((stated / 100, places + 2))
        if not any(abs(round(v, p) - c) < 1e-9 * max(1.0, c) for v in sourced for c, p in candidates):
            start = max(match.start() - 30, 0)
            missing.append(f"{match.group(0)} (in: ...{prose[start : match.end() + 10].strip()}...)")
    return missing


def unsourced(notebook: Path) -> list[str]:
    """The numbers ``notebook``'s markdown states that none of its code cells printed or set (``unstated``)."""
    sourced = printed(notebook)
    cells = json.loads(notebook.read_text())["cells"]
    return [n for cell in cells if cell["cell_type"] == "markdown" for n in unstated("".join(cell["source"]), sourced)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="notebooks to execute (default: all), e.g. baselines")
    parser.add_argument(
        "--check", action="store_true", help="execute into a scratch folder and compare with the stored outputs"
    )
    parser.add_argument("--scratch", type=Path, help="with --check: the scratch folder (default: a temporary one)")
    parser.add_argument("--kernel", nargs=2, type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.kernel:
        kernel(*args.kernel)
        return 0
    kept = os.environ.get("STRAGGLERLAB_NOTEBOOK_OUT")
    failed = False
    for notebook in notebooks(args.names):
        with tempfile.TemporaryDirectory() as temporary:
            scratch = (args.scratch or Path(temporary)) / notebook.stem
            if not args.check:
                print(f"executing {notebook.name}", file=sys.stderr)
                store(notebook, execute(notebook, Path(kept).resolve() if kept else scratch, FIGURES))
                continue
            problems = differences(notebook, execute(notebook, scratch / "runs", scratch / "figures"))
        problems += [f"prose states {n}, which no cell printed" for n in unsourced(notebook)]
        for problem in problems:
            print(f"{notebook.name}: {problem}")
        failed |= bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
