"""The ablation studies: variant definitions, flags, small end-to-end studies with seeds,
resume, warm starts, the smoothness study, errors."""

import dataclasses
import json
import logging
import os
import re
import subprocess
import sys

import pytest

from albert_tf import options
from albert_tf.errors import UserError
from albert_tf.research import ablations
from albert_tf.tasks import pretraining

from repo_paths import REPO_ROOT

ROOT = REPO_ROOT


def test_sharing_variants_follow_table_4():
    """Parameter counts of the tiny model order as the paper's (all < FFN < attention <
    none), and the shared counts are the unshared count minus the shared copies."""
    rows = {v.label: ablations.variant_config(v, 2000) for v in ablations.STUDIES["sharing"]}
    for e in (128, 64):
        count = {
            s: rows[f"E={e} {s}"].num_parameters()
            for s in ("all-shared", "shared-attention", "shared-FFN", "not-shared")
        }
        assert (
            count["all-shared"]
            < count["shared-FFN"]
            < count["shared-attention"]
            < count["not-shared"]
        )
        h, f, layers = 128, 512, 4
        attention, ffn = 4 * (h * h + h) + 2 * h, 2 * h * f + f + h + 2 * h
        assert count["not-shared"] - count["shared-attention"] == (layers - 1) * attention
        assert count["not-shared"] - count["shared-FFN"] == (layers - 1) * ffn
        assert count["not-shared"] - count["all-shared"] == (layers - 1) * (attention + ffn)
    assert rows["E=128 not-shared"].embedding_size == rows["E=128 not-shared"].hidden_size


def test_other_studies():
    table3 = {
        v.label: ablations.variant_config(v, 2000) for v in ablations.STUDIES["embedding_size"]
    }
    assert [c.embedding_size for c in table3.values()] == [16, 32, 64, 128] * 2
    assert table3["all-shared E=16"].num_hidden_groups == 1
    assert table3["not-shared E=16"].num_hidden_groups == 4
    loss = {v.label: v for v in ablations.STUDIES["sentence_loss"]}
    assert (
        loss["None"].sentence_order_loss_weight,
        loss["NSP"].sentence_task,
        loss["SOP"].sentence_task,
    ) == (0.0, "nsp", "sop")
    dropout = [ablations.variant_config(v, 2000) for v in ablations.STUDIES["dropout"]]
    assert [c.hidden_dropout_prob for c in dropout] == [0.1, 0.0]
    layers = ablations.STUDIES["layers"]
    assert [v.warm_start for v in layers] == [False, True, True, True]
    # Shared weights: one parameter count whatever the depth (Table 11's "18M" column).
    assert len({ablations.variant_config(v, 2000).num_parameters() for v in layers}) == 1


def test_references_name_rows_of_their_study():
    for name, variants in ablations.STUDIES.items():
        labels = {v.label for v in variants}
        references = {v.reference for v in variants if v.reference}
        assert references <= labels, name
        assert not any(v.reference for v in variants if v.label in references), name
    refs = {v.label: v.reference for v in ablations.STUDIES["sharing"]}
    assert refs["E=64 not-shared"] == "E=64 all-shared"
    assert refs["E=128 shared-FFN"] == "E=128 all-shared"
    assert {v.label: v.reference for v in ablations.STUDIES["sentence_loss"]} == {
        "None": "SOP",
        "NSP": "SOP",
        "SOP": None,
    }
    assert [v.reference for v in ablations.STUDIES["layers"]] == ["L=4", "L=4", None, "L=4"]
    smooth = [ablations.variant_config(v, 2000) for v in ablations.STUDIES["smoothness"]]
    assert [c.num_hidden_groups for c in smooth] == [1, 4]
    assert {c.embedding_size for c in smooth} == {64}  # one shape, shared or not


def test_flags_keep_their_names_and_defaults():
    from absl import flags

    values = flags.FlagValues()
    options.define_flags(ablations.AblationOptions, values)
    values(["run_ablations.py", "--output_dir=out"])
    assert {
        name: values[name].value
        for name in (
            "study",
            "num_train_steps",
            "tasks",
            "variants",
            "random_seed",
            "dupe_factor",
            "seeds",
            "eval_every_steps",
        )
    } == {
        "study": "sharing",
        "num_train_steps": 1200,
        "tasks": list(ablations.PAPER_TASKS),
        "variants": [],
        "random_seed": 12345,
        "dupe_factor": 10,
        "seeds": 1,
        "eval_every_steps": 200,
    }
    o = options.from_flags(ablations.AblationOptions, values)
    assert o.tasks == ablations.PAPER_TASKS and o.smoothness_checkpoints == ()


