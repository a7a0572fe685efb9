"""Every plot kind renders from simulated runs (curves and validation from hand-made evals and a hand-made real
run) to PNG and PDF, with the expected number of series."""

import pytest
from matplotlib.container import BarContainer, ErrorbarContainer

from stragglerlab.analysis.collection import load_runs
from stragglerlab.analysis.errors import UserError
from stragglerlab.analysis.plots import Options, draw, save
from stragglerlab.analysis.runfolder import RunWriter, load_run
from stragglerlab.cli import main
from stragglerlab.simulator.run import simulate
from tests.analysis.handmade import write_run
from tests.helpers import scenario

ALGORITHMS = ("sync", "eager-solo", "wagma")
MAGIC = {".png": b"\x89PNG\r\n\x1a\n", ".pdf": b"%PDF"}


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    """3 algorithms x 2 worker counts x 2 seeds, under random delays: 12 small runs."""
    root = tmp_path_factory.mktemp("sim")
    for algorithm in ALGORITHMS:
        for workers in (4, 8):
            for seed in (0, 1):
                simulate(
                    scenario(
                        **{
                            "algorithm.name": algorithm,
                            "cluster.workers": workers,
                            "seed": seed,
                            "iterations": 20,
                            "imbalance.kind": "random-delay",
                            "algorithm.group_size": 2,
                        }
                    ),
                    root / f"{algorithm}-{workers}-{seed}",
                )
    return root


def rendered(fig, folder, name):
    """Save ``fig`` as PNG and PDF and check both are non-empty images of their format."""
    for suffix, magic in MAGIC.items():
        path = save(fig, folder / f"{name}{suffix}")
        data = path.read_bytes()
        assert len(data) > 2000 and data.startswith(magic)
    return fig


def containers(ax, kind):
    return [c for c in ax.containers if isinstance(c, kind)]


def test_throughput_one_series_per_algorithm_against_the_varying_key(sim, tmp_path):
    fig = rendered(draw("throughput", load_runs([sim])), tmp_path, "throughput")
    ax = fig.axes[0]
    assert len(containers(ax, ErrorbarContainer)) == 3 and ax.get_xlabel() == "workers"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == list(ALGORITHMS)


def test_throughput_bars_when_nothing_varies(sim, tmp_path):
    fig = rendered(draw("throughput", load_runs([sim / "sync-4-0", sim / "wagma-4-0"])), tmp_path, "bars")
    assert len(containers(fig.axes[0], BarContainer)) == 1 and len(fig.axes[0].patches) == 2


def test_staleness_one_bar_series_per_algorithm(sim, tmp_path):
    fig = rendered(draw("staleness", load_runs([sim])), tmp_path, "staleness")
    assert len(containers(fig.axes[0], BarContainer)) == 3


def test_scaling_log_axes_and_lower_bound(sim, tmp_path):
    fig = rendered(draw("scaling", load_runs([sim])), tmp_path, "scaling")
    ax = fig.axes[0]
    assert len(containers(ax, ErrorbarContainer)) == 3
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "compute + lower bound" in labels and len(labels) == 5


def test_timeline_three_phases_per_panel(sim, tmp_path):
    runs = load_runs([sim / "sync-8-0", sim / "eager-solo-8-0"])
    fig = rendered(draw("timeline", runs, Options(workers=6)), tmp_path, "timeline")
    assert len(fig.axes) == 2
    for ax in fig.axes:
        bars = containers(ax, BarContainer)
        assert len(bars) == 3 and {len(b) for b in bars} == {len(bars[0])}
        assert len(ax.collections) == 1  # the rounds marked
    assert max(p.get_y() + p.get_height() for p in fig.axes[0].patches) < 6  # workers 0..5


def test_timeline_sync_communicates_after_the_last_post(sim):
    from stragglerlab.analysis.plots.timeline import phases

    run = load_run(sim / "sync-8-0")
    ph = phases(run)
    assert (ph["communication"] > 0).all() and (ph["wait"] >= 0).all()
    assert ph[["compute", "wait", "communication"]].sum(axis=1).to_numpy() == pytest.approx(
        (run.iterations["t_done"] - run.iterations["t_start"]).to_numpy()
    )


