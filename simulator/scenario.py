"""Scenarios: the TOML input of every command, loaded into typed, validated, frozen objects.

Every section is a dataclass whose fields carry their own check (:mod:`.keys`); the loader walks them generically, so
adding a key is one line. The ``[algorithm]`` table holds the keys every algorithm shares and the keys each algorithm
declares in its record (:mod:`.algorithms`). Unknown keys and bad values raise :class:`ScenarioError` with one
line naming the origin (file or ``--set``), the key, the value and what is allowed. ``--set key=value`` overrides
go through the same checks.

``[per_algorithm.NAME]`` tables give one algorithm its own ``network`` and ``algorithm`` keys (a comparison's
sync on NCCL's ring while eager-SGD runs recursive doubling, SGP on its own graph): a scenario whose algorithm is
NAME takes them in place of the general values, so every plane sees the values the algorithm ran with, and
``meta.json`` stores them. :meth:`Scenario.replace` of ``algorithm.name`` starts again from the general values.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stragglerlab.simulator import algorithms, bounds, schedules
from stragglerlab.simulator.bounds import MAX_BATCH, MAX_BUCKETS, MAX_CV, MAX_ELEMENTS
from stragglerlab.simulator.imbalance import read_trace
from stragglerlab.simulator.keys import (
    BOOL,
    NONNEG,
    NONNEG_INT,
    POSITIVE,
    POSITIVE_INT,
    Check,
    ScenarioError,
    at_most,
    key,
    number,
    one_of,
)
from stragglerlab.simulator.measured import read_table

ALGORITHMS = algorithms.names()
ALLREDUCE = (*schedules.ALLREDUCES, "auto")
DISTRIBUTIONS = ("constant", "normal", "lognormal", "gamma", "pareto")
IMBALANCE_KINDS = ("none", "random-delay", "persistent", "trace")
BUILTIN_MODELS = ("hyperplane", "logistic", "mlp")
#: the largest scenario file read
MAX_BYTES = 16 * 2**20
MODEL = Check(
    str,
    lambda v: v in ("none", *BUILTIN_MODELS) or all(v.partition(":")[::2]),
    "none, " + ", ".join(BUILTIN_MODELS) + " or a torch workload module:function",
)
#: a scenario's name names its default run folders (runs/<name>, runs/<name>-real-2): one folder name, room for them
NAME = Check(
    str,
    lambda v: (
        v not in ("", ".", "..") and "/" not in v and v.isprintable() and len(v.encode("utf-8", "surrogatepass")) <= 200
    ),
    "a folder name: up to 200 bytes, no / or control characters, not . or ..",
)
HIDDEN = Check(
    list,
    lambda v: 1 <= len(v) <= 2 and all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in v),
    "a list of 1 or 2 positive layer widths",
    tuple,
)


def _slow_range(v: Any) -> tuple[int, int] | None:
    if isinstance(v, int) and not isinstance(v, bool):
        v = [v, v]
    if (
        isinstance(v, (list, tuple))
        and len(v) == 2
        and all(isinstance(x, int) and not isinstance(x, bool) for x in v)
        and 0 <= v[0] <= v[1]
    ):
        return (v[0], v[1])
    return None


def _factor_table(v: Any) -> dict[int, float] | None:
    out = {}
    for k, f in v.items():
        if not (
            re.fullmatch("[0-9]+", str(k))
            and isinstance(f, (int, float))
            and not isinstance(f, bool)
            and f > 0
            and math.isfinite(f)
        ):
            return None
        out[int(k)] = float(f)
    return out


@dataclass(frozen=True)
class Cluster:
    workers: int = key(8, POSITIVE_INT)
    workers_per_node: int = key(1, POSITIVE_INT)
    nodes_per_rack: int = key(0, NONNEG_INT)  # 0: every node on one switch


@dataclass(frozen=True)
class Network:
    alpha: float = key(1.5e-6, NONNEG)
    beta: float = key(1.0e-10, NONNEG)
    gamma: float = key(0.0, NONNEG)
    allreduce: str = key("ring", one_of(ALLREDUCE))
    intra_alpha: float | None = key(None, NONNEG)  # None: same as alpha
    intra_beta: float | None = key(None, NONNEG)  # None: same as beta
    overhead: float = key(0.0, NONNEG)  # seconds of software cost of every round
    message_overhead: float = key(0.0, NONNEG)  # LogGP's o: seconds of software cost of every message
    fabric_beta: float = key(0.0, NONNEG)  # seconds per byte of the fabric's aggregate bandwidth; 0: unlimited
    uplink_beta: float = key(0.0, NONNEG)  # seconds per byte of each rack's uplink, each way; 0: unlimited
    activation_delay: float = key(0.0, NONNEG)  # seconds a rank takes to pass the activation token on, per tree step
    table: Path | None = key(None, Check(str, lambda v: bool(v), "a .csv file of measured rounds", path=True))


@dataclass(frozen=True)
class Compute:
    dist: str = key("constant", one_of(DISTRIBUTIONS))
    mean: float = key(0.30, POSITIVE)
    cv: float | None = key(None, number(lambda v: 0 < v <= MAX_CV, f"a number in (0, {MAX_CV:g}]"))
    shape: float | None = key(None, POSITIVE)  # gamma: at least 1 / MAX_CV**2; pareto: > 1


@dataclass(frozen=True)
class Workload:
    model: str = key("none", MODEL)
    params: int = key(25_557_032, at_most(MAX_ELEMENTS, "2^40"))
    batch: int = key(128, at_most(MAX_BATCH, "2^31"))
    device: str = key(
        "cpu", Check(str, lambda v: re.fullmatch(r"cpu|cuda(:[0-9]+)?", v) is not None, "cpu, cuda or cuda:N")
    )
    compute: Compute = field(default_factory=Compute)
    dimension: int = key(100, POSITIVE_INT)  # hyperplane: parameters; logistic, mlp: input features
    noise: float = key(0.5, NONNEG)
    samples: int = key(32_768, at_most(MAX_ELEMENTS, "2^40"))  # train + test
    classes: int = key(10, Check(int, lambda v: v >= 2, "an integer >= 2"))
    hidden: tuple[int, ...] = key((64,), HIDDEN)  # mlp
    test_fraction: float = key(0.2, number(lambda v: 0 < v < 1, "a number between 0 and 1, exclusive"))
    update: float = key(0.0, NONNEG)  # seconds of the optimizer step after each iteration
    # the software cost of a call that waits for no exchange (a distribution, as compute); None: no cost
    call: Compute | None = None
    buckets: int = key(1, at_most(MAX_BUCKETS, "2^16"))  # sync: gradient buckets all-reduced while backward runs
    backward: float = key(2 / 3, number(lambda v: 0 < v <= 1, "a number in (0, 1]"))  # share of compute


@dataclass(frozen=True)
class Imbalance:
    kind: str = key("none", one_of(IMBALANCE_KINDS))
    slow: tuple[int, int] = key(
        (1, 1),
        Check(
            (list, int),
            lambda v: _slow_range(v) is not None,
            "[min, max] with 0 <= min <= max, or one integer",
            _slow_range,
        ),
    )
    delay: float = key(0.32, NONNEG)
    mode: str = key("sleep", one_of(("sleep", "work")))
    draw: str = key("count", one_of(("count", "independent")))
    factors: Mapping[int, float] = key(
        None,
        Check(dict, lambda v: _factor_table(v) is not None, "a table of worker = factor, factors > 0", _factor_table),
    )
    file: Path | None = key(None, Check(str, lambda v: bool(v), "a .npy or .csv file", path=True))


@dataclass(frozen=True)
class Optimizer:
    """The ``[algorithm]`` keys every algorithm shares: which one, and its optimizer (SGD)."""

    name: str = key("sync", one_of(ALGORITHMS))
    lr: float = key(0.05, NONNEG)
    momentum: float = key(0.0, Check((int, float), lambda v: 0 <= v < 1, "a number in [0, 1)"))
    weight_decay: float = key(0.0, NONNEG)

    def __getattr__(self, name: str) -> Any:
        """(For type checkers: the keys the algorithms declare are attributes too.)"""
        raise AttributeError(name)


#: the ``[algorithm]`` table: the shared keys, then every key an algorithm declares (:func:`.algorithms.declared_keys`)
Algorithm = dataclasses.make_dataclass(
    "Algorithm",
    [(k.name, Any, key(k.default, k.check)) for k in algorithms.declared_keys()],
    bases=(Optimizer,),
    frozen=True,
)


@dataclass(frozen=True)
class Evals:
    every_seconds: float = key(0.0, NONNEG)  # simulated seconds between evaluations; 0: off
    every_iterations: int = key(10, NONNEG_INT)  # rounds (iterations per worker) between evaluations; 0: off
    replicas: bool = key(False, BOOL)  # also evaluate each replica


@dataclass(frozen=True)
class Scenario:
    name: str = key("scenario", NAME)
    seed: int = key(0, NONNEG_INT)
    iterations: int = key(100, POSITIVE_INT)
    duration: float = key(0.0, NONNEG)  # seconds of the time budget (docs/semantics.md, Time budget); 0: none
    engine: str = key("auto", one_of(("auto", "reference", "fast")))
    cluster: Cluster = field(default_factory=Cluster)
    network: Network = field(default_factory=Network)
    workload: Workload = field(default_factory=Workload)
    imbalance: Imbalance = field(default_factory=Imbalance)
    algorithm: Optimizer = field(default_factory=Algorithm)
    evals: Evals = field(default_factory=Evals)
    # algorithm name -> {"network" | "algorithm": {key: value}}: the keys that algorithm runs with instead
    per_algorithm: Mapping[str, Mapping[str, Mapping[str, Any]]] | None = field(
        default=None, metadata={"internal": True}
    )
    # dotted key -> its general value, for the keys this scenario's algorithm takes from per_algorithm (stored with
    # the values run, so that a stored scenario gives the other algorithms theirs)
    general: Mapping[str, Any] | None = field(default=None, compare=False, repr=False, metadata={"internal": True})

    @property
    def workers(self) -> int:
        return self.cluster.workers

    @property
    def budget(self) -> float:
        """The time budget in seconds: ``duration``, or infinity when there is none (``duration = 0``)."""
        return self.duration if self.duration > 0 else float("inf")

    def replace(self, origin: str = "replace()", /, **changes: Any) -> Scenario:
        """A copy with dotted keys changed (``{"algorithm.name": "sync"}``; None: back to the default), validated like
        ``--set``; an error names ``origin``, what asked for the change (``--compare wagma``)."""
        raw = _general(to_dict(self), self.general)
        for dotted, value in changes.items():
            if value is None:
                *path, name = dotted.split(".")
                node = raw
                for part in path:
                    node = node.get(part, {})
                node.pop(name, None)
                continue
            _assign(raw, dotted, value, origin)
        return from_dict(raw, origin)


@dataclass(frozen=True)
class Origin:
    """Where values came from: a label for messages (a file, ``--set``) and the folder relative paths start in."""

    label: str
    base: Path


class Origins(dict):
    """Origin of each dotted key; keys not listed come from the default origin (stored under "")."""

    def of(self, key: str) -> Origin:
        return self.get(key, self[""])

    def fail(self, key: str, value: Any, allowed: str) -> ScenarioError:
        shown = (f'"{value}"' if value.isprintable() else json.dumps(value)) if isinstance(value, str) else value
        return ScenarioError(f"{self.of(key).label}: {key} = {shown}: must be {allowed}")


def _build(cls: type, raw: Mapping[str, Any], prefix: str, origins: Origins) -> Any:
    fields = {f.name: f for f in dataclasses.fields(cls) if not f.metadata.get("internal")}
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        key = prefix + unknown[0]
        raise ScenarioError(
            f"{origins.of(key).label}: unknown key {key} (allowed in "
            f"{prefix.rstrip('.') or 'the top level'}: " + ", ".join(fields) + ")"
        )
    values = {}
    for name, value in raw.items():
        f, key = fields[name], prefix + name
        if "check" not in f.metadata:
            if not isinstance(value, dict):
                raise origins.fail(key, value, "a table")
            values[name] = _build(_SECTIONS[name], value, key + ".", origins)
            continue
        check: Check = f.metadata["check"]
        if (
            (isinstance(value, bool) and check.kind is not bool)
            or not isinstance(value, check.kind)
            or not check.ok(value)
        ):
            raise origins.fail(key, value, check.allowed)
        value = check.convert(value)
        if check.path:
            value = (origins.of(key).base / value).resolve()
        values[name] = value
    return cls(**values)


_SECTIONS: dict[str, type] = {
    "cluster": Cluster,
    "network": Network,
    "workload": Workload,
    "imbalance": Imbalance,
    "algorithm": Algorithm,
    "compute": Compute,
    "call": Compute,
    "evals": Evals,
}


def _assign(raw: dict[str, Any], key: str, value: Any, origin: str) -> None:
    parts = key.split(".")
    node = raw
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ScenarioError(f"{origin}: {key}: {part} is not a table")
        node = child
    node[parts[-1]] = value


def parse_override(text: str) -> tuple[str, Any]:
    """``key=value`` from the command line: the value is read as TOML if it parses, else as a plain string."""
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ScenarioError(f"--set {text}: expected key=value, e.g. --set cluster.workers=64")
    try:
        parsed = tomllib.loads(f"v = {value.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        parsed = value.strip()
    return key, parsed


def from_dict(
    raw: Mapping[str, Any],
    origin: str = "<scenario>",
    base: Path | None = None,
    overridden: Mapping[str, Origin] | None = None,
) -> Scenario:
    """Validate a raw mapping (as TOML gives it) into a :class:`Scenario`.

    ``origin`` names the source in messages and ``base`` is where its relative file names start; keys in
    ``overridden`` came from elsewhere (``--set``) and are reported and resolved with their own origin.
    """
    origins = Origins({"": Origin(origin, base or Path.cwd()), **(overridden or {})})
    raw = dict(raw)
    stored = raw.pop("general", None)
    if stored is not None and not (
        isinstance(stored, dict) and all(k.partition(".")[0] in PER_ALGORITHM_SECTIONS for k in stored)
    ):
        raise origins.fail("general", stored, "a table of network.* and algorithm.* keys (as meta.json stores it)")
    raw = _general(raw, stored)
    table = _per_algorithm(raw.pop("per_algorithm", None), origins)
    scenario = _build(Scenario, raw, "", origins)
    own = (table or {}).get(scenario.algorithm.name, {})
    general = None
    if own:
        general = {f"{section}.{name}": _plain(getattr(getattr(scenario, section), name))
                   for section, keys in own.items() for name in keys}  # fmt: skip
        raw = {**raw, **{section: {**raw.get(section, {}), **keys} for section, keys in own.items()}}
        label = f"{origins.of('').label} (per_algorithm.{scenario.algorithm.name})"
        for dotted in general:
            origins[dotted] = Origin(label, origins.of(f"per_algorithm.{scenario.algorithm.name}.{dotted}").base)
        scenario = _build(Scenario, raw, "", origins)
    scenario = dataclasses.replace(scenario, per_algorithm=table, general=general)
    _check_consistency(scenario, origins)
    return scenario


#: the sections whose keys an algorithm may have of its own: how it exchanges
PER_ALGORITHM_SECTIONS = ("network", "algorithm")


def _per_algorithm(table: Any, origins: Origins) -> dict[str, dict[str, dict[str, Any]]] | None:
    """``per_algorithm``, checked: each entry names an algorithm, holds only ``network`` and ``algorithm`` keys (the
    latter ones that algorithm reads, not ``name``), each value valid as the general key's; file names resolved."""
    if table is None:
        return None
    label = origins.of("per_algorithm").label
    if not isinstance(table, dict):
        raise origins.fail("per_algorithm", table, "a table of algorithm name = its own network and algorithm keys")
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for name, entry in table.items():
        where = f"per_algorithm.{name}"
        if name not in ALGORITHMS:
            raise ScenarioError(f"{label}: {where}: not an algorithm (choose from {', '.join(ALGORITHMS)})")
        if not isinstance(entry, dict):
            raise origins.fail(where, entry, "a table with network and algorithm tables")
        out[name] = {}
        for section, keys in entry.items():
            if section not in PER_ALGORITHM_SECTIONS:
                raise ScenarioError(
                    f"{label}: {where}.{section}: only network and algorithm keys can differ per algorithm"
                )
            if not isinstance(keys, dict):
                raise origins.fail(f"{where}.{section}", keys, "a table of keys")
            if section == "algorithm":
                reads = sorted({"lr", "momentum", "weight_decay", *(k.name for k in algorithms.get(name).keys)})
                if "name" in keys:
                    raise ScenarioError(f"{label}: {where}.algorithm.name: the table's name is the algorithm")
                known = {f.name for f in dataclasses.fields(Algorithm)}  # others: _build names them unknown
                unread = [k for k in keys if k in known and k not in reads]
                if unread:
                    raise ScenarioError(
                        f"{label}: {where}.algorithm.{unread[0]}: {name} does not read it (it reads {', '.join(reads)})"
                    )
            built = _build(_SECTIONS[section], keys, f"{where}.{section}.", origins)
            out[name][section] = {k: _plain(getattr(built, k)) for k in keys}
    return out


