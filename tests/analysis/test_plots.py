"""Every plot kind renders to PNG and PDF from a sweep over two keys besides the algorithm (workers and injected
delay, two seeds), picking runs with --where and splitting them with --by; a key that varies unshown is refused;
unfinished runs are marked; curves and validation from a small training sweep and hand-made real runs."""

import pytest
from matplotlib.container import BarContainer, ErrorbarContainer

from stragglerlab.analysis.collection import load_runs, select
from stragglerlab.analysis.errors import UserError
from stragglerlab.analysis.plots import Options, draw, save
from stragglerlab.analysis.plots.timeline import phases
from stragglerlab.analysis.runfolder import RunWriter, load_run
from stragglerlab.cli import main
from stragglerlab.simulator.sweep import cells, sweep
from tests.analysis.handmade import one_iteration, write_run
from tests.helpers import scenario

ALGORITHMS = ("sync", "eager-solo", "wagma")
WORKERS = (4, 64)
DELAYS = (0.1, 0.3)
MAGIC = {".png": b"\x89PNG\r\n\x1a\n", ".pdf": b"%PDF"}


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    """The sweep: 3 algorithms x 2 worker counts x 2 delays x 2 seeds of 20 iterations under random delays."""
    root = tmp_path_factory.mktemp("sweep")
    base = scenario(iterations=20, **{"imbalance.kind": "random-delay", "algorithm.group_size": 2})
    grid = {"algorithm.name": list(ALGORITHMS), "cluster.workers": list(WORKERS), "imbalance.delay": list(DELAYS)}
    sweep(cells(base, grid, seeds=2), root, progress=False)
    return root


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A training sweep: sync and eager-solo x 2 delays, 4 workers, evaluated every 5 iterations."""
    root = tmp_path_factory.mktemp("trained")
    base = scenario(
        iterations=20,
        **{
            "workload.model": "hyperplane",
            "workload.dimension": 12,
            "workload.samples": 1200,
            "cluster.workers": 4,
            "imbalance.kind": "random-delay",
            "evals.every_iterations": 5,
        },
    )
    sweep(
        cells(base, {"algorithm.name": ["sync", "eager-solo"], "imbalance.delay": list(DELAYS)}), root, progress=False
    )
    return root


def where(root, **keys):
    """The runs below ``root`` whose dotted keys (``cluster__workers``) have these values (a tuple: any of them)."""
    chosen = {
        k.replace("__", "."): [str(v) for v in (vs if isinstance(vs, tuple) else (vs,))] for k, vs in keys.items()
    }
    return select(load_runs([root]), chosen)


def rendered(fig, folder, name):
    """Save ``fig`` as PNG and PDF and check both are non-empty images of their format."""
    for suffix, magic in MAGIC.items():
        path = save(fig, folder / f"{name}{suffix}")
        data = path.read_bytes()
        assert len(data) > 2000 and data.startswith(magic)
    return fig


def containers(ax, kind):
    return [c for c in ax.containers if isinstance(c, kind)]


def legend_texts(fig):
    (legend,) = fig.legends
    return [t.get_text() for t in legend.get_texts()]


def tick_texts(axis):
    return [t.get_text() for t in axis.get_majorticklabels()]


def test_a_key_neither_shown_nor_split_is_refused_naming_it(sim):
    runs = load_runs([sim])
    expected = {
        "throughput": r"differ in cluster.workers \(4, 64\), .*--where cluster.workers=VALUE .*--by cluster.workers",
        "staleness": r"differ in cluster.workers \(4, 64\); imbalance.delay \(0.1, 0.3\)",
        "scaling": r"differ in imbalance.delay \(0.1, 0.3\), .*--by imbalance.delay",
    }
    for kind, message in expected.items():
        with pytest.raises(UserError, match=message):
            draw(kind, runs)


def test_throughput_by_a_key_one_panel_per_value_on_a_log_axis(sim, tmp_path):
    fig = rendered(
        draw("throughput", load_runs([sim]), Options(x="cluster.workers", by=("imbalance.delay",))), tmp_path, "t"
    )
    assert [ax.get_title() for ax in fig.axes] == ["injected delay [s] = 0.1", "injected delay [s] = 0.3"]
    for ax in fig.axes:
        assert len(containers(ax, ErrorbarContainer)) == 3 and ax.get_xlabel() == "workers"
        assert ax.get_xscale() == "log" and tick_texts(ax.xaxis) == ["4", "64"]  # 16 times apart: log, plain ticks
    assert sorted(legend_texts(fig)) == sorted(ALGORITHMS)  # one legend, outside the panels
    assert all(ax.get_legend() is None for ax in fig.axes)


def test_throughput_where_a_value_and_the_log_metric(sim, tmp_path):
    runs = where(sim, cluster__workers=4)
    fig = rendered(draw("throughput", runs, Options(log=True)), tmp_path, "t")
    (ax,) = fig.axes
    assert ax.get_xlabel() == "injected delay [s]" and ax.get_xscale() == "linear" and ax.get_yscale() == "log"
    assert all("10^" not in t and "×" not in t for t in tick_texts(ax.yaxis))


def test_throughput_bars_when_nothing_varies(sim, tmp_path):
    runs = where(sim, cluster__workers=4, imbalance__delay=0.1, algorithm__name=("sync", "wagma"))
    fig = rendered(draw("throughput", runs), tmp_path, "bars")
    assert len(containers(fig.axes[0], BarContainer)) == 1 and len(fig.axes[0].patches) == 2


def test_staleness_by_delay_where_workers(sim, tmp_path):
    runs = where(sim, cluster__workers=64)
    fig = rendered(draw("staleness", runs, Options(by=("imbalance.delay",))), tmp_path, "staleness")
    assert len(fig.axes) == 2
    for ax in fig.axes:
        assert len(containers(ax, BarContainer)) == 3
        assert sum(b.get_height() for b in containers(ax, BarContainer)[0]) == pytest.approx(1.0)  # shares of all
    assert sorted(legend_texts(fig)) == sorted(ALGORITHMS)


def test_scaling_by_delay_log_axes_plain_ticks_and_references(sim, tmp_path):
    fig = rendered(draw("scaling", load_runs([sim]), Options(by=("imbalance.delay",))), tmp_path, "scaling")
    assert len(fig.axes) == 2
    for ax in fig.axes:
        assert len(containers(ax, ErrorbarContainer)) == 3
        assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
        assert all("10^" not in t and "×" not in t and "e-" not in t for t in tick_texts(ax.yaxis))
        assert tick_texts(ax.xaxis) == ["4", "64"]
    labels = legend_texts(fig)
    assert "compute + lower bound" in labels and len(labels) == 5
    assert labels[3:] == ["compute + allreduce (model)", "compute + lower bound"]  # the series first


def test_timeline_where_picks_runs_of_a_sweep(sim, tmp_path):
    with pytest.raises(UserError, match="at most 4.*--where"):
        draw("timeline", load_runs([sim]))
    runs = where(sim, cluster__workers=4, imbalance__delay=0.3, seed=0, algorithm__name=("sync", "eager-solo"))
    fig = rendered(draw("timeline", runs, Options(workers=3)), tmp_path, "timeline")
    assert len(fig.axes) == 2
    for ax in fig.axes:
        bars = containers(ax, BarContainer)
        assert len(bars) == 3 and {len(b) for b in bars} == {len(bars[0])}
        assert len(ax.collections) == 1  # the rounds marked
    assert max(p.get_y() + p.get_height() for p in fig.axes[0].patches) < 3  # workers 0..2
    assert legend_texts(fig) == ["compute", "wait", "communication", "round done"]


def test_timeline_sync_communicates_after_the_last_post(sim):
    (run,) = where(sim, cluster__workers=4, imbalance__delay=0.3, seed=0, algorithm__name="sync")
    ph = phases(run)
    assert (ph["communication"] > 0).all() and (ph["wait"] >= 0).all()
    assert ph[["compute", "wait", "communication"]].sum(axis=1).to_numpy() == pytest.approx(
        (run.iterations["t_done"] - run.iterations["t_start"]).to_numpy()
    )


def test_contributions_where_and_a_window_clipped_to_the_rounds_run(sim, tmp_path):
    (solo,) = where(sim, cluster__workers=4, imbalance__delay=0.3, seed=0, algorithm__name="eager-solo")
    fig = rendered(draw("contributions", [solo], Options(window=(0, 10))), tmp_path, "contributions")
    image = fig.axes[0].images[0].get_array()
    assert image.shape == (4, 10) and set(image.ravel().tolist()) <= {0, 1, 2}
    assert len(legend_texts(fig)) == 3
    late = draw("contributions", [solo], Options(window=(15, 100))).axes[0]
    assert late.images[0].get_array().shape == (4, 5) and late.get_xlim() == (14.5, 19.5)  # rounds 15..19 only
    with pytest.raises(UserError, match="no round in the window 30:100"):
        draw("contributions", [solo], Options(window=(30, 100)))
    (sync,) = where(sim, cluster__workers=4, imbalance__delay=0.3, seed=0, algorithm__name="sync")
    assert (draw("contributions", [sync]).axes[0].images[0].get_array() == 2).all()  # every contribution fresh


def test_curves_by_delay_with_a_log_loss(trained, tmp_path):
    runs = load_runs([trained])
    with pytest.raises(UserError, match="imbalance.delay"):
        draw("curves", runs)
    fig = rendered(draw("curves", runs, Options(by=("imbalance.delay",), log=True)), tmp_path, "curves")
    assert len(fig.axes) == 2 and all(len(ax.lines) == 2 and ax.get_yscale() == "log" for ax in fig.axes)
    assert sorted(legend_texts(fig)) == ["eager-solo", "sync"]
    accuracy = draw("curves", where(trained, imbalance__delay=0.1), Options(metric="accuracy", axis="iterations"))
    assert len(accuracy.axes[0].lines) == 2 and accuracy.axes[0].get_ylabel().startswith("test accuracy")


def test_curves_a_clear_error_without_evals(sim):
    with pytest.raises(UserError, match="no evaluations"):
        draw("curves", load_runs([sim]))


def test_validation_against_hand_made_real_runs_where_picked_from_the_sweep(sim, tmp_path):
    runs = []
    for sim_run in where(sim, cluster__workers=4, imbalance__delay=0.3, seed=0, algorithm__name=("sync", "eager-solo")):
        meta = {**sim_run.meta, "source": "real"}
        times = ["t_start", "t_post", "t_done", "compute", "wait"]
        measured = sim_run.iterations.assign(**{c: sim_run.iterations[c] * 1.02 for c in times})  # 2 % slower
        name = sim_run.meta["scenario"]["algorithm"]["name"]
        with RunWriter(tmp_path / f"real-{name}", meta) as writer:
            writer.add_block("iterations", {c: measured[c].to_numpy() for c in measured.columns})
        runs += [sim_run, load_run(tmp_path / f"real-{name}")]
    fig = rendered(draw("validation", runs), tmp_path, "validation")
    cdf, bars = fig.axes
    assert len(cdf.lines) == 4  # real and simulated per algorithm
    assert len(containers(bars, BarContainer)) == 1 and len(bars.patches) == 2 + 2  # one bar each, a band per target
    heights = [b.get_height() for b in containers(bars, BarContainer)[0]]
    assert heights == pytest.approx([100 * (1 / 1.02 - 1)] * 2)  # the simulation is 1/1.02 of the measured time
    with pytest.raises(UserError, match="both sources"):
        draw("validation", runs[:1])


STYLED = {
    "sync": {"colour": "#112233", "marker": "D", "order": 5},
    "eager-solo": {"colour": "#445566", "marker": "v", "order": 1},
}


def styled_runs(folder, styled: bool):
    """Two seeds of three algorithms, 1, 2 and 3 s per iteration; sync and eager-solo carry :data:`STYLED` if
    ``styled``, lsgd never."""
    for seed in (0, 1):
        for seconds, algorithm in enumerate(("sync", "eager-solo", "lsgd"), start=1):
            style = STYLED.get(algorithm) if styled else None
            keys = {"imbalance.delay": 0.1 * (seed + 1)}
            one_iteration(
                folder / f"{algorithm}-{seed}", seconds, algorithm=algorithm, seed=seed, style=style, keys=keys
            )
    return load_runs([folder])


def series_styles(ax):
    return {c.get_label(): (c.lines[0].get_color(), c.lines[0].get_marker()) for c in containers(ax, ErrorbarContainer)}


def test_styles_come_from_the_run_folders(tmp_path):
    """Declared styles give colour, marker and legend order; lsgd, without one, takes the palette's first colour
    and the first marker that no declared style uses, after them."""
    fig = draw("throughput", styled_runs(tmp_path, styled=True))
    assert legend_texts(fig) == ["eager-solo", "sync", "lsgd"]  # by order 1, 5, then the unstyled
    assert series_styles(fig.axes[0]) == {
        "eager-solo": ("#445566", "v"),
        "sync": ("#112233", "D"),
        "lsgd": ("#000000", "o"),
    }


def test_runs_without_a_style_take_the_palette_in_name_order(tmp_path):
    fig = draw("throughput", styled_runs(tmp_path, styled=False))
    assert legend_texts(fig) == ["eager-solo", "lsgd", "sync"]
    assert series_styles(fig.axes[0]) == {
        "eager-solo": ("#000000", "o"),
        "lsgd": ("#E69F00", "s"),
        "sync": ("#56B4E9", "^"),
    }


def test_a_malformed_style_is_a_one_line_error(tmp_path):
    one_iteration(tmp_path / "run", 1.0, style={"colour": "not a colour", "marker": "o", "order": 0})
    with pytest.raises(UserError, match="style must be"):
        draw("throughput", load_runs([tmp_path]))


def test_unfinished_runs_are_marked_and_warned_about(tmp_path, capsys):
    for seed in (0, 1):
        write_run(
            tmp_path / "runs" / f"solo-{seed}",
            [(0, 0, 0.0, 1.0, 1.0, 1.0, 0.0, 0, 0, 0, True)],
            algorithm="eager-solo",
            seed=seed,
            rounds=[(0, "async", 0, 1.0, 1.0, 1, 1, -1)],
            finished=seed == 0,
        )
    one_iteration(tmp_path / "runs" / "sync", 2.0)
    fig = draw("staleness", load_runs([tmp_path / "runs"]))
    assert sorted(legend_texts(fig)) == ["eager-solo (1 of 2 unfinished)", "sync"]
    out = tmp_path / "s.png"
    assert main(["plot", str(tmp_path / "runs"), "--kind", "throughput", "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert out.exists() and "warning: 1 of 3 runs did not finish" in err and "solo-1" in err
    (panel,) = draw("contributions", load_runs([tmp_path / "runs" / "solo-1"]), Options(window=(0, 1))).axes
    assert panel.get_title().endswith("(unfinished)")


def test_plot_command_where_and_by(sim, tmp_path, capsys):
    out = tmp_path / "fig.svg"
    args = ["plot", str(sim), "--kind", "staleness", "--where", "cluster.workers=4", "--by", "imbalance.delay"]
    assert main([*args, "-o", str(out)]) == 0
    assert out.read_text().lstrip().startswith("<?xml") and "12 runs" in capsys.readouterr().out
    assert main(["plot", str(sim), "--kind", "timeline", "-o", str(tmp_path / "t.png")]) == 2
    assert main(["plot", str(sim), "--kind", "timeline", "--by", "seed", "-o", str(tmp_path / "t.png")]) == 2
    assert main(["plot", str(sim), "--kind", "staleness", "--where", "imbalance.slow=[9,9]"]) == 2
    assert main(["plot", str(sim), "--kind", "staleness", "--where", "colour=red"]) == 2
    err = capsys.readouterr().err
    assert "at most 4" in err and "--by: only throughput" in err and "no run has it" in err and "not a key" in err


@pytest.mark.parametrize(
    ("output", "message"),
    [
        ("/proc/nope/x.png", "/proc/nope/x.png: cannot write the figure"),
        ("{tmp}/folder.png", "folder.png: cannot write the figure"),
        ("{tmp}/f.jpg", "the file must end in .pdf, .png, .svg"),
    ],
)
def test_plot_command_a_path_that_cannot_be_written_is_one_line(tmp_path, capsys, output, message):
    one_iteration(tmp_path / "run", 1.0)
    (tmp_path / "folder.png").mkdir()
    output = output.replace("{tmp}", str(tmp_path))
    assert main(["plot", str(tmp_path / "run"), "--kind", "throughput", "-o", output]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize(
    ("meta", "message"),
    [
        ('{"finished": true}', "has no scenario"),
        ("[1, 2]", "holds a JSON list, not a run's object"),
        ('{"scenario": {"algorithm": {"name": "sync"}}}', "the scenario has no cluster.workers, workload.batch"),
    ],
)
def test_plot_command_a_meta_json_without_its_scenario_is_one_line(tmp_path, capsys, meta, message):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "meta.json").write_text(meta)
    assert main(["plot", str(tmp_path / "run"), "--kind", "throughput", "-o", str(tmp_path / "f.png")]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_plot_command_no_such_folder(tmp_path, capsys):
    assert main(["plot", str(tmp_path / "nothing"), "--kind", "staleness"]) == 2
    assert "no such run folder" in capsys.readouterr().err


def test_too_many_runs_for_one_panel_each_hint_at_a_seed_the_runs_have(tmp_path, capsys):
    base = scenario(seed=7, iterations=5, **{"cluster.workers": 2, "algorithm.group_size": 2})
    sweep(cells(base, {"algorithm.name": list(ALGORITHMS)}, seeds=2), tmp_path / "s", progress=False)
    assert main(["plot", str(tmp_path / "s"), "--kind", "timeline", "-o", str(tmp_path / "t.png")]) == 2
    assert "at most 4; got 6 runs: pick some with --where KEY=VALUE (e.g. --where seed=7)" in capsys.readouterr().err
    assert (
        main(["plot", str(tmp_path / "s"), "--kind", "timeline", "--where", "seed=7", "-o", str(tmp_path / "t.png")])
        == 0
    )


def test_curves_end_soon_after_the_last_run_settles_not_on_its_flat_tail():
    import pandas as pd

    from stragglerlab.analysis.plots.curves import SETTLED, settled

    t = pd.Series([0.0, 1.0, 2.0, 3.0, 10.0, 100.0])
    loss = pd.Series([1.0, 0.5, 0.2, 0.1 + SETTLED * 0.9 / 2, 0.1, 0.1])
    assert settled(t, loss) == 3.0  # within 2 % of the way to its last value from t = 3 on
    assert settled(t, pd.Series([0.5] * 6)) == 100.0  # never moved: all of it
