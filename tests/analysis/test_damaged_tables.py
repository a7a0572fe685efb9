"""A run folder whose tables lack a column or hold one of another type is refused in one line naming the file and
the column, by every reader: ``load_run``, ``plot`` and ``validate`` (read as if whole, the missing column was filled
with nulls, the summary was NaN and the figures blank)."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stragglerlab.analysis.errors import UserError
from stragglerlab.analysis.runfolder import load_run
from stragglerlab.cli import main
from tests.simulator.test_cli import one_line_error


@pytest.fixture
def run(tmp_path):
    folder = tmp_path / "run"
    argv = ["simulate", "--example", "eager-injected", "--set", "cluster.workers=4", "--set", "iterations=10"]
    assert main([*argv, "-o", str(folder)]) == 0
    return folder


def damage(folder, table: str, column: str, retype: pa.DataType | None) -> str:
    """Rewrite ``table`` of the run in ``folder`` without ``column`` (``retype`` None) or with it as ``retype``."""
    path = folder / f"{table}.parquet"
    data = pq.read_table(path)
    index = data.schema.get_field_index(column)
    if retype is None:
        data = data.remove_column(index)
    else:
        data = data.set_column(index, column, data.column(column).cast(retype))
    pq.write_table(data, path)
    return str(path)


@pytest.mark.parametrize(
    ("table", "column", "retype", "words"),
    [
        ("iterations", "wait", None, "has no column wait"),
        ("iterations", "t_done", pa.string(), "column t_done holds string, not double"),
        ("rounds", "kind", None, "has no column kind"),
        ("iterations", "worker", pa.int32(), "column worker holds int32, not int64"),
    ],
)
def test_load_run_plot_and_validate_name_the_file_and_the_column(run, tmp_path, capsys, table, column, retype, words):
    path = damage(run, table, column, retype)
    with pytest.raises(UserError, match=words) as err:
        load_run(run)
    assert str(err.value).startswith(path)
    one_line_error(capsys, ["plot", str(run), "--kind", "throughput", "-o", str(tmp_path / "t.png")], path, words)
    one_line_error(capsys, ["plot", str(run), "--kind", "timeline", "-o", str(tmp_path / "t.png")], path, words)
    one_line_error(capsys, ["validate", str(run), "-o", str(tmp_path / "v")], path, words)
    assert not (tmp_path / "t.png").exists() and not (tmp_path / "v").exists()


def test_a_meta_json_that_is_not_an_object_is_one_line(run, capsys):
    (run / "meta.json").write_text(json.dumps([1, 2]))
    with pytest.raises(UserError, match="holds a JSON list, not a run's object"):
        load_run(run)
