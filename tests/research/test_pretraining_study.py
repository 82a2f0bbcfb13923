"""The pretraining study: its rows, its flags' errors, and what it writes, with pretraining
and fine-tuning stubbed (each stub records what it was asked to do)."""

import json
import os
import shutil

import pytest

from albert_tf.errors import UserError
from albert_tf.research import ablations, pretraining_study

from repo_paths import REPO_ROOT

# The held-out accuracies a stubbed pretraining run reports at each kept checkpoint.
CURVE = {
    "global_step": [0, 1500, 3000, 4500, 6000, 7500, 9000],
    "masked_lm_accuracy": [0.0, 0.05, 0.10, 0.12, 0.14, 0.15, 0.16],
    "sentence_order_accuracy": [0.5, 0.55, 0.6, 0.62, 0.64, 0.66, 0.7],
}


def test_rows_are_scratch_and_budgets_compared_with_scratch():
    rows = ablations.STUDIES["pretraining"]
    assert [(v.label, v.pretrain_steps, v.reference) for v in rows] == [
        ("from scratch", 0, None),
        ("pretrained 4500 steps", 4500, "from scratch"),
        ("pretrained 9000 steps", 9000, "from scratch"),
    ]
    o = ablations.AblationOptions(
        study="pretraining",
        output_dir="unused",
        pretraining_steps=("4500", "250"),
        variants=("pretrained 4500 steps",),
    )
    assert [v.pretrain_steps for v in pretraining_study.study_rows(o)] == [4500]


@pytest.fixture
def real_text_dir(tmp_path):
    folder = tmp_path / "austen"
    (folder / "corpus").mkdir(parents=True)
    for part in ("pretrain", "task_dev"):
        (folder / "corpus" / f"{part}.txt").write_text("A sentence.\n")
    for task in ("SST-2", "MRPC", "CoLA"):
        (folder / "glue" / task).mkdir(parents=True)
        (folder / "glue" / task / "train.tsv").write_text("")
    shutil.copy(os.path.join(REPO_ROOT, "data", "demo", "spm.model"), folder / "spm.model")
    return str(folder)


def _options(tmp_path, real_text_dir, **flags):
    o = ablations.AblationOptions(
        study="pretraining",
        output_dir=str(tmp_path / "out"),
        real_text_dir=real_text_dir,
        **flags,
    )
    o.given = frozenset(["study", "output_dir", "real_text_dir", *flags])
    return o


@pytest.fixture
def stubs(monkeypatch):
    calls = {"pretrain": [], "fine_tune": []}

    def pretrain(variant, config, folder, data, steps, seed, **kwargs):
        calls["pretrain"].append((seed, steps, kwargs["eval_every_steps"], data))
        calls.setdefault("common", []).append(kwargs["common"])

    def fine_tune(task, o, init, config_file, output_dir, seed):
        calls["fine_tune"].append((task, init, seed))
        step = int(init.rsplit("-", 1)[1]) if init else 0
        # Scores that grow with the budget and differ by task and seed.
        value = 0.5 + step / 10000 + (0.1 if task == "MRPC" else 0) + (seed - 7) / 100
        return {"best": {"key": "eval_accuracy", "value": value, "global_step": 50}}

    monkeypatch.setattr(ablations, "pretrain", pretrain)
    monkeypatch.setattr(ablations, "learning_curve", lambda folder: CURVE)
    monkeypatch.setattr(pretraining_study, "_records", lambda o, seed: {"sop": (seed, "eval")})
    monkeypatch.setattr(pretraining_study, "fine_tune", fine_tune)
    monkeypatch.setattr(
        pretraining_study, "_checkpoint_at", lambda folder, step: f"{folder}/model.ckpt-{step}"
    )
    return calls


