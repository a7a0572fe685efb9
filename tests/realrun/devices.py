"""The same real run on a GPU and on the CPU: two ranks of sync training ``torch:cnn`` and a small BatchNorm model
(:func:`tests.simulator.torch_task.batchnorm`), once with ``workload.device = "cpu"`` and once with ``"cuda:0"``,
must evaluate alike, and the GPU run must agree with the replay of its own tables (on the CPU).

Under pytest it is ``tests/realrun/test_training.py``'s GPU test, skipped without CUDA. On a GPU machine without
pytest, from the project's root::

    python3 tests/realrun/devices.py [OUT]

prints every evaluation of both runs and exits 1 when any loss differs by more than the convergence tolerance.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
MODELS = ("torch:cnn", "tests.simulator.torch_task:batchnorm")
DEVICES = ("cpu", "cuda:0")
SCENARIO = """
seed = 2
iterations = 24
[cluster]
workers = 2
[workload]
batch = 32
[imbalance]
kind = "random-delay"
slow = [0, 1]
delay = 0.005
[algorithm]
name = "sync"
lr = 0.05
momentum = 0.9
[evals]
every_iterations = 6
"""
TIMEOUT = 150  # seconds for one run: CUDA starts in each rank


def real_run(out: Path, model: str, device: str, name: str) -> Path:
    """The real run of :data:`SCENARIO` with ``model`` on ``device``, on 2 ranks, into ``out / name``."""
    scenario = out / "devices.toml"
    scenario.write_text(SCENARIO)
    folder = out / name
    sets = ["--set", f"workload.model={model}", "--set", f"workload.device={device}"]
    command = [sys.executable, "-m", "stragglerlab.cli", "run", str(scenario), "--np", "2", *sets, "-o", str(folder)]
    # TF32 off: on recent GPUs cuDNN's convolutions default to it, 10 bits of mantissa where the CPU keeps float32's 23
    env = dict(
        os.environ,
        # the checkout's root after what the environment sets: its tests import, its stragglerlab/ folder (not the
        # package as installed) shadows nothing
        PYTHONPATH=os.pathsep.join(p for p in [os.environ.get("PYTHONPATH", ""), str(ROOT)] if p),
        NVIDIA_TF32_OVERRIDE="0",
    )
    proc = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=TIMEOUT)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{proc.stderr}")
    return folder


def compare_devices(out: Path) -> pd.DataFrame:
    """Per model and evaluation: the CPU run's and the GPU run's loss, their relative difference, and the GPU run's
    difference from the replay of its tables."""
    from stragglerlab.analysis.metrics import model_evals
    from stragglerlab.analysis.runfolder import load_run
    from stragglerlab.realrun.convergence import compare

    rows = []
    for model in MODELS:
        tag = model.replace(":", "-").replace(".", "-")
        cpu, gpu = (load_run(real_run(out, model, d, f"{tag}-{k}-{d.replace(':', '')}")) for k, d in enumerate(DEVICES))
        both = model_evals(cpu).merge(model_evals(gpu), on="iteration", suffixes=("_cpu", "_cuda"))
        both = both.merge(compare(gpu)[["iteration", "loss_error"]], on="iteration")
        rows.append(
            pd.DataFrame(
                {
                    "model": model,
                    "iteration": both["iteration"],
                    "loss_cpu": both["loss_cpu"],
                    "loss_cuda": both["loss_cuda"],
                    "loss_difference": (both["loss_cuda"] / both["loss_cpu"] - 1).abs(),
                    "replay_difference": both["loss_error"],
                }
            )
        )
    return pd.concat(rows, ignore_index=True)


def main(argv: list[str]) -> int:
    from stragglerlab.realrun.convergence import TOLERANCE

    out = Path(argv[0]) if argv else Path(tempfile.mkdtemp(prefix="stragglerlab-devices-"))
    out.mkdir(parents=True, exist_ok=True)
    table = compare_devices(out)
    print(table.to_string(index=False, float_format=lambda v: f"{v:.6g}"))
    worst = table[["loss_difference", "replay_difference"]].max().max()
    print(f"largest relative difference {worst:.2e} (tolerance {TOLERANCE:g}); runs in {out}")
    return 0 if worst <= TOLERANCE else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
