"""Round times measured through the real harness: the cost table (``network.table``) that ``calibrate
--collectives`` writes.

Every algorithm with an exchange on the chosen backend (the native core, or ``torch``: sync through
``torch.distributed``, gloo on CPU, the collective DistributedDataParallel all-reduces its buckets with) is run by
:func:`~stragglerlab.realrun.harness.run_rank` itself (the same code as ``stragglerlab run``), timing-only, at each
message size, under the scenario's own compute model and imbalance (the ranks sleep through their compute): a round
costs more when the ranks it needs have been waiting or computing for a while than when they come straight from the
previous round, since on a loaded machine a rank that slept takes a while to get a core back (at 2 ranks with a 1.5x
straggler and 30 ms of compute, the straggler's waits for 400 kB rounds averaged 2.8 ms, against a 0.3 ms median back
to back). ``balanced`` times the rounds back to back instead (0.1 ms of compute, no imbalance): the bare exchange.
A round's time is the least wait (``t_done − t_post``, each on one
rank's own clock) among the calls by which the ranks joined it fresh (each rank's last fresh call the round carried):
the last poster of a synchronous round or of an LSGD exchange, whose wait is the exchange alone; in an asynchronous
round every fresh call was posted before the exchange took it, so the least wait is again the exchange (the initiator's,
or a call posted as it started). Where each of a round's rows carries a single fresh call (ad-psgd: every worker's
iteration n is its own exchange with its own peer, which the rounds table numbers n alike), every such call's wait is
an exchange's time: the least of the P would be their minimum. The first two rounds of each run are a warm-up and
dropped. So it is the exchange with
its whole software cost as the rank meets it, up to the moment the rank has control again (on a loaded machine a good
fraction of a millisecond after the core has finished), the activation token of an asynchronous round included (a few
microseconds, which the simulation adds again from alpha and beta). Differences of two ranks' clocks are never used:
aligned by ping-pongs on a loaded machine, they can be a millisecond apart. A round kind is measured at the rank count
the simulator asks it for: what the algorithm's rules ask a recording cost model for at construction (the largest
concurrent group for WAGMA's group rounds, P otherwise). The gap between a round's end and the rank's next computation
(``t_start`` of the next iteration − ``t_done``) is the harness's own cost per iteration, ``workload.update``.

**DDP**: with the torch backend and a torch workload the rounds are DistributedDataParallel's, training the model with
the scenario's buckets and again with the whole gradient as one bucket, entered at the simulator's bucket sizes (the
gradient's bytes over the buckets DDP made). A round's least wait is then a chain: the last poster's last bucket, after
whichever earlier buckets its backward had not yet covered. Each round's figure is the bucket time at which the
simulator's bucketed sync gives that wait (:func:`bucket_time`), from the last poster's own start and post.

**The server's cost**: a push round (async-ps, easgd) is two messages and the bytes through the server's link, which
the network model prices, its turn behind the other workers' pushes, and whatever further work the server does per
byte, ``algorithm.server_gamma``: :func:`server_gamma` finds that key by simulating the measured blocks again under
the fitted model until their push rounds last as long as the measured ones.

**Repeats until stable**: each (algorithm, size) is run in blocks of ``block`` iterations (one harness run each, in
the job's own processes, :class:`InProcess`, or each in a launch of its own, as ``calibrate --np`` times DDP's buckets:
:mod:`~stragglerlab.realrun.launched`; block b with the scenario's seed + b, so that random delays and compute times
differ from block to block; more iterations, up to 2,048, when a block had fewer than ``block / 2`` rounds, as local
SGD and LSGD have); after each block the median of every round so far is taken, and the standard error of their mean
by batch means (the blocks as batches, :meth:`Figure.standard_error`), and measuring stops when the last three medians
lie within ``tolerance`` (relative, max/min − 1) of each other and the standard error is at most ``tolerance`` of the
mean, after at least the blocks' ``least`` (3 in one job, 8 launched), or after ``max_blocks`` blocks (the figure is
then flagged unstable); a kind with r times fewer rounds than the most frequent one of its blocks is held to √r times
``tolerance``, and a figure shorter than :data:`FLOOR` of the blocks' mean iteration as if it were that long
(:func:`settled`). **(choice)** The mean's precision as well as the median: the table holds the
mean, which a single stall of a hundred milliseconds among a few hundred rounds of one can double while the median does
not move. **(choice)** Its standard error, not three running means within ``tolerance``: a running mean moves by
1/k of a block's difference, so a burst of stalls early on, which the runs after the calibration need not meet, can
leave three running means within 5 % of each other (a 4-rank ad-psgd calibration stopped so after 8 blocks, its mean
1.7 times the mean exchange of the runs after it). Each figure is printed as its mean ± its standard error, its median
and the interquartile range of the single rounds. The table holds the **mean**
(**(choice)**: the simulation gives every round one time, and a mean iteration time is predicted by the mean round time;
under load the rounds' times are skewed, a few of several milliseconds), and how single rounds vary about it
(:func:`spread`: a lognormal bulk and rare stalls, which the simulation draws each exchange's factor from).

**Fits**: per (kind, ranks), ``seconds ≈ overhead + bytes × slope`` (least squares weighted by 1/t, as the network
fits); the intercept is the per-round overhead. Its RMS relative residual over 20 % is flagged: the line does not
describe that kind, and the table's interpolation, not the line, is what the simulation uses. The table holds the
overhead already, so the fragment sets ``network.overhead = 0``.
"""

