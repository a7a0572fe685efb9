"""Stress of the native core beyond 10^5 rounds: ``native/tests/stress.c`` at each rank count, every kind.

    python tests/benchmarks/bench_native_stress.py [--ranks 2 3 4 5 6 7 8 9] [--rounds 100000] [--seed 1]
                                                   [--timeout 3600] [--out FILE]

For each P, ``mpiexec -n P stress ROUNDS SEED``: ROUNDS rounds of each kind (sync, eager-solo, eager-majority, wagma,
quorum) in segments of random options, with random per-rank delays, every result checked exactly (the program's
comment says how: the same result on every rank, each contribution applied exactly once under accumulate and
never twice under drop, the rules of each kind). Ranks may share cores: it checks, it does not time. Prints each
kind's line per P (rounds, seconds, segments, how many reduced by the ring, the share of late posts, the most calls
summed into one contribution, errors) and fails (exit status 1) if any run found an error or did not finish in
``--timeout`` seconds. The CI runs the same program briefly (``tests/native/test_c.py``).
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import time
from pathlib import Path

from stragglerlab.realrun.build import SOURCE_DIR, build, find_mpicc
from stragglerlab.realrun.mpiexec import mpiexec


def program() -> Path:
    """stress.c compiled (beside the cached core, once per version of it) against the core."""
    core, source = build(), SOURCE_DIR / "tests" / "stress.c"
    exe = core.parent / f"stress-{hashlib.sha256(source.read_bytes()).hexdigest()[:12]}"
    if not exe.exists():
        include = ["-I", str(SOURCE_DIR / "include")]
        command = [find_mpicc(), "-std=c11", "-O2", *include, str(source), str(core), "-lm"]
        subprocess.run([*command, f"-Wl,-rpath,{core.parent}", "-o", str(exe)], check=True)
    return exe


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=list(range(2, 10)))
    parser.add_argument("--rounds", type=int, default=100_000, help="rounds of each kind per P (default 100000)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per P (default 3600)")
    parser.add_argument("--out", type=Path, help="also write the lines to this file")
    args = parser.parse_args()
    exe = program()
    lines, failed = [f"# stress.c, {args.rounds} rounds of each kind per P, seed {args.seed}"], False
    for ranks in args.ranks:
        start = time.perf_counter()
        command = [mpiexec(), "-n", str(ranks), str(exe), str(args.rounds), str(args.seed)]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
            ok, text = done.returncode == 0 and "No Errors" in done.stdout, done.stdout + done.stderr
        except subprocess.TimeoutExpired:
            ok, text = False, f"P = {ranks}: did not finish in {args.timeout:.0f} s\n"
        failed |= not ok
        lines += [line for line in text.splitlines() if line.strip()]
        lines.append(f"# P = {ranks}: {time.perf_counter() - start:.0f} s in all, {'passed' if ok else 'FAILED'}")
        print("\n".join(lines[-7:]), flush=True)
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
