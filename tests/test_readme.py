"""Every command of README.md runs as written, in order, in one fresh folder (as a newcomer with a fresh clone would
run them): each ``$`` line of its console blocks through bash, where a command's output shown in the README must be
what it prints, and each Python block. The setup blocks (``bash``: a virtual environment, ``pip install -e .``,
the tests) are what CI itself runs (``.ci/run``).

The commands that start MPI ranks (``run``, ``calibrate``) and the one that reads their output (``validate``) are
marked ``mpi``; on a 2-core machine at a load of about 10 the README's two calibrations took 75 s and 10 minutes, its
real run 20 s and the validation 44 s. The emulated cluster's steps (``testbed``, ``--testbed``) need root, and are
skipped without it; they are marked ``mpi`` with the runs they serve."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```$", re.M | re.S)
STARTS_RANKS = re.compile(r"stragglerlab (run|calibrate|validate) ")
#: the steps that build an emulated cluster or use one: as root only
TESTBED = re.compile(r"stragglerlab testbed |--testbed ")


def steps(page: Path = README) -> list[tuple[str, str, str]]:
    """A page's steps in order: ("command", the command, the output shown) or ("python", the code, "")."""
    out = []
    for language, body in BLOCK.findall(page.read_text()):
        if language == "python":
            out.append(("python", body, ""))
        elif language == "console":
            command, shown, lines = None, [], body.splitlines()
            for line in [*lines, "$ "]:
                if line.startswith("$ "):
                    if command:
                        out.append(("command", command, "\n".join(shown)))
                    command, shown = line[2:], []
                elif command is not None and command.endswith("\\"):
                    command += "\n" + line
                elif line.strip() and not line.lstrip().startswith("#"):
                    shown.append(line)
    return out


STEPS = steps()


def test_the_readme_has_the_steps_a_newcomer_follows():
    commands = [text for kind, text, _ in STEPS if kind == "command"]
    assert len(commands) >= 15 and sum(kind == "python" for kind, _, _ in STEPS) == 2
    # every scenario file a command names is made by a command before it
    made = set()
    for command in commands:
        for name in re.findall(r"(\S+\.toml)\b", command):
            assert name in made or "-o " + name in command, f"{name} is not made before: {command}"
        made |= set(re.findall(r"-o (\S+\.toml)", command))


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fresh")


def _id(step: tuple[str, str, str]) -> str:
    kind, text, _ = step
    return f"{kind}: {' '.join(text.split())[:60]}"


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    "step",
    [
        pytest.param(s, marks=[pytest.mark.mpi] if STARTS_RANKS.search(s[1]) or TESTBED.search(s[1]) else [])
        for s in STEPS
    ],
    ids=[_id(s) for s in STEPS],
)
def test_each_readme_step_runs_as_written(folder, step):
    run_step(folder, step)


def run_step(folder: Path, step: tuple[str, str, str]) -> None:
    """Run one step in ``folder`` as a user would; what the page shows of its output must be what it prints."""
    kind, text, shown = step
    if TESTBED.search(text) and os.geteuid() != 0:
        pytest.skip("an emulated cluster needs root")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    if kind == "python":
        done = subprocess.run([sys.executable, "-c", text], cwd=folder, env=env, capture_output=True, text=True)
    else:
        done = subprocess.run(["bash", "-c", text], cwd=folder, env=env, capture_output=True, text=True)
    assert done.returncode == 0, f"{text}\n{done.stderr[-3000:]}"
    if shown:
        assert done.stdout.rstrip("\n") == shown, done.stdout