def test_contributions_map_rounds_by_workers(sim, tmp_path):
    runs = load_runs([sim / "eager-solo-4-0"])
    fig = rendered(draw("contributions", runs, Options(window=(0, 10))), tmp_path, "contributions")
    image = fig.axes[0].images[0].get_array()
    assert image.shape == (4, 10) and set(image.ravel().tolist()) <= {0, 1, 2}
    assert len(fig.axes[0].get_legend().get_texts()) == 3
    sync = draw("contributions", load_runs([sim / "sync-4-0"]))
    assert (sync.axes[0].images[0].get_array() == 2).all()  # every contribution fresh


def test_curves_one_line_per_run_and_a_clear_error_without_evals(sim, tmp_path):
    for algorithm in ("sync", "eager-solo"):
        for seed in (0, 1):
            write_run(
                tmp_path / "runs" / f"{algorithm}-{seed}",
                [(0, 0, 0.0, 1.0, 1.0, 1.0, 0.0, 0, 0, 0, True)],
                algorithm=algorithm,
                seed=seed,
                evals=[(t, 10 * t, -1, 1 / (1 + t + seed), 0.1 * t) for t in range(1, 6)],
            )
    fig = rendered(draw("curves", load_runs([tmp_path / "runs"]), Options(axis="iterations")), tmp_path, "curves")
    assert len(fig.axes[0].lines) == 4 and len(fig.axes[0].get_legend().get_texts()) == 2
    with pytest.raises(UserError, match="no evaluations"):
        draw("curves", load_runs([sim]))


def test_validation_against_a_hand_made_real_run(sim, tmp_path):
    runs = []
    for algorithm in ("sync", "eager-solo"):
        sim_run = load_run(sim / f"{algorithm}-4-0")
        meta = {**sim_run.meta, "source": "real"}
        times = ["t_start", "t_post", "t_done", "compute", "wait"]
        measured = sim_run.iterations.assign(**{c: sim_run.iterations[c] * 1.02 for c in times})  # 2 % slower
        with RunWriter(tmp_path / f"real-{algorithm}", meta) as writer:
            writer.add_block("iterations", {c: measured[c].to_numpy() for c in measured.columns})
        runs += [sim_run, load_run(tmp_path / f"real-{algorithm}")]
    fig = rendered(draw("validation", runs), tmp_path, "validation")
    cdf, bars = fig.axes
    assert len(cdf.lines) == 4  # real and simulated per algorithm
    assert len(containers(bars, BarContainer)) == 1 and len(bars.patches) == 2 + 1  # one bar each, the target band
    heights = [b.get_height() for b in containers(bars, BarContainer)[0]]
    assert heights == pytest.approx([100 * (1 / 1.02 - 1)] * 2)  # the simulation is 1/1.02 of the measured time
    with pytest.raises(UserError, match="both sources"):
        draw("validation", load_runs([sim / "sync-4-0"]))


def test_plot_command(sim, tmp_path, capsys):
    out = tmp_path / "fig.svg"
    assert main(["plot", str(sim), "--kind", "staleness", "-o", str(out)]) == 0
    assert out.read_text().lstrip().startswith("<?xml") and "12 runs" in capsys.readouterr().out
    assert main(["plot", str(sim), "--kind", "timeline", "-o", str(tmp_path / "t.png")]) == 2
    assert main(["plot", str(sim / "sync-4-0"), "--kind", "staleness", "-o", str(tmp_path / "f.jpg")]) == 2
    assert main(["plot", str(tmp_path / "nothing"), "--kind", "staleness"]) == 2
    err = capsys.readouterr().err
    assert "at most 4" in err and ".pdf, .png, .svg" in err and "no such run folder" in err


def test_curves_from_simulated_training(tmp_path):
    for algorithm in ("sync", "eager-solo"):
        simulate(
            scenario(
                **{
                    "algorithm.name": algorithm,
                    "workload.model": "hyperplane",
                    "workload.dimension": 12,
                    "workload.samples": 1200,
                    "iterations": 20,
                    "cluster.workers": 4,
                    "imbalance.kind": "random-delay",
                    "evals.every_iterations": 5,
                }
            ),
            tmp_path / algorithm,
        )
    fig = rendered(draw("curves", load_runs([tmp_path]), Options(metric="accuracy")), tmp_path, "training")
    assert len(fig.axes[0].lines) == 2 and fig.axes[0].get_ylabel() == "accuracy"