def _general(raw: dict[str, Any], general: Mapping[str, Any] | None) -> dict[str, Any]:
    """``raw`` with the general values of the keys its algorithm took from ``per_algorithm`` (None: the default)."""
    for dotted, value in (general or {}).items():
        section, name = dotted.split(".", 1)
        raw = {**raw, section: {k: v for k, v in raw.get(section, {}).items() if k != name}}
        if value is not None:
            raw[section][name] = value
    return raw


def _copy(mapping: Mapping[Any, Any]) -> dict[str, Any]:
    """A mapping and the mappings in it as new dicts with text keys: changing the copy leaves the scenario alone."""
    return {str(k): _copy(x) if isinstance(x, Mapping) else x for k, x in mapping.items()}


def _plain(value: Any) -> Any:
    """A key's value as ``to_dict`` writes it (paths as text, tuples as lists)."""
    if isinstance(value, Path):
        return str(value)
    return list(value) if isinstance(value, tuple) else value


def load(
    path: str | Path | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    *,
    text: str | None = None,
    name: str | None = None,
) -> Scenario:
    """Load a scenario file (or TOML ``text``), apply ``--set`` overrides, validate everything.

    The scenario's ``name`` defaults to the file's stem. Overridden keys are reported as ``--set`` and a file
    they name is taken relative to the current directory.
    """
    origin = str(path) if path is not None else "<scenario>"
    if text is None:
        assert path is not None, "a scenario is a file or a text"
        try:
            with open(path, "rb") as file:
                data = file.read(MAX_BYTES + 1)  # not all of /dev/zero
        except OSError as err:
            raise ScenarioError(f"{origin}: cannot read the scenario ({err.strerror})") from None
        if len(data) > MAX_BYTES:
            raise ScenarioError(
                f"{origin}: larger than {MAX_BYTES >> 20} MiB, which no scenario is (a scenario is TOML)"
            )
        try:
            text = data.decode("utf-8-sig")  # a byte-order mark, as some editors write, is not part of the TOML
        except UnicodeDecodeError:
            raise ScenarioError(f"{origin}: not a text file (a scenario is TOML)") from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ScenarioError(f"{origin}: not valid TOML ({err})") from None
    raw.setdefault("name", name or (Path(path).stem if path is not None else "scenario"))
    overridden = {}
    for item in overrides:
        dotted, value = parse_override(item)
        _assign(raw, dotted, value, "--set")
        overridden[dotted] = Origin("--set", Path.cwd())
    base = Path(path).resolve().parent if path is not None else Path.cwd()
    return from_dict(raw, origin, base, overridden)


