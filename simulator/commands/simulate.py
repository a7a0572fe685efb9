"""``stragglerlab simulate``: run a scenario (and, with ``--compare``, a baseline on the same seed), write the run
folders and print a summary table."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tqdm import tqdm

from stragglerlab.analysis.errors import UserError
from stragglerlab.analysis.metrics import Summary, summarize
from stragglerlab.analysis.runfolder import load_run
from stragglerlab.simulator.commands import load_scenario, scenario_arguments
from stragglerlab.simulator.run import simulate
from stragglerlab.simulator.scenario import ALGORITHMS, Scenario


def configure(parser: argparse.ArgumentParser) -> None:
    scenario_arguments(parser, "override a scenario key, e.g. --set cluster.workers=256 (repeatable)")
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        metavar="DIR",
        help="run folder (with --compare: a folder holding one run folder per algorithm); default runs/<scenario name>",
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
        metavar="ALGO",
        choices=ALGORITHMS,
        help="also run this algorithm on the same scenario and seed, and report the speedup over it",
    )
    parser.add_argument(
        "--target-loss",
        type=float,
        metavar="X",
        help="with a model: report the simulated time until the test loss first reaches X",
    )


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


def _ratio(value: float, base: float) -> str:
    return f"{value / base:.3f}x" if value > 0 and base > 0 else "-"  # NaN compares false: "-"


def _row(s: Summary, baseline: Summary | None, trained: bool) -> list[str]:
    row = [
        s.algorithm,
        f"{s.samples_per_s:,.1f}",
        f"{s.mean_iteration:.4f}",
        f"{s.mean_wait:.4f}",
        f"{s.mean_staleness:.3f}",
        str(s.max_staleness),
        f"{100 * s.fresh_fraction:.1f}%",
        _ratio(s.samples_per_s, baseline.samples_per_s) if baseline else "-",
    ]
    if trained:
        target = f"{s.time_to_target:.2f}" if s.time_to_target >= 0 else "-"
        row += [
            f"{s.final_loss:.5g}",
            f"{s.final_accuracy:.4f}",
            target,
            _ratio(baseline.time_to_target, s.time_to_target) if baseline else "-",
        ]
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


def run(args: argparse.Namespace) -> int:
    scenario = load_scenario(args, *([f"engine={args.engine}"] if args.engine else []))
    tables = () if args.summary_only else tuple(t for t in args.tables.split(",") if t)
    if set(tables) - {"iterations", "rounds"}:
        raise UserError(f"--tables {args.tables}: must be a comma-separated list from iterations, rounds")
    scenarios = [scenario]
    if args.compare and args.compare != scenario.algorithm.name:
        scenarios.append(scenario.replace(**{"algorithm.name": args.compare}))
    out = args.output or Path("runs") / scenario.name
    summaries = []
    for s in scenarios:
        folder = out / s.algorithm.name if len(scenarios) > 1 else out
        progress = _Progress(s)
        try:
            simulate(s, folder, progress, tables)
        finally:
            progress.close()
        summaries.append(summarize(load_run(folder), args.target_loss))
    if not summaries[0].iterations:
        raise UserError("the run produced no iterations")
    baseline = summaries[-1] if len(summaries) > 1 else None
    print(f"{scenario.name}: {scenario.workers} workers x {scenario.iterations} iterations, seed {scenario.seed}")
    print(format_table(summaries, baseline))
    print(f"run folder{'s' if len(scenarios) > 1 else ''}: {out}")
    return 0