@pytest.mark.parametrize(
    "change,message",
    [
        (dict(study="vocab"), "--study='vocab': expected one of embedding_size, sharing"),
        (dict(tasks=("squad_v3",)), "--tasks: unknown squad_v3"),
        (dict(variants=("L=3",)), "--variants: 'L=3' not in study 'layers'"),
        (dict(num_train_steps=5), "--num_train_steps=5: expected an integer >= 10"),
        (dict(seeds=0), "--seeds=0: expected an integer >= 1"),
        (
            dict(smoothness_checkpoints=("a=b",)),
            "--smoothness_checkpoints: only with --study=smoothness, not --study=layers",
        ),
    ],
)
def test_bad_options(tmp_path, change, message):
    o = ablations.AblationOptions(**{"study": "layers", "output_dir": str(tmp_path), **change})
    with pytest.raises(UserError, match=re.escape(message)):
        ablations.resolve(o)


def _png(path):
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 5_000


@pytest.fixture(scope="module")
def output_dir(tmp_path_factory):
    """One folder for the studies below, so that they build the demo data once per seed,
    from the first documents of each demo corpus part (quick to build)."""
    demo = tmp_path_factory.mktemp("demo")
    (demo / "corpus").mkdir()
    for part in sorted((ablations.DEMO_DIR / "corpus").glob("part-*.txt")):
        documents = part.read_text().split("\n\n")[:100]
        (demo / "corpus" / part.name).write_text("\n\n".join(documents) + "\n")
    (demo / "spm.model").symlink_to(ablations.DEMO_DIR / "spm.model")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pretraining, "DEMO_DIR", demo)
        patch.setattr(ablations, "DEMO_DIR", demo)
        yield tmp_path_factory.mktemp("ablations")


def test_small_study_with_seeds_resumes_and_warm_starts(output_dir, caplog, monkeypatch):
    pytest.importorskip("matplotlib")
    caplog.set_level(logging.INFO)
    o = ablations.AblationOptions(
        study="layers",
        output_dir=str(output_dir),
        num_train_steps=10,
        tasks=(),
        dupe_factor=1,
        variants=("L=1", "L=2"),
        seeds=2,
        eval_every_steps=5,
    )
    rows = ablations.run(o)
    assert [(r["label"], r["random_seed"], r["folder"]) for r in rows] == [
        ("L=1", 12345, "00/seed12345"),
        ("L=2", 12345, "01/seed12345"),
        ("L=1", 12346, "00/seed12346"),
        ("L=2", 12346, "01/seed12346"),
    ]
    for r in rows:
        assert r["num_train_steps"] == 10 and r["tasks"] == {}
        for key in ("masked_lm_accuracy", "sop_accuracy", "nsp_accuracy"):
            assert 0.0 <= r[key] <= 1.0
        # The learning curve: start, every 5 steps, end; its last point is the final model.
        assert r["curve"]["global_step"] == [0, 5, 10]
        assert r["curve"]["masked_lm_accuracy"][-1] == pytest.approx(r["masked_lm_accuracy"])
    assert rows[0]["curve"]["masked_lm_accuracy"][0] < 0.01  # random initialisation
    assert rows[0]["masked_lm_accuracy"] != rows[2]["masked_lm_accuracy"]  # other seed
    # Each seed's L=2 started from the same seed's L=1.
    study = output_dir / "layers"
    for seed in (12345, 12346):
        assert any(
            "--init_checkpoint: loaded" in m
            and os.path.join("layers", "00", f"seed{seed}", "pretrain") in m
            for m in caplog.messages
        )
    config = json.loads(
        (study / "01" / "seed12345" / "pretrain" / "albert_config.json").read_text()
    )
    assert config["num_hidden_layers"] == 2
    assert json.loads((study / "results.json").read_text()) == rows
    text = (study / "results.md").read_text()
    assert "| L=1 | 2 | 0.33M | " in text and "seeds 12345, 12346" in text
    for name in ("results.png", "learning_curves.png"):
        _png(study / name)
    # Both held-out sets are there (the NSP accuracy reads one); NSP training data is not
    # built for a study that trains only on SOP.
    for seed in (12345, 12346):
        assert sorted(os.listdir(output_dir / f"data_sop_seed{seed}_dupe1")) == [
            "eval.tfrecord",
            "train.tfrecord",
        ]
        assert os.listdir(output_dir / f"data_nsp_seed{seed}_dupe1") == ["eval.tfrecord"]

    # A second run finds every (row, seed) done and pretrains nothing.
    monkeypatch.setattr(ablations, "pretrain", lambda *a, **k: pytest.fail("pretrained again"))
    assert ablations.run(o) == rows

    # Resuming with other settings would mix them in one table.
    with pytest.raises(
        UserError,
        match=r"row 'L=1' \(seed 12345\) was run with "
        r"num_train_steps=10 \(now num_train_steps=20\)",
    ):
        ablations.run(dataclasses.replace(o, num_train_steps=20))

    # L=8 starts from L=4, which has not run.
    with pytest.raises(UserError, match="run 'L=4' with seed 12345 first"):
        ablations.run(dataclasses.replace(o, variants=("L=8",)))


