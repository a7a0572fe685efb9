"""``stragglerlab simulate``: run a scenario (and, with ``--compare``, other algorithms on the same seed), write the
run folders and print a summary table (or, with ``--json``, a JSON object).

Speedups are over the first ``--compare`` algorithm, the baseline. A default output ``runs/<name>`` that exists
becomes ``runs/<name>-2``, ... ; an output given with ``-o`` that holds a run is replaced only with ``--force``, and
never when it is a real run. A run estimated to need much memory or time says so first, and one that needs more
memory than the machine has is refused unless ``--force``."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from tqdm import tqdm

from stragglerlab.analysis.errors import UserError
from stragglerlab.analysis.metrics import Summary, summarize
from stragglerlab.analysis.outputs import output_path, unused_name
from stragglerlab.analysis.runfolder import NEVER, SIMULATED, check_replaceable, load_run
from stragglerlab.simulator import algorithms
from stragglerlab.simulator.commands import load_scenario, output_arguments, print_json, scenario_arguments
from stragglerlab.simulator.estimate import check, combined, estimate
from stragglerlab.simulator.run import engine_for, simulate
from stragglerlab.simulator.scenario import ALGORITHMS, Scenario


def configure(parser: argparse.ArgumentParser) -> None:
    scenario_arguments(parser, "override a scenario key, e.g. --set cluster.workers=256 (repeatable)", defaults=True)
    parser.add_argument(
        "-o",
        "--output",
        type=output_path,
        metavar="DIR",
        help="run folder (with --compare: a folder holding one run folder per algorithm); default "
        "runs/<scenario name>, or runs/<scenario name>-2, -3, ... when that exists",
    )
    parser.add_argument(
        "--engine",
        choices=("auto", "reference", "fast"),
        help="event engine (default: the scenario's engine key, auto: fast when it supports it)",
    )
    kept = parser.add_mutually_exclusive_group()
    kept.add_argument(
        "--tables",
        default="iterations,rounds",
        metavar="LIST",
        help="tables to keep, comma-separated from iterations,rounds (default both)",
    )
    kept.add_argument(
        "--summary-only",
        action="store_true",
        help="keep no iterations or rounds table, only the summary (memory stays flat at any size)",
    )
    parser.add_argument(
        "--compare",
        metavar="ALGO[,ALGO...]",
        action="append",
        default=[],
        type=algorithm_list,
        help="also run these algorithms on the same scenario and seed (comma-separated or repeated); speedups are "
        "over the first one given",
    )
    parser.add_argument(
        "--target-loss",
        type=float,
        metavar="X",
        help="with a model: report the simulated time until the test loss first reaches X",
    )
    output_arguments(
        parser,
        "replace a simulated run where -o points (a real run is never replaced); run even when "
        "the estimated memory exceeds what the machine has",
    )


def algorithm_list(text: str) -> list[str]:
    """``--compare a,b``: the algorithms named, each one of :data:`ALGORITHMS`."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"{text!r} names no algorithm (e.g. --compare sync,wagma)")
    for name in names:
        if name not in ALGORITHMS:
            raise argparse.ArgumentTypeError(f"invalid choice: {name!r} (choose from {', '.join(ALGORITHMS)})")
    return names