from __future__ import annotations

import csv
import math
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd
from tqdm import tqdm

from stragglerlab.analysis.runfolder import Run, load_run
from stragglerlab.realrun import testbed
from stragglerlab.realrun.calibration import lognormal_cv, quartile_sigma
from stragglerlab.realrun.harness import run_rank
from stragglerlab.realrun.networkfit import record
from stragglerlab.realrun.replica import is_torch
from stragglerlab.simulator.algorithms.server import PUSH
from stragglerlab.simulator.algorithms.sync import bucketed_end
from stragglerlab.simulator.bounds import MAX_CV
from stragglerlab.simulator.imbalance import Spread
from stragglerlab.simulator.measured import ANY_KIND, COLUMNS, SPREAD, WORLD, over
from stragglerlab.simulator.network import BYTES_PER_ELEMENT, message_bytes
from stragglerlab.simulator.plan import plan
from stragglerlab.simulator.run import run_engine, simulate
from stragglerlab.simulator.scenario import Scenario, from_dict, to_dict

#: default message sizes (bytes per rank), 4 kB … 4 MiB
SIZES = (4096, 32768, 262144, 1048576, 4194304)
WARMUP_ROUNDS = 2
STABLE_BLOCKS = 3
FLAG_RESIDUAL = 0.20
#: ``--balanced``: rounds back to back, no imbalance
BALANCED = {"workload.compute": {"dist": "constant", "mean": 1e-4}, "imbalance.kind": "none"}
MAX_ITERATIONS = 2048  # per block, for algorithms with few rounds per iteration
#: a figure shorter than this share of the blocks' mean iteration is held to a precision of this share (:func:`settled`)
FLOOR = 0.01
STALL_FENCE = 1.5  # interquartile ranges above the third quartile, in log: Tukey's fence
#: a row of the cost table: kind, ranks, bytes, seconds and how single rounds vary about them
Row = tuple[str, int, int, float, float, Spread]  # kind, ranks, world, bytes, seconds, spread


def ddp_rounds(backend: str, model: str) -> bool:
    """Whether the rounds to time are DDP's buckets of the workload itself (the torch backend with a torch workload)
    rather than timing-only exchanges at given sizes."""
    return backend == "torch" and is_torch(model)


def kind_ranks(scenario: Scenario) -> dict[tuple[str, int], int]:
    """The rank count the simulator prices each round kind of ``scenario``'s algorithm at: (kind, i) -> ranks of the
    i-th exchange of that kind its rules price (:meth:`~.networkfit.Recorded.ranks`; WAGMA's phase i prices the
    group rounds whose ``group`` is i)."""
    return record(scenario).ranks()


