"""The pretraining study (`run_ablations.py --study=pretraining`): does pretraining with
albert_tf transfer, on real text?

The rows (ablations.pretraining_rows of --pretraining_steps, default 4500 and 9000) are
from scratch and pretrained for increasing budgets of steps. Per seed one pretraining run
of the largest budget is made on the real-text corpus (data/get_real_text.py; its
`pretrain` part) with SETTINGS,
keeping a checkpoint every `--eval_every_steps` (default EVERY) and measuring held-out
masked-LM and sentence-order accuracy there (on the `task_dev` part, which pretraining
never sees): the learning curve. A budget's row starts from that run's checkpoint at its
step (a budget is a point of one run, with the largest budget's schedule); the scratch
row from random initialisation. Every row is fine-tuned, with the same seed, on the
corpus's GLUE-format tasks (albert_tf/research/real_text_tasks.py) with FINE_TUNING; the
best dev score counts, as in the other studies.

Rows are written as the other studies write theirs (results.json; results.md, here with
mean ± standard error; results.png, learning_curves.png) and
score_vs_steps.png: each task's fine-tuned score against the pretraining budget.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time

from albert_tf import fileio
from albert_tf.cpu import speed_paths
from albert_tf.errors import UserError
from albert_tf.options import check
from albert_tf.research import ablation_report, ablations, plots, real_text_tasks
from albert_tf.run.output_folder import OutputFolder

_logger = logging.getLogger(__name__)

# Pretraining: sequence length 64 (Austen's sentences are about 30 pieces long, so a
# sequence holds two or three of them), LAMB at batch 64 and learning rate 0.01, masks of
# single whole words. The model sits on a plateau near what the previous piece alone
# predicts (about 14% held-out masked-LM accuracy) for its first 2000-3000 steps and
# leaves it after; docs/ablations.md has the measurements that chose these.
SETTINGS = dict(
    max_seq_length=64,
    max_predictions_per_seq=10,
    train_batch_size=64,
    eval_batch_size=32,
    learning_rate=0.01,
    num_warmup_steps=300,
    iterations_per_loop=50,
    max_eval_steps=20,
)
NGRAM = 1  # the longest masked span, in words (the original's default is 3)
DUPE_FACTOR = 40  # maskings of the corpus: 9000 steps x 64 sequences see about 46 passes
SEEDS = 3  # pretraining seeds per row unless --seeds is given: the study's mean ± SE
EVERY = 1500  # a checkpoint (and a point of the learning curve) every this many steps
# Fine-tuning (AdamW): a small learning rate with warmup over about 8 epochs of 1000
# examples; dev every 50 steps.
FINE_TUNING = dict(
    max_seq_length=64,
    train_batch_size=32,
    eval_batch_size=64,
    learning_rate=1e-4,
    train_step=250,
    warmup_step=25,
    save_checkpoints_steps=50,
)
TASK_TITLES = {"SST-2": "later novel acc", "MRPC": "next sentence acc", "CoLA": "word order mcc"}


def study_rows(o) -> list:
    """The rows of --pretraining_steps that --variants picks (all by default); UserError
    naming the bad flag."""
    try:
        budgets = sorted({int(b) for b in o.pretraining_steps})
    except ValueError:
        budgets = []
    if not budgets or budgets[0] < 1:
        raise UserError(
            f"--pretraining_steps={','.join(o.pretraining_steps)}: expected positive "
            "integers (steps), e.g. 4500,9000"
        )
    rows = ablations.pretraining_rows(budgets)
    labels = [v.label for v in rows]
    missing = [v for v in o.variants if v not in labels]
    if missing:
        raise UserError(
            f"--variants: {', '.join(map(repr, missing))} not in the pretraining study "
            f"({'; '.join(labels)})"
        )
    return [v for v in rows if not o.variants or v.label in o.variants]


def _check(o) -> tuple[list, tuple, int]:
    """(variants, tasks, checkpoint interval); UserError naming the bad flag."""
    check(o)
    if o.smoothness_checkpoints:
        raise UserError("--smoothness_checkpoints: only with --study=smoothness")
    variants = study_rows(o)
    if not o.real_text_dir:
        raise UserError(
            "--real_text_dir: required by --study=pretraining (the folder of "
            "`python3 data/get_real_text.py --output_dir=...`)"
        )
    for name in ("spm.model", "corpus/pretrain.txt", "corpus/task_dev.txt"):
        if not fileio.exists(os.path.join(o.real_text_dir, name)):
            raise UserError(
                f"--real_text_dir={o.real_text_dir}: no {name}; run data/get_real_text.py first"
            )
    tasks = tuple(o.tasks) if "tasks" in o.given else _folder_tasks(o.real_text_dir)
    unknown = [t for t in tasks if t not in real_text_tasks.TASKS]
    if unknown:
        raise UserError(
            f"--tasks: {', '.join(unknown)} not built from the real text; "
            f"known: {', '.join(real_text_tasks.TASKS)}"
        )
    for task in tasks:
        name = f"glue/{task}/train.tsv"
        if not fileio.exists(os.path.join(o.real_text_dir, name)):
            raise UserError(
                f"--real_text_dir={o.real_text_dir}: no {name}; run data/get_real_text.py "
                "again (it writes every task of the study)"
            )
    every = o.eval_every_steps if "eval_every_steps" in o.given else EVERY
    budgets = [v.pretrain_steps for v in variants if v.pretrain_steps]
    if budgets and (every == 0 or any(b % every for b in budgets)):
        raise UserError(
            f"--eval_every_steps={every}: must divide every pretraining budget "
            f"({', '.join(map(str, budgets))}), since each budget is a kept checkpoint"
        )
    return variants, tasks, every


def _folder_tasks(real_text_dir) -> tuple[str, ...]:
    """The tasks data/get_real_text.py built in `real_text_dir` (source.json's "tasks":
    no SST-2 from --text_file); every task for a folder written before it said."""
    path = os.path.join(real_text_dir, "source.json")
    source = (
        fileio.read_json(path, f"--real_text_dir={real_text_dir}") if fileio.exists(path) else {}
    )
    return tuple(source.get("tasks", real_text_tasks.TASKS))


def _dupe_factor(o) -> int:
    return o.dupe_factor if "dupe_factor" in o.given else DUPE_FACTOR


def _seeds(o) -> int:
    return o.seeds if "seeds" in o.given else SEEDS


def _records(o, seed) -> dict:
    """{"sop": (train TFRecord, held-out TFRecord)} of the real-text corpus at `seed`,
    built once."""
    from albert_tf.data import create_pretraining_data as cpd
    from albert_tf.data import pretraining_instances as pi

    folder = os.path.join(
        o.output_dir, f"data_real_text_seed{seed}_dupe{_dupe_factor(o)}_ngram{NGRAM}"
    )
    config = pi.MaskingConfig(
        max_seq_length=SETTINGS["max_seq_length"],
        max_predictions_per_seq=SETTINGS["max_predictions_per_seq"],
        ngram=NGRAM,
    )
    fileio.makedirs(folder)
    out = {}
    for split, part, dupe in (
        ("train", "pretrain", _dupe_factor(o)),
        ("eval", "task_dev", 1),
    ):
        out[split] = os.path.join(folder, f"{split}.tfrecord")
        if not fileio.exists(out[split]):
            _logger.info("building real-text %s data %s", split, out[split])
            cpd.create_pretraining_data(
                os.path.join(o.real_text_dir, "corpus", f"{part}.txt"),
                out[split],
                config,
                spm_model_file=os.path.join(o.real_text_dir, "spm.model"),
                do_lower_case=True,
                dupe_factor=dupe,
                random_seed=seed + (split == "eval"),
            )
    return {"sop": (out["train"], out["eval"])}


def fine_tune(task, o, init_checkpoint, config_file, output_dir, seed) -> dict:
    """Fine-tunes on one real-text task (FINE_TUNING); returns the run's summary."""
    from albert_tf.tasks import classifier

    return classifier.run(
        classifier.ClassifierOptions(
            task_name=task,
            output_dir=output_dir,
            data_dir=os.path.join(o.real_text_dir, "glue"),
            init_checkpoint=init_checkpoint,
            albert_config_file=config_file,
            spm_model_file=os.path.join(o.real_text_dir, "spm.model"),
            do_train=True,
            do_eval=True,
            random_seed=seed,
            speed_paths=o.speed_paths,
            dtype=o.dtype,
            **FINE_TUNING,
        )
    )