class _Progress:
    """A progress bar over worker-iterations that appears only when a run takes more than a second."""

    def __init__(self, scenario: Scenario):
        total = scenario.workers * scenario.iterations
        self.bar = tqdm(
            total=total,
            desc=scenario.algorithm.name,
            unit="it",
            unit_scale=True,
            delay=1.0,
            leave=False,
            file=sys.stderr,
            disable=None,
        )  # None: only on a terminal
        self.step, self.done = max(total // 200, 1), 0

    def __call__(self, count: int) -> None:
        self.done += count
        if self.done >= self.step:
            self.bar.update(self.done)
            self.done = 0

    def close(self) -> None:
        self.bar.close()


def speedups(s: Summary, baseline: Summary | None) -> tuple[float, float]:
    """Speedup of ``s`` over ``baseline`` in samples/s and in the time to the target loss (NaN where undefined)."""

    def ratio(value: float, base: float) -> float:
        return value / base if value > 0 and base > 0 else float("nan")  # NaN compares false

    if baseline is None:
        return float("nan"), float("nan")
    return ratio(s.samples_per_s, baseline.samples_per_s), ratio(baseline.time_to_loss, s.time_to_loss)


def _times(value: float) -> str:
    return f"{value:.3f}x" if value == value else "-"


def _row(s: Summary, baseline: Summary | None, trained: bool) -> list[str]:
    speedup, target_speedup = speedups(s, baseline)
    row = [
        s.algorithm,
        f"{s.samples_per_s:,.1f}",
        f"{s.mean_iteration:.4f}",
        f"{s.mean_wait:.4f}",
        f"{s.mean_staleness:.3f}",
        str(s.max_staleness),
        f"{100 * s.fresh_fraction:.1f}%",
        _times(speedup),
    ]
    if trained:
        target = f"{s.time_to_loss:.2f}" if s.time_to_loss >= 0 else "-"
        row += [f"{s.final_loss:.5g}", f"{s.final_accuracy:.4f}", target, _times(target_speedup)]
    return row


def format_table(summaries: list[Summary], baseline: Summary | None) -> str:
    """The summary as an aligned text table; speedup is samples/s over the baseline's. With a trained model it adds
    the final test loss and accuracy, the simulated seconds to the target loss and that time's speedup."""
    head = ["algorithm", "samples/s", "iter [s]", "wait [s]", "stale mean", "stale max", "fresh", "speedup"]
    trained = any(s.final_loss == s.final_loss for s in summaries)  # not NaN
    if trained:
        head += ["loss", "accuracy", "to target [s]", "target speedup"]
    rows = [head] + [_row(s, baseline, trained) for s in summaries]
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "\n".join(
        "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))) for r in rows
    )


def legend(summaries: list[Summary]) -> str:
    """What the stale and fresh columns mean for each algorithm shown, one line each (its record's ``legend``);
    algorithms that mean the same share a line."""
    lines: dict[str, list[str]] = {}
    for s in summaries:
        lines.setdefault(algorithms.get(s.algorithm).legend, []).append(s.algorithm)
    return "\n".join(f"{', '.join(names)}: {text}" for text, names in lines.items())


def summary_record(scenario: Scenario, summaries: list[Summary], folders: list[Path], baseline: Summary | None) -> dict:
    """The ``--json`` form of a summary: the scenario's name and size, and each run's metrics, speedups and folder."""
    runs = []
    for s, folder in zip(summaries, folders, strict=True):
        speedup, target_speedup = speedups(s, baseline)
        runs.append({**s.as_dict(), "speedup": speedup, "target_speedup": target_speedup, "folder": str(folder)})
    return {
        "scenario": scenario.name,
        "workers": scenario.workers,
        "iterations": scenario.iterations,
        "seed": scenario.seed,
        "baseline": baseline.algorithm if baseline else None,
        "runs": runs,
    }


def print_summary(
    scenario: Scenario, summaries: list[Summary], folders: list[Path], baseline: Summary | None, as_json: bool
) -> None:
    """What ``simulate`` and ``run`` print at the end: the table (or its JSON) and where the runs are."""
    if as_json:
        print_json(summary_record(scenario, summaries, folders, baseline))
        return
    over = f", speedup over {baseline.algorithm}" if baseline else ""
    print(f"{scenario.name}: {scenario.workers} workers x {scenario.iterations} iterations, seed {scenario.seed}{over}")
    print(format_table(summaries, baseline))
    print(legend(summaries))
    print(f"run folders: {folders[0].parent}" if len(folders) > 1 else f"run folder: {folders[0]}")


def run(args: argparse.Namespace) -> int:
    scenario = load_scenario(args, *([f"engine={args.engine}"] if args.engine else []))
    if args.target_loss is not None:
        if not math.isfinite(args.target_loss):
            raise UserError(f"--target-loss {args.target_loss}: must be a finite number")
        if scenario.workload.model == "none":
            raise UserError(
                f"--target-loss {args.target_loss}: needs a model to train (workload.model), not timing only"
            )
    tables = () if args.summary_only else tuple(t for t in args.tables.split(",") if t)
    if set(tables) - {"iterations", "rounds"}:
        raise UserError(f"--tables {args.tables}: must be a comma-separated list from iterations, rounds")
    compared = list(dict.fromkeys(name for names in args.compare for name in names))
    names = list(dict.fromkeys([scenario.algorithm.name, *compared]))
    scenarios = [scenario.replace(f"--compare {name}", **{"algorithm.name": name}) for name in names]
    out = args.output or unused_name(Path("runs") / scenario.name)
    folders = [out / s.algorithm.name for s in scenarios] if len(scenarios) > 1 else [out]
    for folder in folders:
        check_replaceable(folder, SIMULATED if args.force else NEVER)
    need = combined([estimate(s, engine_for(s), tables) for s in scenarios])
    note = check(f"simulate {scenario.name}", need, args.force)
    if note:
        print(note, file=sys.stderr)
    summaries = []
    for s, folder in zip(scenarios, folders, strict=True):
        progress = _Progress(s)
        try:
            simulate(s, folder, progress, tables, SIMULATED if args.force else NEVER)
        finally:
            progress.close()
        summaries.append(summarize(load_run(folder), args.target_loss))
    if not summaries[0].iterations:
        raise UserError("the run produced no iterations")
    baseline = summaries[names.index(compared[0])] if compared else None
    print_summary(scenario, summaries, folders, baseline, args.json)
    return 0