def _check_distribution(c: Compute | None, key: str, origins: Origins) -> None:
    """A distribution table (``workload.compute``, ``workload.call``) has the parameter its ``dist`` needs."""
    if c is None:
        return
    if c.dist in ("normal", "lognormal") and c.cv is None:
        raise origins.fail(f"{key}.cv", None, f"given for dist = {c.dist} (coefficient of variation)")
    if c.dist == "gamma" and c.cv is None and c.shape is None:
        raise origins.fail(f"{key}.cv", None, "given (or shape) for dist = gamma")
    if c.dist == "gamma" and c.cv is None and c.shape is not None and c.shape < 1 / MAX_CV**2:
        raise origins.fail(f"{key}.shape", c.shape, f"at least {1 / MAX_CV**2:g} for dist = gamma (a cv of {MAX_CV:g})")
    if c.dist == "pareto" and (c.shape is None or c.shape <= 1):
        raise origins.fail(f"{key}.shape", c.shape, "a number > 1 for dist = pareto (finite mean)")


def _check_consistency(s: Scenario, origins: Origins) -> None:
    """Checks that involve more than one key."""
    P, record = s.workers, algorithms.get(s.algorithm.name)
    if record.check is not None:
        record.check(s, origins.fail)
    if s.engine == "fast" and record.kernel is None:
        raise origins.fail("engine", s.engine, f"reference or auto: {record.name} has no fast kernel")
    if s.cluster.workers_per_node > P:
        raise origins.fail("cluster.workers_per_node", s.cluster.workers_per_node, f"at most cluster.workers = {P}")
    for name in ("compute", "call"):
        _check_distribution(getattr(s.workload, name), f"workload.{name}", origins)
    w = s.workload
    train = w.samples - round(w.samples * w.test_fraction)
    if w.model in BUILTIN_MODELS and train // P < w.batch:
        raise origins.fail(
            "workload.samples",
            w.samples,
            f"enough that, after the test split, each of the {P} workers gets a batch of {w.batch} train samples",
        )
    im = s.imbalance
    if im.kind == "random-delay" and im.slow[1] > P:
        raise origins.fail("imbalance.slow", list(im.slow), f"a range within [0, cluster.workers = {P}]")
    if im.kind == "persistent":
        if not im.factors:
            raise origins.fail("imbalance.factors", im.factors, "given for kind = persistent ({ 3 = 1.5 })")
        if max(im.factors) >= P:
            raise origins.fail("imbalance.factors", dict(im.factors), f"worker indices below {P}")
    trace_max = 0.0
    if im.kind == "trace":
        if im.file is None:
            raise origins.fail("imbalance.file", None, "given for kind = trace")
        trace_max = float(read_trace(im.file, P, origins.of("imbalance.file").label).max())
    if s.network.table is not None:
        read_table(s.network.table, origins.of("network.table").label)
    bounds.check(s, origins, trace_max)


def to_dict(s: Any) -> dict[str, Any]:
    """The resolved scenario as plain TOML-able data (what ``meta.json`` stores and ``from_dict`` accepts)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(s):
        v = getattr(s, f.name)
        if dataclasses.is_dataclass(v):
            out[f.name] = to_dict(v)
        elif v is None:
            continue
        elif isinstance(v, Path):
            out[f.name] = str(v)
        elif isinstance(v, tuple):
            out[f.name] = list(v)
        elif isinstance(v, Mapping):
            out[f.name] = _copy(v)
        else:
            out[f.name] = v
    return out
