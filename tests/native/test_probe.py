"""The probe of docs/semantics.md on the native core, at P = 1..5 with random per-rank delays and 1,000 rounds per run.

Each rank's results say which call of which rank went into which round; the checks replay the rules: every rank
gets the same result for every round (wagma: every member of the group), solo and majority rounds hold exactly
what the rules allow, sync and periodic sync rounds hold every rank fresh, accumulate applies each gradient in
exactly one round and drop applies late ones in none, wagma sums stay inside the butterfly group, staleness
stays below sync_period, and a quorum round holds at least k fresh ranks, all of them once k = P, and completes
nowhere before the k-th post of its call.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from stragglerlab.realrun.collectives import ROUND_COLUMNS

ROUNDS = 1000
SIZES = [1, 2, 3, 4, 5]

CONFIGS = {
    "sync": dict(kind="sync"),
    "solo-accumulate": dict(kind="eager-solo", sync_period=10, late="accumulate", divide_by="workers"),
    "solo-drop-ring": dict(kind="eager-solo", sync_period=0, late="drop", divide_by="contributors", ring_min_bytes=1),
    "majority-ring": dict(
        kind="eager-majority", sync_period=7, late="accumulate", divide_by="contributors", seed=3, ring_min_bytes=1
    ),
    "wagma-2": dict(kind="wagma", sync_period=8, group_size=2),
    "wagma-3-ring": dict(kind="wagma", sync_period=5, group_size=3, ring_min_bytes=1),
}


def quorum_config(size: int, k: int) -> dict:
    """quorum with k, its other options varied with k: late, divisor, periodic sync, the ring."""
    drop = k % 2 == 0
    return dict(
        kind="quorum",
        quorum=k,
        sync_period=0 if drop else 6,
        late="drop" if drop else "accumulate",
        divide_by="contributors" if drop else "workers",
        ring_min_bytes=1 if k == size else 0,
    )


#: (P, k) for k = 1, ceil(P/2), P - 1 and P, each once
QUORUM_CASES = sorted({(p, k) for p in SIZES for k in (1, (p + 1) // 2, p - 1, p) if k >= 1})


def splitmix_initiator(seed: int, n: int, size: int) -> int:
    """init(n) of eager-majority, written independently of the C code."""
    mask = 2**64 - 1
    z = (seed + (n + 1) * 0x9E3779B97F4A7C15) & mask
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
    return (z ^ (z >> 31)) % size


def wagma_group(rank: int, n: int, size: int, group_size: int) -> list[int]:
    """Members of rank's butterfly group in round n (base-group_size digits, phase n mod digits of P - 1)."""
    phases, rest = 1, size - 1
    while group_size > 1 and rest >= group_size:
        rest //= group_size
        phases += 1
    if group_size < 2:
        return [rank]
    base = group_size ** (n % phases)
    digit = rank // base % group_size
    return [j for j in range(rank - digit * base, size, base)[:group_size]]


def is_sync(config: dict, n: int) -> bool:
    k = config.get("sync_period", 0)
    return config["kind"] == "sync" or (k > 0 and n % k == k - 1)


def load(folder: Path, size: int, color: int = 0) -> list[dict]:
    return [dict(np.load(folder / str(color) / f"rank{r}.npz")) for r in range(size)]


def integer_sums(res: dict, size: int, config: dict) -> np.ndarray:
    """Undo the division: the exact integer sums of the probe slots, rounds x 2P."""
    if config["kind"] == "wagma":
        divisor = np.ones(len(res["out"]))
    elif config.get("divide_by") == "contributors":
        divisor = np.maximum(res["gradients"], 1).astype(float)
    else:
        divisor = np.full(len(res["out"]), float(size))
    sums = res["out"].astype(np.float64) * divisor[:, None]
    exact = np.rint(sums)
    assert np.abs(sums - exact).max() < 1e-2
    return exact.astype(np.int64)


