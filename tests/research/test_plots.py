"""The ablation pictures: PNG files written whole, cells without numbers tolerated, and
matplotlib optional."""

import sys

import pytest

from albert_tf.research import plots

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _png(path):
    data = path.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 5_000
    return data


def test_pictures_are_png_files(tmp_path):
    pytest.importorskip("matplotlib")
    # A row without a task score (None) and a single-seed row (std None) still draw.
    plots.study_bars(
        tmp_path / "bars.png",
        "toy",
        ["A", "B", "C"],
        {
            "MLM acc": [(20.0, 1.0, 3), (21.0, None, 1), (19.0, 0.5, 3)],
            "SQuAD1.1 F1": [(60.0, 2.0, 3), None, (55.0, 3.0, 3)],
        },
        [True, False, False],
    )
    plots.learning_curves(
        tmp_path / "curves.png",
        "toy",
        {"A": ([0, 10, 20], [(0.1, 0.0, 2), (5.0, 1.0, 2), (7.0, None, 1)])},
    )
    plots.smoothness(
        tmp_path / "smooth.png",
        "toy",
        {
            "A": {
                "l2_distance": [(8.0, 1.0, 3), (3.0, 0.5, 3)],
                "angle_degrees": [(22.0, 2.0, 3), (9.0, 1.0, 3)],
            },
            "B": {
                "l2_distance": [(9.0, None, 1), (16.0, None, 1)],
                "angle_degrees": [(25.0, None, 1), (31.0, None, 1)],
            },
        },
    )
    for name in ("bars.png", "curves.png", "smooth.png"):
        _png(tmp_path / name)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "bars.png",
        "curves.png",
        "smooth.png",
    ]  # no temporaries


def test_available_follows_the_import(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert plots.available() is False
    assert plots.MISSING == "pip install -e '.[plots]' for the PNG pictures"
