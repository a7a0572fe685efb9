"""Compile the native core (``native/``) into a shared library, cached by what determines the binary.

The cache key hashes the C sources, the compiler flags, ``mpicc -show`` (which names the MPI installation and
its paths) and ``mpicc --version``, so a source edit, another MPI or another compiler gives another library, while
every later use (and every rank of a job) loads the cached one. The compiler is ``$MPICC``, else the ``mpicc`` on
``PATH``, else the one beside the running Python (a pip-installed MPICH in a virtual environment that is not
activated). Compilation writes a temporary file and renames it into place, so ranks that build at once do not
collide.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from stragglerlab import native
from stragglerlab.analysis.errors import UserError

SOURCE_DIR = native.SOURCE_DIR

#: Flags of every build; ``werror`` adds ``-Werror`` (the tests build with it, to keep the sources warning-free).
CFLAGS = ("-std=c11", "-O3", "-Wall", "-Wextra", "-fPIC", "-shared", "-pthread")
LIBRARY_NAME = "libpcoll.so"


def find_mpicc() -> str:
    """The MPI C compiler wrapper to use, or a UserError saying how to get one."""
    chosen = os.environ.get("MPICC")
    if chosen:
        if not shutil.which(chosen):
            raise UserError(f"MPICC={chosen} is not an executable")
        return chosen
    for candidate in (shutil.which("mpicc"), str(Path(sys.executable).parent / "mpicc")):
        if candidate and shutil.which(candidate):
            return candidate
    raise UserError("no MPI C compiler: install one (pip install mpich) or set MPICC to an mpicc")


def cache_root() -> Path:
    """Where built libraries live: ``$STRAGGLERLAB_CACHE`` or ``$XDG_CACHE_HOME/stragglerlab`` (``~/.cache``)."""
    root = os.environ.get("STRAGGLERLAB_CACHE")
    if root:
        return Path(root)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "stragglerlab"


def _sources() -> list[Path]:
    return sorted([*(SOURCE_DIR / "include").glob("*.h"), *(SOURCE_DIR / "src").glob("*.[ch]")])


def _probe(mpicc: str, flag: str) -> str:
    try:
        done = subprocess.run([mpicc, flag], capture_output=True, text=True, timeout=60)
    except OSError as err:
        raise UserError(f"cannot run {mpicc}: {err}") from None
    return done.stdout + done.stderr


def build_key(mpicc: str, flags: tuple[str, ...]) -> str:
    """Hash of everything that determines the library's bytes."""
    digest = hashlib.sha256()
    for path in _sources():
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(" ".join(flags).encode() + b"\0")
    digest.update(_probe(mpicc, "-show").encode() + _probe(mpicc, "--version").encode())
    return digest.hexdigest()[:20]


def build(*, werror: bool = False, force: bool = False) -> Path:
    """Path of the compiled library, compiling it first unless the cache holds it."""
    mpicc = find_mpicc()
    flags = CFLAGS + (("-Werror",) if werror else ())
    target = cache_root() / "native" / build_key(mpicc, flags) / LIBRARY_NAME
    if target.exists() and not force:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(fd)
    sources = [str(p) for p in _sources() if p.suffix == ".c"]
    command = [mpicc, *flags, "-I", str(SOURCE_DIR / "include"), *sources, "-o", tmp]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            message = " | ".join(line for line in (done.stderr or done.stdout).splitlines() if line.strip())
            raise UserError(f"compiling the native core failed: {message}")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target