@dataclass
class Figure:
    """One measured figure: every sample so far, its median after each block, and each block's round count and mean
    (the batches of the mean's standard error)."""

    samples: list[float] = field(default_factory=list)
    medians: list[float] = field(default_factory=list)
    blocks: list[tuple[int, float]] = field(default_factory=list)

    def add(self, values: np.ndarray) -> None:
        if len(values):
            self.blocks.append((len(values), float(np.mean(values))))
        self.samples += [float(v) for v in values]
        if self.samples:
            self.medians.append(float(np.median(self.samples)))

    def stable(self, tolerance: float, floor: float = 0.0) -> bool:
        """Whether the last three medians lie within ``tolerance`` of each other and the mean (what the table holds)
        is known to within ``tolerance``: its standard error at most ``tolerance`` of it; each judged against
        ``floor`` seconds where the figure is shorter (:func:`settled`)."""
        last = self.medians[-STABLE_BLOCKS:]
        return (
            len(last) == STABLE_BLOCKS
            and min(last) > 0
            and max(last) - min(last) < tolerance * max(min(last), floor)
            and self.standard_error() <= tolerance * max(self.mean, floor)
        )

    def standard_error(self) -> float:
        """The standard error of the mean of all rounds by batch means, the blocks as batches (inf under three
        blocks). Rounds within a block are not independent draws (the machine's speed wanders over seconds, and a
        block is a few seconds of it), the blocks, separate runs, nearly are: so the spread of the blocks' means
        says how well the mean is known, which the rounds' own spread over their count would understate."""
        if len(self.blocks) < STABLE_BLOCKS:
            return float("inf")
        n, m = np.array(self.blocks).T  # the blocks' round-weighted mean is the mean of all rounds
        return float(np.sqrt(len(n) / (len(n) - 1) * np.sum((n * (m - self.mean)) ** 2)) / n.sum())

    @property
    def mean(self) -> float:
        return float(np.mean(self.samples))

    @property
    def median(self) -> float:
        return float(np.median(self.samples))

    def spread(self) -> tuple[float, float]:
        return float(np.percentile(self.samples, 25)), float(np.percentile(self.samples, 75))


def block_times(
    run: Run, ddp: bool = False, ranks: dict[tuple[str, int], int] | None = None
) -> tuple[dict[tuple[str, int], np.ndarray], np.ndarray, float]:
    """Round times per (kind, ranks) (warm-up rounds dropped), the update gaps and the bytes of an exchange (a
    bucket's under ``ddp``) of one run, a calibration's block (module doc) or any other. ``ranks``: what
    :func:`kind_ranks` gives the run's scenario; a kind priced several times (WAGMA's phases) takes the ranks of the
    exchange its round's ``group`` names. Without it, every round counts over all the run's workers."""
    it = run.iterations
    workload = run.meta["scenario"]["workload"]  # as the run resolved it: the model's size, DDP's buckets
    P = run.meta["scenario"]["cluster"]["workers"]
    buckets = workload["buckets"] if ddp else 1
    first = run.rounds.drop_duplicates("round").set_index("round")  # gossip: a row per initiator
    joined = it[it["fresh"] & (it["round"] >= WARMUP_ROUNDS)].sort_values("iteration").groupby(["round", "worker"])
    last = joined.tail(1)
    # a round whose every row carries one fresh call is many exchanges, one per initiator (ad-psgd): each counts
    single = run.rounds.groupby("round")["fresh"].max().le(1)
    own = last["round"].map(single).fillna(False).to_numpy(dtype=bool)
    shared = last[~own]
    least = pd.concat([last[own], shared.loc[shared.groupby("round")["wait"].idxmin()]]).set_index("round")
    wait = least["wait"]
    if ddp:
        backward = workload["backward"]
        rows = zip(least["t_start"], least["t_post"], wait, strict=True)
        wait = pd.Series([bucket_time(s, p, w, buckets, backward) for s, p, w in rows], index=least.index)
    kinds = first["kind"].reindex(wait.index).to_numpy()
    groups = first["group"].reindex(wait.index).to_numpy()
    priced = ranks or {}
    several = {k for k, i in priced if i > 0}
    keys = [
        (str(k), priced.get((str(k), int(g) if k in several else 0), P)) for k, g in zip(kinds, groups, strict=True)
    ]
    times = {key: wait.to_numpy()[[k == key for k in keys]] for key in dict.fromkeys(keys)}
    it = it.sort_values(["worker", "iteration"])
    gaps = [w["t_start"].to_numpy()[1:] - w["t_done"].to_numpy()[:-1] for _, w in it.groupby("worker")]
    exchanged = BYTES_PER_ELEMENT * workload["params"] / buckets  # the simulator's bucket size, exactly
    return times, np.concatenate(gaps), int(exchanged) if exchanged.is_integer() else exchanged