def test_warm_start_reads_rows_of_the_single_seed_layout(monkeypatch, tmp_path):
    """Rows written before --seeds have no "folder": their run is <index>/pretrain."""
    asked = []
    monkeypatch.setattr(
        ablations, "_latest_checkpoint", lambda folder: asked.append(folder) or f"{folder}/ckpt-10"
    )
    layers = ablations.STUDIES["layers"]
    old = [{"label": "L=1", "random_seed": 12345}]
    assert ablations._warm_start(layers, 1, 12345, old, "s") == "s/00/pretrain/ckpt-10"
    new = [{"label": "L=2", "random_seed": 7, "folder": "01/seed7"}]
    assert ablations._warm_start(layers, 2, 7, new, "s") == "s/01/seed7/pretrain/ckpt-10"
    with pytest.raises(UserError, match="run 'L=2' with seed 12345 first"):
        ablations._warm_start(layers, 2, 12345, new, "s")

    # Rows from before seeds were recorded count as run with --random_seed.
    results = tmp_path / "results.json"
    results.write_text(json.dumps(old + [{"label": "L=2"}]))
    assert ablations.read_rows(results, 7) == old + [{"label": "L=2", "random_seed": 7}]
    assert ablations.read_rows(tmp_path / "absent.json", 7) == []


def test_smoothness_study_and_given_checkpoints(output_dir, monkeypatch, caplog):
    pytest.importorskip("matplotlib")
    o = ablations.AblationOptions(
        study="smoothness",
        output_dir=str(output_dir),
        num_train_steps=10,
        dupe_factor=1,
        eval_every_steps=0,
        variants=("all-shared",),
        smoothness_max_sequences=6,
    )
    rows = ablations.run(o)  # default --tasks: ignored, nothing is fine-tuned
    assert [(r["label"], r["tasks"], "curve" in r) for r in rows] == [("all-shared", {}, False)]
    measured = rows[0]["smoothness"]
    assert len(measured["l2_distance"]) == len(measured["angle_degrees"]) == 4
    assert 6 * 10 < measured["tokens"] <= 6 * 128
    assert all(0 < a < 90 for a in measured["angle_degrees"])
    study = output_dir / "smoothness"
    assert "## Per layer (Figure 1)" in (study / "results.md").read_text()
    _png(study / "smoothness.png")
    assert not (study / "learning_curves.png").exists()

    # The model given by path (its run folder: our checkpoint; its TF1-format prefix)
    # measures the same; without matplotlib the numbers are still written.
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    caplog.set_level(logging.INFO)
    given, run = output_dir / "given", study / "00" / "seed12345" / "pretrain"
    text = ablations.measure_checkpoints(
        dataclasses.replace(
            o,
            output_dir=str(given),
            smoothness_checkpoints=(f"folder={run}", f"prefix={run / 'model.ckpt-10'}"),
        )
    )
    assert sorted(os.listdir(given)) == ["smoothness.json", "smoothness.md"]
    assert (given / "smoothness.md").read_text() == text
    assert "| Layer | folder L2 | prefix L2 | folder angle (°) | prefix angle (°) |" in text
    by_path = json.loads((given / "smoothness.json").read_text())
    for label in ("folder", "prefix"):
        for key in ("l2_distance", "angle_degrees", "tokens"):
            assert by_path[label][key] == pytest.approx(measured[key], rel=1e-6)
    assert "pip install -e '.[plots]' for the PNG pictures" in caplog.messages


def test_script_rejects_unknown_variant(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "run_ablations.py"),
            f"--output_dir={tmp_path}",
            "--study=sharing",
            "--variants=E=64 everything-shared",
            "--tasks=",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
    )
    assert result.returncode == 1
    assert (
        "run_ablations.py: error: --variants: 'E=64 everything-shared' not in study 'sharing'"
    ) in result.stderr
    assert not os.listdir(tmp_path)
