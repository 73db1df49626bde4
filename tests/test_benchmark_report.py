"""benchmarks/results.py writes one valid file per run; benchmarks/report.py shows the newest."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import report  # noqa: E402
import results  # noqa: E402

KEYS = {"benchmark", "date", "machine", "versions", "description", "rows", "notes"}


def record(directory, name, date, value):
    path = Path(directory) / f"{name}-{date.replace('-', '').replace(':', '')}.json"
    path.write_text(json.dumps({
        "benchmark": name, "date": date, "machine": {"cpu": "c", "cores": 2, "platform": "cpu"},
        "versions": {"jax": "0"}, "description": f"rows of {name}",
        "rows": [{"workload": "w", "seconds": value, "met": True}], "notes": f"notes {value}"}))


def test_write_holds_the_schema(tmp_path):
    rows = [{"workload": "a", "seconds": 0.5, "ratio": 3.0}, {"workload": "b", "seconds": 1.0,
                                                              "ratio": 2.5}]
    path = results.write("demo-bench", "what rows mean", rows, "where time goes", tmp_path)
    data = json.loads(path.read_text())
    assert set(data) == KEYS
    assert data["rows"] == rows and data["benchmark"] == "demo-bench"
    assert {"cpu", "cores", "platform"} <= set(data["machine"])
    assert {"python", "jax", "numpy", "POT", "jaxsynth"} <= set(data["versions"])
    assert path.name.startswith("demo-bench-") and path.name.endswith("Z.json")
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary file left


@pytest.mark.parametrize("rows", [[], [{"a": 1}, {"b": 2}]])
def test_write_refuses_rows_without_one_set_of_keys(tmp_path, rows):
    with pytest.raises(ValueError, match="rows"):
        results.write("x", "d", rows, "n", tmp_path)
    assert not list(tmp_path.iterdir())


def test_report_shows_the_newest_run_of_each_benchmark(tmp_path):
    record(tmp_path, "alpha", "2026-12-01T10:00:00+00:00", 1.25)
    record(tmp_path, "alpha", "2026-12-02T10:00:00+00:00", 2.5)
    record(tmp_path, "beta", "2026-11-30T10:00:00+00:00", 0.000125)
    text = report.report(tmp_path)
    assert text.count("## alpha") == 1 and text.count("## beta") == 1
    assert "| w | 2.5 | yes |" in text and "1.25" not in text
    assert "| w | 0.000125 | yes |" in text
    assert "notes 2.5" in text and "rows of beta" in text
    assert text.index("## alpha") < text.index("## beta")


def test_report_lists_notes_given_as_a_list(tmp_path):
    record(tmp_path, "gamma", "2026-12-01T10:00:00+00:00", 1.0)
    path = next(tmp_path.glob("*.json"))
    data = json.loads(path.read_text())
    data["notes"] = ["first note", "second note"]
    path.write_text(json.dumps(data))
    assert "- first note\n- second note\n" in report.report(tmp_path)


def test_report_refuses_an_empty_directory(tmp_path):
    with pytest.raises(ValueError, match="no result file"):
        report.report(tmp_path)


def test_report_shows_further_tables_by_title(tmp_path):
    record(tmp_path, "delta", "2026-12-01T10:00:00+00:00", 1.0)
    path = next(tmp_path.glob("delta-*.json"))
    data = json.loads(path.read_text())
    data["tables"] = {"n = 10^6": [{"case": "spiral", "seconds": 61.5}], "empty": []}
    path.write_text(json.dumps(data))
    text = report.report(tmp_path)
    assert "### n = 10^6" in text and "| spiral | 61.5 |" in text
    assert "### empty" not in text
    assert text.index("| w | 1 | yes |") < text.index("### n = 10^6")