def test_study_rows_results_and_resume(tmp_path, real_text_dir, stubs):
    o = _options(tmp_path, real_text_dir, random_seed=7, seeds=2, dtype="mixed_float16")
    rows = pretraining_study.run(o)
    # One pretraining run of the largest budget per seed, checkpoints every EVERY steps.
    assert [c[:3] for c in stubs["pretrain"]] == [(7, 9000, 1500), (8, 9000, 1500)]
    # The study's --dtype and --speed_paths reach every run.
    assert stubs["common"] == [{"speed_paths": "auto", "dtype": "mixed_float16"}] * 2
    first = [c for c in stubs["fine_tune"] if c[2] == 7]
    assert [(task, init and init.rsplit("/", 1)[1]) for task, init, _ in first] == [
        (task, init)
        for init in (None, "model.ckpt-4500", "model.ckpt-9000")
        for task in ("SST-2", "MRPC", "CoLA")
    ]
    by_label = {(r["label"], r["random_seed"]): r for r in rows}
    scratch, budget = by_label[("from scratch", 7)], by_label[("pretrained 4500 steps", 7)]
    assert (scratch["masked_lm_accuracy"], scratch["sop_accuracy"]) == (0.0, 0.5)
    assert (budget["masked_lm_accuracy"], budget["sop_accuracy"]) == (0.12, 0.62)
    assert budget["tasks"]["MRPC"]["value"] == pytest.approx(0.5 + 0.45 + 0.1)
    assert "curve" in by_label[("pretrained 9000 steps", 8)] and "curve" not in budget
    study_dir = tmp_path / "out" / "pretraining"
    assert json.loads((study_dir / "results.json").read_text()) == rows
    text = (study_dir / "results.md").read_text()
    assert "standard error of the mean" in text
    # Later novel accuracy from scratch: seeds 7 and 8 -> 50 and 51: mean 50.5, SE 0.5.
    assert "| from scratch (ref) | 2 |" in text and "| 50.5 ± 0.5 |" in text
    for picture in ("results.png", "learning_curves.png", "score_vs_steps.png"):
        assert (study_dir / picture).stat().st_size > 0
    # A row lost to an interruption is run again and keeps its seed's pretraining time.
    results = study_dir / "results.json"
    seconds = by_label[("from scratch", 8)]["pretrain_seconds"] = 1234.5
    rows = [r for r in rows if (r["label"], r["random_seed"]) != ("pretrained 9000 steps", 8)]
    results.write_text(json.dumps(rows))
    again = pretraining_study.run(_options(tmp_path, real_text_dir, random_seed=7, seeds=2))
    assert [(r["label"], r["random_seed"], r["pretrain_seconds"]) for r in again[-1:]] == [
        ("pretrained 9000 steps", 8, seconds)
    ]
    # Resumed with one more seed: only seed 9 runs.
    stubs["fine_tune"].clear()
    pretraining_study.run(_options(tmp_path, real_text_dir, random_seed=7, seeds=3))
    assert {seed for _, _, seed in stubs["fine_tune"]} == {9}


def test_the_study_runs_three_seeds_unless_told(tmp_path, real_text_dir, stubs):
    pretraining_study.run(_options(tmp_path, real_text_dir, random_seed=7))
    assert [c[0] for c in stubs["pretrain"]] == [7, 8, 9]
    stubs["pretrain"].clear()
    pretraining_study.run(_options(tmp_path / "one", real_text_dir, random_seed=7, seeds=1))
    assert [c[0] for c in stubs["pretrain"]] == [7]


def test_score_vs_steps_averages_seeds():
    rows = [
        {"pretrain_steps": s, "tasks": {"MRPC": {"value": v}}}
        for s, v in ((0, 0.5), (0, 0.6), (500, 0.7), (500, 0.9))
    ]
    steps, stats = pretraining_study.score_vs_steps(rows, pretraining_study.TASK_TITLES)[
        "next sentence acc"
    ]
    assert steps == [0, 500]
    assert [round(m, 6) for m, _, _ in stats] == [55.0, 80.0]
    assert [round(s, 6) for _, s, _ in stats] == [round(50**0.5, 6), round(200**0.5, 6)]


