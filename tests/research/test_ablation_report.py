"""The ablation report: mean ± std over seeds, the within-noise rule, tables, eval_results.txt
curves and the files written with and without matplotlib."""

import logging
import statistics
import sys

import pytest

from albert_tf.research import ablation_report as report
from albert_tf.research import plots

TITLES = {"squad_v1": "SQuAD1.1 F1", "MNLI": "MNLI"}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _row(label, seed, mlm, f1=None, mnli=None, parameters=1_000_000, curve=None):
    tasks = {}
    if f1 is not None:
        tasks["squad_v1"] = {"key": "f1", "value": f1, "global_step": 10}
    if mnli is not None:
        tasks["MNLI"] = {"key": "eval_accuracy", "value": mnli, "global_step": 10}
    row = {
        "label": label,
        "random_seed": seed,
        "parameters": parameters,
        "masked_lm_accuracy": mlm,
        "sop_accuracy": 0.9,
        "nsp_accuracy": 0.6,
        "tasks": tasks,
    }
    if curve is not None:
        row["curve"] = curve
    return row


# A: the reference; B within noise of it on MLM; C far from it; D a single seed.
ROWS = (
    [_row("A", s, m, f1, 0.8) for s, m, f1 in ((1, 0.20, 60.0), (2, 0.21, 62.0), (3, 0.22, 64.0))]
    + [
        _row("B", s, m, f1, 0.8)
        for s, m, f1 in ((1, 0.205, 61.0), (2, 0.215, 61.0), (3, 0.225, 61.0))
    ]
    + [
        _row("C", s, m, f1, 0.8, parameters=2_500_000)
        for s, m, f1 in ((1, 0.30, 40.0), (2, 0.31, 41.0), (3, 0.32, 42.0))
    ]
    + [_row("D", 1, 0.5, 50.0, 0.5)]
)
REFERENCES = {"B": "A", "C": "A", "D": "A"}


def test_mean_std_is_the_sample_standard_deviation():
    values = [3.0, 4.5, 9.25, 1.0]
    mean, std, n = report.mean_std(values)
    assert (mean, n) == (statistics.mean(values), 4)
    assert std == pytest.approx(statistics.stdev(values), rel=1e-12)  # n - 1
    assert report.mean_std([7]) == (7.0, None, 1)
    with pytest.raises(ValueError):
        report.mean_std([])


def test_within_noise_rule():
    # Two standard errors of the difference: 2 * sqrt(1/3 + 1/3) = 1.633 at std 1, n 3.
    assert report.within_noise((10.0, 1.0, 3), (11.6, 1.0, 3)) is True
    assert report.within_noise((10.0, 1.0, 3), (11.7, 1.0, 3)) is False
    assert report.within_noise((11.7, 1.0, 3), (10.0, 1.0, 3)) is False  # symmetric
    # More seeds: a smaller band for the same spread.
    assert report.within_noise((10.0, 1.0, 12), (11.0, 1.0, 12)) is False
    # No std on either side: nothing to compare with.
    assert report.within_noise((10.0, None, 1), (10.0, 1.0, 3)) is None
    assert report.within_noise((10.0, 0.0, 3), (10.0, 0.0, 3)) is True  # equal, no spread
    assert report.within_noise((10.0, 0.0, 3), (10.1, 0.0, 3)) is False


def test_aggregate_per_label():
    summary = report.aggregate(ROWS, ["A", "B", "C", "D", "E"], TITLES)
    assert list(summary) == ["A", "B", "C", "D"]  # study order; E has no rows
    a = summary["A"]
    assert (a["n"], a["seeds"], a["parameters"]) == (3, [1, 2, 3], 1_000_000)
    mean, std, n = a["scores"]["MLM acc"]
    assert (mean, std, n) == (pytest.approx(21.0), pytest.approx(1.0), 3)
    # Avg: per seed (F1 and MNLI x100 averaged), then mean ± std over seeds.
    assert a["scores"]["Avg"] == (pytest.approx(71.0), pytest.approx(1.0), 3)
    assert summary["D"]["scores"]["Avg"] == (50.0, None, 1)
    # One task: its score is the whole story, no Avg column.
    assert report.row_scores(_row("E", 1, 0.2, f1=55.0), TITLES) == {
        "MLM acc": 20.0,
        "SOP acc": 90.0,
        "NSP acc": 60.0,
        "SQuAD1.1 F1": 55.0,
    }