def _checkpoint_at(folder, step) -> str:
    """The pretraining run's checkpoint at `step`."""
    found = dict(OutputFolder(folder).contents().trained_checkpoints())
    if step not in found:
        raise UserError(f"{folder}: no checkpoint at step {step} (kept: {sorted(found)})")
    return found[step]


def _row(variant, seed, config, curve, settings) -> dict:
    """A results.json row before fine-tuning: the held-out accuracies at the budget's step
    (step 0: the random initialisation the scratch row starts from)."""
    step = variant.pretrain_steps
    at = curve["global_step"].index(step) if step in curve["global_step"] else None
    row = {
        "label": variant.label,
        "random_seed": seed,
        "folder": f"seed{seed}",
        "parameters": config.num_parameters(),
        "pretrain_steps": step,
        **settings,
        "tasks": {},
    }
    if at is not None:
        row["masked_lm_accuracy"] = curve["masked_lm_accuracy"][at]
        row["sop_accuracy"] = curve["sentence_order_accuracy"][at]
    return row


def run(o) -> list[dict]:
    """Runs the study's (row, seed) pairs not yet in results.json, seed by seed; rewrites
    results.json, results.md and the pictures after each; returns all rows."""
    import sentencepiece as spm

    speed_paths.use(o.speed_paths)
    variants, tasks, every = _check(o)
    study_dir = os.path.join(o.output_dir, o.study)
    fileio.makedirs(study_dir)
    results_path = os.path.join(study_dir, "results.json")
    rows = ablations.read_rows(results_path, o.random_seed)
    all_rows = ablations.pretraining_rows(int(b) for b in o.pretraining_steps)
    longest = max(v.pretrain_steps for v in all_rows)
    settings = {"num_train_steps": longest, "tasks": sorted(tasks), "dupe_factor": _dupe_factor(o)}
    ablations._check_same_settings(rows, settings, results_path)
    vocab_size = spm.SentencePieceProcessor(
        model_file=os.path.join(o.real_text_dir, "spm.model")
    ).get_piece_size()
    base = ablations.Variant("pretrained", {})
    config = ablations.variant_config(base, vocab_size)
    for seed in range(o.random_seed, o.random_seed + _seeds(o)):
        done = {r["label"] for r in rows if r["random_seed"] == seed}
        todo = [v for v in variants if v.label not in done]
        if not todo:
            continue
        pretrain_dir = os.path.join(study_dir, f"seed{seed}", "pretrain")
        _logger.info("pretraining: seed %d, %d steps on real text", seed, longest)
        start = time.time()
        ablations.pretrain(
            base,
            config,
            pretrain_dir,
            _records(o, seed),
            longest,
            seed,
            eval_every_steps=every,
            common=ablations.run_settings(o),
            settings=SETTINGS,
        )
        # A rerun after an interruption finds the pretraining done; its rows keep the time
        # the pretraining took, not the seconds the rerun needed to find it complete.
        earlier = [r["pretrain_seconds"] for r in rows if r["random_seed"] == seed]
        pretrain_seconds = earlier[0] if earlier else round(time.time() - start, 1)
        curve = ablations.learning_curve(pretrain_dir)
        config_file = os.path.join(pretrain_dir, "albert_config.json")
        for variant in todo:
            row = _row(
                variant,
                seed,
                config,
                curve,
                {k: settings[k] for k in ("num_train_steps", "dupe_factor")},
            )
            row["pretrain_seconds"] = pretrain_seconds
            if variant.pretrain_steps == longest:
                row["curve"] = curve
            init = (
                _checkpoint_at(pretrain_dir, variant.pretrain_steps)
                if variant.pretrain_steps
                else None
            )
            for task in tasks:
                start = time.time()
                out = os.path.join(study_dir, f"seed{seed}", f"{variant.pretrain_steps:05d}", task)
                summary = fine_tune(task, o, init, config_file, out, seed)
                row["tasks"][task] = ablations.task_result(summary, start)
            rows.append(row)
            fileio.atomic_write_text(results_path, json.dumps(rows, indent=2) + "\n")
            write_report(o.study, study_dir, rows, all_rows)
            _logger.info(
                "pretraining: %s (seed %d) done: %s",
                variant.label,
                seed,
                json.dumps({k: v for k, v in row.items() if k != "curve"}),
            )
    if rows:
        write_report(o.study, study_dir, rows, all_rows)
    return rows