def iteration_time(run: Run) -> float:
    """A run's mean iteration time: each worker's time from its first start to its last end over its iterations,
    averaged over the workers."""
    spans = run.iterations.groupby("worker").agg(start=("t_start", "min"), end=("t_done", "max"), n=("t_done", "size"))
    return float(((spans["end"] - spans["start"]) / spans["n"]).mean())


def median_round(run: Run) -> float:
    """The median time of a run's rounds, all kinds together, each as :func:`block_times` takes it: the exchange as
    the rank that completes it meets it (nan without any)."""
    times = list(block_times(run)[0].values())
    return float(np.median(np.concatenate(times))) if times else math.nan


def bucket_time(start: float, post: float, wait: float, buckets: int, backward: float) -> float:
    """The time of one bucket's all-reduce at which the simulator's bucketed sync makes a round's last poster, which
    computed from ``start`` to ``post``, wait ``wait``: its buckets come during its backward (share ``backward``),
    each all-reduced after the one before, so the wait is the last bucket's all-reduce where the earlier ones ended
    during the backward, and up to all of them where the backward was short. The wait grows with the bucket's time,
    which bisection finds to 0.1 %."""
    low, high = wait / buckets, wait
    while high - low > 1e-3 * high:
        mid = (low + high) / 2
        waits = bucketed_end(np.array([start]), np.array([post]), buckets, backward, mid) - post
        low, high = (mid, high) if waits < wait else (low, mid)
    return (low + high) / 2


@dataclass
class Measurement:
    """Everything measured over ``ranks`` ranks: figures per (algorithm, kind, ranks, bytes), the update gap,
    stability, and the scenario of each (algorithm, bytes)'s blocks (as ``meta.json`` stores one), which the network
    fit prices again."""

    backend: str = "native"
    servers: int = 1  # shards of async-ps's and easgd's server
    rounds: dict[tuple[str, str, int, float], Figure] = field(default_factory=dict)
    gap: Figure = field(default_factory=Figure)
    unstable: list[tuple[str, float]] = field(default_factory=list)
    launched: bool = False  # each block in processes of its own
    ranks: int = 0
    scenarios: dict[tuple[str, float], dict[str, Any]] = field(default_factory=dict)
    covered: dict[str, list[str]] = field(default_factory=dict)  # an algorithm not run -> those whose rounds it has


class Blocks(Protocol):
    """Where a calibration's blocks run: ``run`` one block's scenario into ``folder`` (collective where the blocks
    share processes) and give the run to the process that ``deciding`` (None elsewhere); ``agree`` hands that
    process's value to every other; ``ranks`` of each block; ``launched``: each block in processes of its own;
    ``least``: the fewest blocks a figure takes."""

    ranks: int
    deciding: bool
    launched: bool
    least: int

    def run(self, scenario: Scenario, folder: Path, backend: str) -> Run | None: ...

    def agree(self, value: Any) -> Any: ...