def check_eager(results: list[dict], size: int, config: dict) -> None:
    first = results[0]
    for res in results[1:]:
        assert np.array_equal(res["out"], first["out"]), "ranks disagree on a round's result"
        for name in ("contributors", "gradients", "mask"):
            assert np.array_equal(res[name], first[name]), name
    sums = integer_sums(first, size, config)
    values, counts = sums[:, :size], sums[:, size:]
    assert (counts >= 0).all() and (values >= 0).all()
    assert np.array_equal(first["mask"], counts > 0)
    assert np.array_equal(first["gradients"], counts.sum(axis=1))
    k, drop = config.get("sync_period", 0), config.get("late") == "drop"
    for j, res in enumerate(results):
        fresh = res["fresh"].astype(bool)
        nxt = 0  # next call of rank j not yet applied: gradients enter rounds in call order
        for n in range(ROUNDS):
            calls = list(range(nxt, nxt + counts[n, j]))
            nxt += counts[n, j]
            assert all(m <= n for m in calls), f"rank {j} round {n}: a call from the future {calls}"
            assert values[n, j] == sum(m + 1 for m in calls), f"rank {j} round {n}: {values[n, j]} vs {calls}"
            assert (n in calls) == fresh[n], f"rank {j} round {n}: fresh flag disagrees with the sum"
            if drop:
                assert calls in ([], [n]), f"rank {j} round {n}: a late gradient was applied: {calls}"
                nxt = n + 1
            if k:
                assert all(n - m < k for m in calls), f"rank {j} round {n}: staleness of {calls} >= {k}"
            if is_sync(config, n):
                assert fresh[n], f"rank {j} not fresh in sync round {n}"
        if not drop:
            # Accumulate: every gradient applied exactly once; at the end only late ones may still be pending.
            assert not fresh[nxt:].any(), f"rank {j}: a fresh gradient went missing"
            assert k == 0 or ROUNDS - nxt < k
    fresh_all = np.array([res["fresh"] for res in results]).astype(bool)
    for n in range(ROUNDS):
        if is_sync(config, n):
            assert first["kind"][n] == "sync" and fresh_all[:, n].all()
        else:
            assert first["kind"][n] == "async"
            assert fresh_all[:, n].any(), f"round {n}: nobody fresh, so nobody activated it"
            if config["kind"] == "eager-majority":
                init = splitmix_initiator(config["seed"], n, size)
                assert fresh_all[init, n], f"round {n}: its initiator {init} is not in it"
                assert first["rounds_initiator"][n] == init
            if config["kind"] == "quorum":
                check_quorum_round(results, n, config["quorum"], fresh_all[:, n])


def check_quorum_round(results: list[dict], n: int, k: int, fresh: np.ndarray) -> None:
    """Round n of quorum k: at least k ranks in it fresh (every counted post is in its round), all of them when
    k = P; its initiator one of them; and no rank had it back before k ranks had posted call n."""
    first = results[0]
    assert fresh.sum() >= k and first["rounds_fresh"][n] == fresh.sum(), f"round {n}: {fresh.sum()} fresh, k = {k}"
    assert fresh[first["rounds_initiator"][n]], f"round {n}: its initiator is not fresh"
    kth_post = np.sort([res["posted"][n] for res in results])[k - 1]
    assert min(res["returned"][n] for res in results) > kth_post, f"round {n} completed before {k} posts"


def check_wagma(results: list[dict], size: int, config: dict) -> None:
    k, s = config["sync_period"], config["group_size"]
    sums = [integer_sums(res, size, config) for res in results]
    for n in range(ROUNDS):
        sync = is_sync(config, n)
        for j, res in enumerate(results):
            group = list(range(size)) if sync else wagma_group(j, n, size, s)
            values, counts = sums[j][n, :size], sums[j][n, size:]
            outside = [i for i in range(size) if i not in group]
            assert not values[outside].any() and not counts[outside].any(), f"round {n}: sum left the group"
            for i in group:
                assert np.array_equal(results[i]["out"][n], res["out"][n]), f"round {n}: group disagrees"
                assert counts[i] == (values[i] > 0)
                assert values[i] <= n + 1
                assert (values[i] == n + 1) == bool(results[i]["fresh"][n]), f"round {n}: rank {i} fresh flag"
                if k and n >= k:
                    assert n + 1 - values[i] < k, f"round {n}: rank {i} staleness {n + 1 - values[i]}"
            assert res["kind"][n] == ("average" if sync else "group")
            assert res["group"][n] == -1 if sync else res["group"][n] >= 0
            if sync:
                assert (values == n + 1).all(), f"sync round {n} is not all fresh"


@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("name", list(CONFIGS))
def test_probe(mpirun, tmp_path: Path, name: str, size: int) -> None:
    config = CONFIGS[name]
    args = [f"--{key.replace('_', '-')}={value}" for key, value in config.items()]
    mpirun(size, "probe_worker.py", str(tmp_path), f"--rounds={ROUNDS}", *args, timeout=100)
    check_probe(load(tmp_path, size), size, config)


