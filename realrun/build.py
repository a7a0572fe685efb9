"""Compile the native core (``native/``) into a shared library, and its Python binding (a small CPython extension,
``native/python/pcollmodule.c``) beside it, cached by what determines the binaries.

The cache key hashes the C sources, the compiler flags, ``mpicc -show`` (which names the MPI installation and
its paths) and ``mpicc --version``, so a source edit, another MPI or another compiler gives another library, while
every later use (and every rank of a job) loads the cached one; the binding's name adds a hash of its source, the
Python headers it was compiled against and the interpreter's extension suffix. The compiler is ``$MPICC``, else the
``mpicc`` on ``PATH``, else the one beside the running Python (a pip-installed MPICH in a virtual environment that
is not activated). Compilation writes a temporary file and renames it into place, so ranks that build at once do
not collide.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from stragglerlab import native
from stragglerlab.analysis.errors import UserError

SOURCE_DIR = native.SOURCE_DIR

#: Flags of every build; ``werror`` adds ``-Werror`` (the tests build with it, to keep the sources warning-free).
CFLAGS = ("-std=c11", "-O3", "-Wall", "-Wextra", "-fPIC", "-shared", "-pthread")
LIBRARY_NAME = "libpcoll.so"
#: The binding's C source: the module ``_pcoll``.
BINDING_SOURCE = SOURCE_DIR / "python" / "pcollmodule.c"


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


def _python_include() -> str:
    """Python's C headers, or a UserError saying how to get them."""
    include = sysconfig.get_paths()["include"]
    if not (Path(include) / "Python.h").exists():
        raise UserError(
            f"the native core's Python binding needs Python's C headers, and {include} has no Python.h: install "
            "them (python3-dev on Debian and Ubuntu; python.org, conda and pyenv Pythons ship them)"
        )
    return include


def binding_path(library: Path) -> Path:
    """Where the binding built beside ``library`` (the core, from :func:`build`) lives for this interpreter."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    digest = hashlib.sha256(BINDING_SOURCE.read_bytes() + sysconfig.get_paths()["include"].encode() + suffix.encode())
    return library.parent / f"_pcoll-{digest.hexdigest()[:12]}{suffix}"


def _compile(command: list[str], target: Path) -> None:
    """Run ``command`` with its output file last, writing a temporary file renamed into place as ``target``."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(fd)
    try:
        done = subprocess.run([*command, tmp], capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            message = " | ".join(line for line in (done.stderr or done.stdout).splitlines() if line.strip())
            raise UserError(f"compiling the native core failed: {message}")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


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
    """Path of the compiled core library, compiling it (and its Python binding beside it, :func:`binding_path`)
    first unless the cache holds them."""
    mpicc = find_mpicc()
    flags = CFLAGS + (("-Werror",) if werror else ())
    target = cache_root() / "native" / build_key(mpicc, flags) / LIBRARY_NAME
    include = ["-I", str(SOURCE_DIR / "include")]
    if force or not target.exists():
        sources = [str(p) for p in _sources() if p.suffix == ".c"]
        _compile([mpicc, *flags, *include, *sources, "-o"], target)
    binding = binding_path(target)
    if force or not binding.exists():
        python = ["-I", _python_include()]
        linked = [f"-L{target.parent}", "-lpcoll", "-Wl,-rpath,$ORIGIN"]
        _compile([mpicc, *flags, *include, *python, str(BINDING_SOURCE), *linked, "-o"], binding)
    return target
