"""What ``pip install .`` puts into site-packages (one top-level package, ``stragglerlab``, holding every plane), and
that installing, as a wheel or editable, prints no setuptools warning."""

from __future__ import annotations

import re
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
#: what a build reads besides the planes
BUILD_FILES = ("build_backend", "pyproject.toml", "README.md", "MANIFEST.in")
#: a warning raised by the build backend, as pip shows it (BuildBackendWarning, SetuptoolsDeprecationWarning, ...);
#: pip's own notes are "WARNING:" (this machine's pip configuration names index folders that do not exist)
BACKEND_WARNING = re.compile(r"[a-z]Warning\b")


def source_copy(tmp_path: Path) -> Path:
    """The files a build reads, copied (building writes into the project's folder)."""
    source = tmp_path / "source"
    for name in (*PLANES, *BUILD_FILES):
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
        else:
            shutil.copy(ROOT / name, source / name)
    return source


def pip(*args: str) -> str:
    """Run pip without dependencies or build isolation (the test's environment has setuptools); its output."""
    command = [sys.executable, "-m", "pip", *args[:1], "--no-deps", "--no-build-isolation", *args[1:]]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout + done.stderr


def test_the_wheel_installs_one_top_level_package_with_every_module(tmp_path):
    output = pip("wheel", "-w", str(tmp_path), str(source_copy(tmp_path)))
    assert not BACKEND_WARNING.search(output), output
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


def test_an_editable_install_prints_no_setuptools_warning(tmp_path):
    # into a folder of its own (--target), so the environment running the tests keeps its own install
    output = pip("install", "--target", str(tmp_path / "target"), "-e", str(source_copy(tmp_path)))
    assert "Successfully installed stragglerlab" in output
    assert not BACKEND_WARNING.search(output), output
