"""The ablation studies: variant definitions, a small end-to-end study, resume, errors."""

import json
import logging
import os
import subprocess
import sys

import pytest

from albert_tf import ablations

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_sharing_variants_follow_table_4():
    """Parameter counts of the tiny model order as the paper's (all < FFN < attention <
    none), and the shared counts are the unshared count minus the shared copies."""
    rows = {v.label: ablations.variant_config(v, 2000) for v in ablations.STUDIES["sharing"]}
    for e in (128, 64):
        count = {s: rows[f"E={e} {s}"].num_parameters()
                 for s in ("all-shared", "shared-attention", "shared-FFN", "not-shared")}
        assert (count["all-shared"] < count["shared-FFN"] < count["shared-attention"]
                < count["not-shared"])
        h, f, layers = 128, 512, 4
        attention, ffn = 4 * (h * h + h) + 2 * h, 2 * h * f + f + h + 2 * h
        assert count["not-shared"] - count["shared-attention"] == (layers - 1) * attention
        assert count["not-shared"] - count["shared-FFN"] == (layers - 1) * ffn
        assert count["not-shared"] - count["all-shared"] == (layers - 1) * (attention + ffn)
    assert rows["E=128 not-shared"].embedding_size == rows["E=128 not-shared"].hidden_size


def test_other_studies():
    table3 = {v.label: ablations.variant_config(v, 2000)
              for v in ablations.STUDIES["embedding_size"]}
    assert [c.embedding_size for c in table3.values()] == [16, 32, 64, 128] * 2
    assert table3["all-shared E=16"].num_hidden_groups == 1
    assert table3["not-shared E=16"].num_hidden_groups == 4
    loss = {v.label: v for v in ablations.STUDIES["sentence_loss"]}
    assert (loss["None"].sentence_order_loss_weight, loss["NSP"].sentence_task,
            loss["SOP"].sentence_task) == (0.0, "nsp", "sop")
    dropout = [ablations.variant_config(v, 2000) for v in ablations.STUDIES["dropout"]]
    assert [c.hidden_dropout_prob for c in dropout] == [0.1, 0.0]
    layers = ablations.STUDIES["layers"]
    assert [v.warm_start for v in layers] == [False, True, True, True]
    # Shared weights: one parameter count whatever the depth (Table 11's "18M" column).
    assert len({ablations.variant_config(v, 2000).num_parameters() for v in layers}) == 1


def test_markdown_table():
    rows = [{"label": "A", "parameters": 1_234_567, "masked_lm_accuracy": 0.25,
             "sop_accuracy": 0.9, "nsp_accuracy": 0.5,
             "tasks": {"squad_v1": {"key": "f1", "value": 60.0},
                       "CoLA": {"key": "matthew_corr", "value": 0.5}}},
            {"label": "B", "parameters": 10, "masked_lm_accuracy": 0.0, "sop_accuracy": 0.0,
             "nsp_accuracy": 0.0, "tasks": {"squad_v1": {"key": "f1", "value": 40.0}}}]
    lines = ablations.markdown_table(rows).splitlines()
    assert lines[0] == "| Variant | Params | MLM acc | SOP acc | NSP acc | SQuAD1.1 F1 | CoLA | Avg |"
    assert lines[2] == "| A | 1.23M | 25.0 | 90.0 | 50.0 | 60.0 | 50.0 | 55.0 |"
    assert lines[3] == "| B | 0.00M | 0.0 | 0.0 | 0.0 | 40.0 |  |  |"  # no Avg of a partial row


@pytest.mark.parametrize("change,message", [
    (dict(study="vocab"), "--study='vocab'"),
    (dict(tasks=("squad_v3",)), "--tasks: unknown squad_v3"),
    (dict(variants=("L=3",)), "--variants: 'L=3' not in study 'layers'"),
    (dict(num_train_steps=5), "--num_train_steps=5"),
])
def test_bad_options(tmp_path, change, message):
    options = ablations.AblationOptions(study="layers", output_dir=str(tmp_path))
    with pytest.raises(ablations.AblationError, match=message):
        ablations.resolve(ablations.AblationOptions(**{**vars(options), **change}))


def test_small_study_end_to_end_resumes_and_warm_starts(tmp_path, caplog, monkeypatch):
    caplog.set_level(logging.INFO)
    options = ablations.AblationOptions(study="layers", output_dir=str(tmp_path),
                                        num_train_steps=10, tasks=(), dupe_factor=1,
                                        variants=("L=1", "L=2"))
    rows = ablations.run(options)
    assert [r["label"] for r in rows] == ["L=1", "L=2"]
    for r in rows:
        assert r["num_train_steps"] == 10 and r["tasks"] == {}
        for key in ("masked_lm_accuracy", "sop_accuracy", "nsp_accuracy"):
            assert 0.0 <= r[key] <= 1.0
    # L=2 started from L=1's final weights.
    study = tmp_path / "layers"
    assert any("--init_checkpoint: loaded" in m and os.path.join("layers", "00", "pretrain") in m
               for m in caplog.messages)
    config = json.loads((study / "01" / "pretrain" / "albert_config.json").read_text())
    assert config["num_hidden_layers"] == 2
    assert json.loads((study / "results.json").read_text()) == rows
    assert (study / "results.md").read_text() == ablations.markdown_table(rows)
    # Both held-out sets are there (the NSP accuracy reads one); NSP training data is not
    # built for a study that trains only on SOP.
    assert sorted(os.listdir(tmp_path / "data_sop_seed12345_dupe1")) == [
        "eval.tfrecord", "train.tfrecord"]
    assert os.listdir(tmp_path / "data_nsp_seed12345_dupe1") == ["eval.tfrecord"]
    assert all(r["random_seed"] == 12345 and r["dupe_factor"] == 1 for r in rows)

    # A second run finds both rows done and pretrains nothing.
    monkeypatch.setattr(ablations, "pretrain", lambda *a, **k: pytest.fail("pretrained again"))
    assert ablations.run(options) == rows

    # Resuming with other settings would mix them in one table.
    with pytest.raises(ablations.AblationError,
                       match=r"row 'L=1' was run with num_train_steps=10, random_seed=12345 "
                             r"\(now num_train_steps=20, random_seed=7\)"):
        ablations.run(ablations.AblationOptions(**{**vars(options), "num_train_steps": 20,
                                                   "random_seed": 7}))

    # L=8 starts from L=4, which has not run.
    with pytest.raises(ablations.AblationError, match="run 'L=4' first"):
        ablations.run(ablations.AblationOptions(**{**vars(options), "variants": ("L=8",)}))


def test_script_rejects_unknown_variant(tmp_path):
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "run_ablations.py"), f"--output_dir={tmp_path}",
         "--study=sharing", "--variants=E=64 everything-shared", "--tasks="],
        capture_output=True, text=True, timeout=300,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert result.returncode != 0
    assert "'E=64 everything-shared' not in study 'sharing'" in result.stderr
    assert not os.listdir(tmp_path)