class InProcess:
    """A calibration's blocks run one after another by the ranks of ``comm`` (``MPI.COMM_WORLD``) themselves, each
    with :func:`~stragglerlab.realrun.harness.run_rank`; rank 0 reads them and decides."""

    def __init__(self, comm: Any):
        self.comm, self.ranks, self.deciding = comm, comm.Get_size(), comm.Get_rank() == 0
        self.launched, self.least = False, STABLE_BLOCKS

    def run(self, scenario: Scenario, folder: Path, backend: str) -> Run | None:
        run_rank(scenario, folder, backend, notes=False)
        return load_run(folder) if self.deciding else None

    def agree(self, value: Any) -> Any:
        return self.comm.bcast(value, root=0)


def measure(
    base: Scenario,
    blocks: Blocks,
    names: Sequence[str],
    sizes: Sequence[int],
    block: int = 24,
    tolerance: float = 0.05,
    max_blocks: int = 10,
    balanced: bool = False,
    backend: str = "native",
    progress: bool = True,
) -> Measurement | None:
    """Every algorithm of ``names`` at every size, in ``blocks`` (collective where they share processes), under
    ``base``'s compute and imbalance (or ``balanced``), through the real runs' ``backend``; with the torch backend
    and a torch workload, DDP's buckets of that workload and its whole gradient as one bucket instead of the sizes.
    The measurement on the deciding process, None elsewhere; ``progress``: a progress bar of the blocks on its
    standard error."""
    P = blocks.ranks
    out = Measurement(backend, base.algorithm.servers, launched=blocks.launched, ranks=P)  # where blocks decide
    ddp = ddp_rounds(backend, base.workload.model)
    variants: list[dict[str, Any]]
    if ddp:  # DDP's buckets of the model itself, and its whole gradient as one bucket (the table's two sizes)
        variants = [{"workload.buckets": b} for b in dict.fromkeys([base.workload.buckets, 1])]
    else:
        variants = [{"workload.model": "none", "workload.params": max(n // 4, 1), "workload.buckets": 1} for n in sizes]
    out.covered = covering(base, names, P, block)
    names = [name for name in names if name not in out.covered]
    bar = tqdm(
        total=len(names) * len(variants) * max_blocks,
        desc=f"calibrate: rounds at {P} ranks",
        unit="block",
        disable=not (blocks.deciding and progress),
        leave=False,
    )
    with bar, tempfile.TemporaryDirectory(prefix="stragglerlab-calibrate-") as tmp:
        root = Path(blocks.agree(tmp if blocks.deciding else None))
        for name in names:
            for v, variant in enumerate(variants):
                scenario = block_scenario(base, name, P, block, {**variant, **(BALANCED if balanced else {})})
                ranks = kind_ranks(scenario)
                figures: dict[tuple[str, int], Figure] = {}
                iterations: list[float] = []  # each block's mean iteration time
                floor = 0.0  # FLOOR of their mean
                for b in range(max_blocks):
                    bar.set_postfix_str(f"{name}, {variant.get('workload.params', 0) * 4 or 'DDP'} B", refresh=False)
                    run = blocks.run(scenario.replace(seed=scenario.seed + b), root / f"{name}-{v}-{b}", backend)
                    bar.update()
                    done, rounds = True, 0
                    if run is not None:
                        times, gaps, exchanged = block_times(run, ddp, ranks)
                        out.gap.add(gaps)
                        iterations.append(iteration_time(run))
                        for key, values in times.items():
                            figures.setdefault(key, Figure()).add(values)
                            rounds += len(values)
                        floor = FLOOR * float(np.mean(iterations))
                        done = bool(figures) and settled(figures, tolerance, floor) and b + 1 >= blocks.least
                    done, rounds = blocks.agree((done, rounds))
                    if done:
                        bar.update(max_blocks - b - 1)
                        break
                    if rounds < block // 2 and scenario.iterations < MAX_ITERATIONS:  # rounds are rarer than calls
                        more = min(scenario.iterations * -(-block // max(rounds, 1)), MAX_ITERATIONS)
                        scenario = scenario.replace(iterations=more)
                if blocks.deciding:
                    if not settled(figures, tolerance, floor):
                        out.unstable.append((name, exchanged))
                    out.scenarios[(name, exchanged)] = to_dict(scenario)
                    for (kind, ranks_), figure in figures.items():
                        out.rounds[(name, kind, ranks_, exchanged)] = figure
    return out if blocks.deciding else None


def settled(figures: dict[tuple[str, int], Figure], tolerance: float, floor: float = 0.0) -> bool:
    """Whether every figure of one (algorithm, size) is stable: the one of the most rounds to ``tolerance``, one of r
    times fewer rounds to √r times it, a figure shorter than ``floor`` seconds (:data:`FLOOR` of the blocks' mean
    iteration) as if it took ``floor``. **(choice)** Over the same blocks, a kind with r times fewer rounds (WAGMA's
    global average every 8th round) has a standard error √r times as large, so held to the same tolerance it keeps
    every block of the others running to the cap; its error weighs 1/r as much in a simulated iteration, so at √r
    times the tolerance it still moves the simulated time less than the most frequent kind's error does.
    **(choice)** The floor: a round of a hundredth of an iteration whose mean is 5 % off moves the simulated iteration
    by 0.05 %, while such short rounds are the ones whose stalls of milliseconds keep their blocks' means apart, so
    held to their own mean they ran every block to the cap (15 of 30 figures of a 2- and 3-rank calibration under
    30 ms of compute) and decided how long a calibration took."""
    most = max(len(f.samples) for f in figures.values())
    return all(f.stable(tolerance * math.sqrt(most / max(len(f.samples), 1)), floor) for f in figures.values())


def covering(base: Scenario, names: Sequence[str], P: int, block: int) -> dict[str, list[str]]:
    """The algorithms of ``names`` not worth running over ``P`` ranks, each with the others whose rounds it has: every
    round kind of it (at the rank count the simulator prices it at) another of ``names`` has more often per iteration.
    **(choice)** The table holds a row per kind, not per algorithm, so such an algorithm's blocks would only add rounds
    to rows measured to the same stopping rule anyway, and rare rounds make its blocks the longest (local SGD's one
    round per ``period`` iterations took 5 minutes for two sizes where sync took one minute for five). Algorithms with
    the same kinds as often (eager-solo and quorum, the gossip ones) all run, as they pool their rounds in the same
    rows; a server's pushes, which no recorded kind names, are always measured."""
    kinds = {}
    for name in names:
        scenario = block_scenario(base, name, P, block, {})
        rates = round_rates(scenario)
        kinds[name] = {(kind, ranks): rates.get(kind, 0.0) for (kind, _), ranks in kind_ranks(scenario).items()}

    def more_often(other: str, name: str) -> list[tuple[str, int]]:
        return [k for k, rate in kinds[name].items() if kinds[other].get(k, 0.0) > rate]

    # the algorithm with a kind most often is never left out, so each kind left out is measured by one that runs
    left = [n for n in names if kinds[n] and set(kinds[n]) <= {k for o in names for k in more_often(o, n)}]
    return {n: [o for o in names if o not in left and more_often(o, n)] for n in left}


def round_rates(scenario: Scenario) -> dict[str, float]:
    """Rounds of each kind per iteration in a simulation of ``scenario`` (timing-only, at least 64 iterations)."""
    found: dict[str, set[int]] = {}

    def count(block: Any) -> None:
        for kind, r in zip(block["kind"], block["round"], strict=True):
            found.setdefault(str(kind), set()).add(int(r))

    iterations = max(scenario.iterations, 64)
    run_engine(plan(scenario.replace(iterations=iterations, engine="reference")), "reference", lambda _: None, count)
    return {kind: len(rounds) / iterations for kind, rounds in found.items()}


def block_scenario(base: Scenario, name: str, P: int, iterations: int, keys: dict[str, Any]) -> Scenario:
    """The scenario of a calibration block of algorithm ``name`` over ``P`` ranks: ``base``'s, with ``keys`` (the
    block's size or buckets, its load) and no update gap (the blocks measure it); a group size or quorum beyond P is
    P."""
    per_node = min(base.cluster.workers_per_node, P)
    tb = testbed.active()
    return base.replace(
        **{
            "algorithm.name": name,
            "cluster.workers": P,
            "cluster.workers_per_node": per_node,
            **(testbed.layout(tb, P, per_node) if tb else {}),
            "algorithm.group_size": min(base.algorithm.group_size, P),
            "algorithm.quorum": min(base.algorithm.quorum, P),
            "iterations": iterations,
            **keys,
            "workload.update": 0.0,
        }
    )


def spread(samples: Sequence[float]) -> Spread:
    """How single rounds vary about their mean, as the :class:`~stragglerlab.simulator.imbalance.Spread` the
    simulation draws each exchange's factor from. Under load the rounds are a tight bulk, a long right tail and rare
    stalls of milliseconds (a rank that lost its core), which no single lognormal fits: one as wide as the stalls puts
    most of the bulk far below where it was measured, and one as wide as the bulk's quartiles has no tail, so that the
    bulk's mean, which the tail raises, sets it above the rounds' median. A *stall* is a round beyond Tukey's fence of
    the rounds' logarithms, ln q75 + 1.5 (ln q75 − ln q25), a tail round or a true stall alike. ``stalls`` is their
    fraction, ``stall`` how far their mean lies above the others' mean, relative to the mean of all; the others'
    ``cv`` is the lognormal's whose interquartile range is theirs (σ = ln(q75 / q25) / 1.349). **(choice)** Quartiles,
    not the standard deviation, for the bulk: the few largest rounds left in it would set the spread of all.
    **(choice)** Tukey's fence, not the far-out one (3 interquartile ranges, at least twice q75), which left the tail
    in the bulk (docs/realrun.md has what each did on real rounds). The cv is at most the bound a scenario's cv has
    (:data:`~stragglerlab.simulator.bounds.MAX_CV`): rounds of two modes far apart give quartiles without a bulk."""
    x = np.asarray(samples, dtype=float)
    if len(x) < 4 or x.min() <= 0:
        return Spread()
    logs = np.log(x)
    q25, q75 = np.percentile(logs, [25, 75])
    stalled = logs > q75 + STALL_FENCE * (q75 - q25)
    bulk = x[~stalled]
    cv = min(lognormal_cv(quartile_sigma(*np.percentile(bulk, [25, 75]))), MAX_CV)
    if not stalled.any():
        return Spread(cv)
    return Spread(cv, float(stalled.mean()), float((x[stalled].mean() - bulk.mean()) / x.mean()))


def table_rows(measured: Sequence[Measurement]) -> list[Row]:
    """The cost table: one row per (kind, ranks, job's ranks, bytes), the mean over the algorithms that measured it
    and the spread of their single rounds (:func:`spread`); the sync rounds over all of a measurement's ranks once more
    as ``allreduce``, which serves a kind the table has no rows of at that rank count. **(choice)** The job's rank
    count is part of a row: WAGMA's groups reduce side by side, and a group of 2 beside another rank (a 3-rank job)
    took 1.8 times what it took alone (a 2-rank job), so pooling them priced both as neither. **(choice)** Push rows
    have no spread: a push's round is its turn in the server's queue, which the simulation's server queues itself, and
    the way to a server on the worker's own node or on another, two modes 300 times apart at 2 ranks; their spread,
    drawn again for every push, priced 8-node pushes from milliseconds to seconds (docs/validation.md)."""
    pooled: dict[tuple[str, int, int, float], list[float]] = {}
    for m in measured:
        for (_, kind, ranks, nbytes), figure in m.rounds.items():
            pooled.setdefault((kind, ranks, m.ranks, nbytes), []).extend(figure.samples)
    rows = [(*key, float(np.mean(v)), Spread() if key[0] == PUSH else spread(v)) for key, v in sorted(pooled.items())]
    return rows + [(ANY_KIND, *row[1:]) for row in rows if row[0] == "sync" and row[1] == row[2]]


def write_table(path: Path, rows: list[Row]) -> None:
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow((*COLUMNS, *SPREAD, WORLD))
        writer.writerows(
            (kind, ranks, nbytes, f"{seconds:.6e}", f"{s.cv:.4f}", f"{s.stalls:.4f}", f"{s.stall * seconds:.6e}", world)
            for kind, ranks, world, nbytes, seconds, s in rows
        )


def notes(m: Measurement, tolerance: float) -> list[str]:
    """The fragment's comments on one measurement: every figure with its spread, the update gap, instability."""
    lines = [
        f"collectives over {m.ranks} ranks through the harness (--backend {m.backend}), blocks"
        f"{' (each a launch of its own)' if m.launched else ''} until the last {STABLE_BLOCKS} medians move "
        f"< {tolerance:.0%} and the mean's standard error over the blocks is <= {tolerance:.0%}: mean ± standard "
        f"error, median [25th, 75th percentile] of single rounds"
    ]
    for (name, kind, ranks, nbytes), figure in sorted(m.rounds.items()):
        lo, hi = figure.spread()
        stalls = spread(figure.samples).stalls
        lines.append(
            f"  {name} {kind} {over(ranks, m.ranks)}, {nbytes:.10g} B: {figure.mean * 1e3:.3f} "
            f"± {figure.standard_error() * 1e3:.3f} ms, "
            f"{figure.median * 1e3:.3f} ms "
            f"[{lo * 1e3:.3f}, {hi * 1e3:.3f}] ({len(figure.samples)} rounds, {len(figure.medians)} blocks"
            f"{f', {stalls:.0%} stalled' if stalls else ''})"
        )
    for name, others in m.covered.items():
        lines.append(f"  {name}: not run, its rounds over {m.ranks} ranks are those of {', '.join(others)}")
    lo, hi = m.gap.spread()
    lines.append(
        f"update gap (round end to next compute): {m.gap.median * 1e3:.3f} ms [{lo * 1e3:.3f}, {hi * 1e3:.3f}]"
    )
    return lines + [f"UNSTABLE after the cap: {name} at {nbytes:.10g} B" for name, nbytes in m.unstable]


def server_gamma(measured: Sequence[Measurement], network: dict[str, Any]) -> float | None:
    """``algorithm.server_gamma`` from the measured push rounds (None without any). A push round is its worker's wait
    from the push to the reply: the push's way, its turn behind the other workers' pushes at the server, its service
    and the reply, and the turn is no smaller a share of it than the service where the server is busy. So each
    measured (ranks, size) is simulated again, its blocks' scenario under ``network`` (the fitted model's keys, no
    table), and its server_gamma is the one at which the simulated push rounds, taken as :func:`block_times` takes
    the measured ones, last as long on average (bisection to 1 %; 0 where the model's push alone is as long); the
    median over the figures."""
    found = []
    for m in measured:
        for (name, kind, _, nbytes), figure in m.rounds.items():
            if kind == PUSH:
                stored = from_dict(m.scenarios[(name, nbytes)])
                keys = {f"network.{k}": v for k, v in network.items()}
                blocks = stored.replace(**keys, **{"network.table": None, "engine": "reference"})
                found.append(_gamma_for(blocks.replace(iterations=blocks.iterations * len(figure.blocks)), figure.mean))
    return float(np.median(found)) if found else None


def _gamma_for(scenario: Scenario, target: float) -> float:
    """The server_gamma at which ``scenario``'s simulated push rounds take ``target`` seconds on average."""
    if _push_mean(scenario, 0.0) >= target:
        return 0.0
    low, high = 0.0, target * scenario.algorithm.servers / message_bytes(scenario)  # the whole round as service
    while high - low > 0.01 * high:
        middle = (low + high) / 2
        low, high = (middle, high) if _push_mean(scenario, middle) < target else (low, middle)
    return (low + high) / 2


def _push_mean(scenario: Scenario, gamma: float) -> float:
    with tempfile.TemporaryDirectory(prefix="stragglerlab-server-") as tmp:
        run = load_run(simulate(scenario.replace(**{"algorithm.server_gamma": gamma}), Path(tmp) / "run"))
    times = [t for (kind, _), t in block_times(run)[0].items() if kind == PUSH]
    return float(np.mean(np.concatenate(times)))
