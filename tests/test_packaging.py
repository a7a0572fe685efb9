"""What ``pip install .`` puts into site-packages: one top-level package, ``stragglerlab``, holding every plane."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: folder of the repository -> where it is installed
PLANES = {
    "stragglerlab": "stragglerlab",
    "simulator": "stragglerlab/simulator",
    "analysis": "stragglerlab/analysis",
    "realrun": "stragglerlab/realrun",
    "native": "stragglerlab/native",
}


def test_the_wheel_installs_one_top_level_package_with_every_module(tmp_path):
    source = tmp_path / "source"  # building writes into the project's folder: build a copy
    for name in (*PLANES, "pyproject.toml", "README.md"):
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
        else:
            shutil.copy(ROOT / name, source / name)
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path)]
    built = subprocess.run([*command, str(source)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("stragglerlab-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    top = {name.split("/")[0] for name in names}
    assert top == {"stragglerlab", next(t for t in top if t.endswith(".dist-info"))}, top
    # every module and data file of the source tree is in the wheel, under the one namespace
    for folder, installed in PLANES.items():
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in (".py", ".toml", ".c", ".h") and "__pycache__" not in path.parts:
                assert f"{installed}/{path.relative_to(ROOT / folder).as_posix()}" in names, path
    assert "stragglerlab/py.typed" in names