def test_summary_table():
    lines = report.summary_table(ROWS, ["A", "B", "C", "D"], REFERENCES, TITLES).splitlines()
    assert lines[0] == (
        "| Variant | n | Params | MLM acc | SOP acc | NSP acc | SQuAD1.1 F1 | MNLI | Avg |"
    )
    assert lines[2] == (
        "| A (ref) | 3 | 1.00M | 21.0 ± 1.0 | 90.0 ± 0.0 | 60.0 ± 0.0 | 62.0 ± 2.0 "
        "| 80.0 ± 0.0 | 71.0 ± 1.0 |"
    )
    # B: MLM 21.5 vs 21.0 within noise; F1 61 ± 0 vs 62 ± 2 within 2 * sqrt(4/3) = 2.3;
    # SOP/NSP/MNLI equal (no spread, no difference).
    assert lines[3] == (
        "| B | 3 | 1.00M | 21.5 ± 1.0 ≈ | 90.0 ± 0.0 ≈ | 60.0 ± 0.0 ≈ "
        "| 61.0 ± 0.0 ≈ | 80.0 ± 0.0 ≈ | 70.5 ± 0.0 ≈ |"
    )
    assert lines[4] == (
        "| C | 3 | 2.50M | 31.0 ± 1.0 | 90.0 ± 0.0 ≈ | 60.0 ± 0.0 ≈ "
        "| 41.0 ± 1.0 | 80.0 ± 0.0 ≈ | 60.5 ± 0.5 |"
    )
    assert lines[5] == "| D | 1 | 1.00M | 50.0 | 90.0 | 60.0 | 50.0 | 50.0 | 50.0 |"  # n = 1
    notes = lines[7]
    assert "over n pretraining seeds (seeds 1, 2, 3)" in notes
    assert "2 sqrt(s^2/n + s_ref^2/n_ref)" in notes and "Compared with" not in notes
    # Several references: the note says which rows each one is compared with.
    two = report.summary_table(ROWS, ["A", "B", "C"], {"B": "A", "C": "B"}, TITLES)
    assert "| A (ref) |" in two and "| B (ref) |" in two
    assert "Compared with: A: B; B: C." in two
    # No reference row among the rows: no mark, no rule.
    alone = report.summary_table(ROWS, ["B", "C"], REFERENCES, TITLES)
    assert "(ref)" not in alone and "≈" not in alone


def test_per_seed_table_and_intrinsic_only_rows():
    rows = [_row("X", 7, 0.25), _row("W", 3, 0.125)]
    lines = report.per_seed_table(rows, ["W", "X"], TITLES).splitlines()
    assert lines == [
        "| Variant | Seed | Params | MLM acc | SOP acc | NSP acc |",
        "|---|---|---|---|---|---|",
        "| W | 3 | 1.00M | 12.5 | 90.0 | 60.0 |",
        "| X | 7 | 1.00M | 25.0 | 90.0 | 60.0 |",
    ]


def test_curve_summary():
    rows = [
        _row("A", 1, 0.2, curve={"global_step": [0, 10], "masked_lm_accuracy": [0.0, 0.2]}),
        _row(
            "A", 2, 0.2, curve={"global_step": [0, 10, 20], "masked_lm_accuracy": [0.02, 0.3, 0.4]}
        ),
        _row("B", 1, 0.2),
    ]  # no curve (a row from before the curves)
    curves = report.curve_summary(rows, ["A", "B"])
    assert list(curves) == ["A"]
    steps, stats = curves["A"]
    assert steps == [0, 10, 20]
    assert stats[0] == (pytest.approx(1.0), pytest.approx(2**0.5), 2)
    assert stats[1][0] == pytest.approx(25.0) and stats[2] == (pytest.approx(40.0), None, 1)


def _measurement(l2, angle, tokens=10):
    return {
        "l2_distance": l2,
        "angle_degrees": angle,
        "cosine_similarity": [1.0] * len(l2),
        "tokens": tokens,
    }


def test_smoothness_table():
    text = report.smoothness_table(
        {
            "shared": [
                _measurement([4.0, 2.0], [20.0, 10.0]),
                _measurement([6.0, 2.0], [30.0, 10.0]),
            ],
            "not shared": [_measurement([5.0, 3.0, 1.0], [25.0, 15.0, 5.0])],
        }
    )
    lines = text.splitlines()
    assert lines[0] == (
        "| Layer | shared L2 | not shared L2 | shared angle (°) | not shared angle (°) |"
    )
    assert lines[2] == "| 0 | 5.0 ± 1.4 | 5.0 | 25.0 ± 7.1 | 25.0 |"
    assert lines[3] == "| 1 | 2.0 ± 0.0 | 3.0 | 10.0 ± 0.0 | 15.0 |"
    assert lines[4] == "| 2 |  | 1.0 |  | 5.0 |"
    assert "shared: n = 2, 10 tokens" in text


def _rows_with_everything():
    curve = {"global_step": [0, 10], "masked_lm_accuracy": [0.0, 0.2]}
    rows = [dict(r, curve=curve) for r in ROWS]
    for r in rows:
        r["smoothness"] = _measurement([4.0 + r["random_seed"], 2.0], [20.0, 10.0])
    return rows


def test_study_report_files(tmp_path):
    pytest.importorskip("matplotlib")
    written = report.write_study_report(
        tmp_path, "toy", _rows_with_everything(), ["A", "B", "C", "D"], REFERENCES, TITLES
    )
    names = ["results.md", "results.png", "learning_curves.png", "smoothness.png"]
    assert written == [str(tmp_path / n) for n in names]
    text = (tmp_path / "results.md").read_text()
    assert text.startswith("# Study toy\n\n| Variant | n |")
    assert "## Per layer (Figure 1)" in text and "## Per seed" in text
    for name in names[1:]:
        data = (tmp_path / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 10_000


def test_study_report_without_matplotlib(tmp_path, monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` fails
    assert not plots.available()
    caplog.set_level(logging.INFO)
    written = report.write_study_report(
        tmp_path, "toy", _rows_with_everything(), ["A", "B", "C", "D"], REFERENCES, TITLES
    )
    assert written == [str(tmp_path / "results.md")]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.md"]
    assert "pip install -e '.[plots]' for the PNG pictures" in caplog.messages