def test_a_folder_of_an_older_get_real_text_lacks_the_word_order_task(tmp_path, real_text_dir):
    os.remove(os.path.join(real_text_dir, "glue", "CoLA", "train.tsv"))
    with pytest.raises(UserError, match=r"--real_text_dir=.*: no glue/CoLA/train.tsv; run data/"):
        pretraining_study.run(_options(tmp_path, real_text_dir))
    # Its other tasks still run alone.
    pretraining_study._check(_options(tmp_path, real_text_dir, tasks=("SST-2", "MRPC")))


def test_a_folder_of_own_text_runs_the_tasks_it_holds(tmp_path, real_text_dir):
    shutil.rmtree(os.path.join(real_text_dir, "glue", "SST-2"))
    with open(os.path.join(real_text_dir, "source.json"), "w") as f:
        json.dump({"tasks": ["MRPC", "CoLA"]}, f)
    _, tasks, _ = pretraining_study._check(_options(tmp_path, real_text_dir))
    assert tasks == ("MRPC", "CoLA")
    with pytest.raises(UserError, match=r"no glue/SST-2/train.tsv"):
        pretraining_study._check(_options(tmp_path, real_text_dir, tasks=("SST-2",)))


def test_chance_lines_follow_the_tasks_metrics():
    def rows(*tasks):
        return [{"tasks": {t: {} for t in tasks}}]

    assert pretraining_study._chance(rows("SST-2", "MRPC")) == {"chance (accuracy)": 50.0}
    assert pretraining_study._chance(rows("CoLA")) == {"chance (MCC)": 0.0}
    assert pretraining_study._chance(rows("MRPC", "CoLA")) == {
        "chance (accuracy)": 50.0,
        "chance (MCC)": 0.0,
    }


def test_bad_flags(tmp_path, real_text_dir):
    with pytest.raises(UserError, match="--real_text_dir: required by --study=pretraining"):
        pretraining_study.run(_options(tmp_path, None))
    with pytest.raises(UserError, match=r"--real_text_dir=.*: no spm.model"):
        pretraining_study.run(_options(tmp_path, str(tmp_path)))
    with pytest.raises(UserError, match="--tasks: RTE not built from the real text"):
        pretraining_study.run(_options(tmp_path, real_text_dir, tasks=("RTE",)))
    with pytest.raises(UserError, match="--eval_every_steps=200: must divide every"):
        pretraining_study.run(_options(tmp_path, real_text_dir, eval_every_steps=200))
    with pytest.raises(UserError, match="--pretraining_steps=500,x: expected positive"):
        pretraining_study.run(_options(tmp_path, real_text_dir, pretraining_steps=("500", "x")))
    with pytest.raises(UserError, match="--variants: 'pretrained 9 steps' not in the"):
        pretraining_study.run(_options(tmp_path, real_text_dir, variants=("pretrained 9 steps",)))


def test_a_budget_starts_from_the_pretraining_runs_checkpoint_at_its_step(tmp_path):
    # The study's other tests stub this out; a budget's row must find the kept checkpoint
    # of a real pretraining folder (both checkpoint formats), and name the ones kept when
    # its step is missing.
    for name in ("model.ckpt-1500", "ckpt-3000", "model.ckpt-best"):
        (tmp_path / f"{name}.index").write_text("")
    assert pretraining_study._checkpoint_at(str(tmp_path), 1500) == str(
        tmp_path / "model.ckpt-1500"
    )
    assert pretraining_study._checkpoint_at(str(tmp_path), 3000) == str(tmp_path / "ckpt-3000")
    with pytest.raises(UserError, match=r"no checkpoint at step 4500 \(kept: \[1500, 3000\]\)"):
        pretraining_study._checkpoint_at(str(tmp_path), 4500)