def score_vs_steps(rows, task_titles) -> dict[str, tuple[list, list]]:
    """column title -> (pretraining steps, [(mean, std, n) of the fine-tuned score x100 at
    each]) over the rows' seeds."""
    by_task = {}
    for row in rows:
        for column, value in ablation_report.row_scores(row, task_titles).items():
            if column in task_titles.values() or column == "Avg":
                by_task.setdefault(column, {}).setdefault(row["pretrain_steps"], []).append(value)
    return {
        column: (sorted(by_step), [ablation_report.mean_std(by_step[s]) for s in sorted(by_step)])
        for column, by_step in by_task.items()
    }


def _standard_error(stats):
    """(mean, std, n) -> (mean, std / sqrt(n), n); std None stays None."""
    mean, std, n = stats
    return mean, None if std is None else std / math.sqrt(n), n


def _chance(rows) -> dict[str, float]:
    """Legend label -> score of guessing, for the metrics of the rows' tasks: every dev set
    is balanced, so accuracy 50 (x100) and Matthews correlation 0."""
    tasks = {t for row in rows for t in row["tasks"]}
    out = {}
    if tasks - {"CoLA"}:
        out["chance (accuracy)"] = 50.0
    if "CoLA" in tasks:
        out["chance (MCC)"] = 0.0
    return out


def write_report(study, study_dir, rows, variants) -> list[str]:
    """The other studies' results.md and pictures, plus score_vs_steps.png, for the
    study's rows `variants`."""
    written = ablation_report.write_study_report(
        study_dir,
        study,
        rows,
        [v.label for v in variants],
        {v.label: v.reference for v in variants if v.reference},
        TASK_TITLES,
        standard_error=True,
    )
    if plots.available():
        path = os.path.join(study_dir, "score_vs_steps.png")
        with_standard_errors = {
            column: (steps, [_standard_error(s) for s in stats])
            for column, (steps, stats) in score_vs_steps(rows, TASK_TITLES).items()
        }
        plots.score_vs_steps(
            path,
            f"{study}: fine-tuned dev score vs pretraining steps (mean ± standard error)",
            with_standard_errors,
            chance=_chance(rows),
        )
        written.append(path)
    return written


__all__ = [
    "SETTINGS",
    "FINE_TUNING",
    "EVERY",
    "TASK_TITLES",
    "run",
    "score_vs_steps",
    "write_report",
]