@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize(("size", "k"), QUORUM_CASES)
def test_probe_quorum(mpirun, tmp_path: Path, size: int, k: int) -> None:
    config = quorum_config(size, k)
    args = [f"--{key.replace('_', '-')}={value}" for key, value in config.items()]
    mpirun(size, "probe_worker.py", str(tmp_path), f"--rounds={ROUNDS}", *args, timeout=100)
    check_probe(load(tmp_path, size), size, config)


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_probe_on_split_communicators(mpirun, tmp_path: Path) -> None:
    """Two collectives at once, on the halves of a split COMM_WORLD (sizes 3 and 2): each is checked on its own."""
    config = CONFIGS["solo-accumulate"]
    args = [f"--{key.replace('_', '-')}={value}" for key, value in config.items()]
    mpirun(5, "probe_worker.py", str(tmp_path), f"--rounds={ROUNDS}", "--split=2", *args, timeout=100)
    for color, size in ((0, 3), (1, 2)):
        check_probe(load(tmp_path, size, color), size, config)


def check_probe(results: list[dict], size: int, config: dict) -> None:
    for res in results:
        assert np.array_equal(res["round"], np.arange(ROUNDS)), "waits must return rounds 0, 1, 2, ... once each"
        assert len(res["rounds_round"]) >= ROUNDS
        assert np.array_equal(res["rounds_round"][:ROUNDS], np.arange(ROUNDS))
        # the triggers a rank reads are its records' (a wait's own round's record is there when it returns)
        assert np.array_equal(res["triggers"], res["rounds_t_trigger"])
        assert (res["records"] >= np.arange(1, ROUNDS + 1)).all() and (np.diff(res["records"]) >= 0).all()
    for column in ("round", "kind", "initiator", "contributors", "fresh", "group"):
        if config["kind"] != "wagma" or column in ("round", "kind"):
            assert all(np.array_equal(r[f"rounds_{column}"], results[0][f"rounds_{column}"]) for r in results)
    assert all(f"rounds_{c}" in results[0] for c in ROUND_COLUMNS)
    (check_wagma if config["kind"] == "wagma" else check_eager)(results, size, config)


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_straggler_does_not_hold_back_solo(mpirun, tmp_path: Path) -> None:
    """Rank 0 sleeps 200 ms before every post; under eager-solo the others' mean wait stays well below it (under sync
    it would be all of it). The bound leaves room for a loaded machine's scheduling, which can hold a ready rank off
    a core for tens of milliseconds; the benchmark measures the wait itself."""
    delay = 0.2
    mpirun(
        3,
        "probe_worker.py",
        str(tmp_path),
        "--rounds=20",
        "--kind=eager-solo",
        f"--straggler-delay={delay}",
        "--max-delay=0.002",
        timeout=50,
    )
    results = load(tmp_path, 3)
    for res in results[1:]:
        assert res["wait"].mean() < 0.5 * delay, f"fast rank waited {res['wait'].mean() * 1e3:.1f} ms on average"
    assert results[0]["fresh"].sum() < 20, "the straggler was fresh in every round: the others waited for it"
    # the straggler's core completed rounds the others started while it slept: their records are there before its
    # waits take their results
    assert (results[0]["records"] > np.arange(1, 21)).any()


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_a_rank_waiting_for_a_straggler_in_a_synchronous_round_rests(mpirun, tmp_path: Path) -> None:
    """Rank 0 sleeps 200 ms before every post of a synchronous round. The others, their round in flight, have nothing
    to move until it comes: they sleep between polls and use a small share of a core (all their threads together),
    where yielding between polls would use all of one and, with ranks outnumbering cores, slow the round once the
    straggler comes. A loaded machine gives a poller less of a core, never more."""
    delay = 0.2
    mpirun(3, "probe_worker.py", str(tmp_path), "--rounds=5", "--kind=sync", f"--straggler-delay={delay}",
           "--max-delay=0", timeout=50)  # fmt: skip
    for res in load(tmp_path, 3)[1:]:
        waited, used = res["wait"][1:].sum(), res["cpu"][1:].sum()  # the first round: start-up
        assert waited > 0.5 * 4 * delay, "the fast ranks did not wait for the straggler"
        assert used < 0.4 * waited, f"a waiting rank used {used / waited:.0%} of a core"


@pytest.mark.mpi
@pytest.mark.timeout(60)
@pytest.mark.parametrize("size", [1, 2])
def test_misuse_raises(mpirun, size: int) -> None:
    assert mpirun(size, "misuse_worker.py", timeout=50).stdout.count("ok") == size
