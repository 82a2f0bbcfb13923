"""The paper's ablation studies at small scale (Tables 3, 4, 5, 8, 11 and Figure 1).

A study is a list of variants of the demo model (`albert_tiny`: L = 4, H = 128,
E = 64, F = 512, all layers shared). Every variant is pretrained on the demo
corpus with the demo's settings (`pretraining.DEMO_SETTINGS`, LAMB) once per
seed (`--seeds`: random_seed, random_seed + 1, ...; the TFRecords are built once
per seed), then measured as the paper measures:

- intrinsic (Table 5's columns): masked-LM accuracy, and the sentence head's
  accuracy on held-out sentence-order (SOP) pairs and on held-out next-sentence
  (NSP, random other document) pairs;
- a learning curve: held-out masked-LM accuracy every `--eval_every_steps`
  (Figure 2), read from the run's eval_results.txt;
- downstream: fine-tuned on demo tasks (the paper's SQuAD1.1, SQuAD2.0, MNLI,
  SST-2 and RACE by default) with the README's demo settings; the best
  checkpoint on dev counts, as in the original;
- the `smoothness` study (Figure 1) measures, instead of fine-tuning, how much
  each layer changes its input (albert_tf/research/smoothness.py) for an all-shared and a
  not-shared model of the same shape; with `--smoothness_checkpoints` it trains
  nothing and measures the given checkpoints (e.g. released ALBERT and BERT).

Each finished (variant, seed) is appended to `<output_dir>/<study>/results.json`
and `results.md` (mean ± std over seeds, albert_tf/research/ablation_report.py) and the
pictures are rewritten, so an interrupted study resumes at the first unfinished
(variant, seed).

The `pretraining` study (real text instead of the demo corpus, budgets of one run instead
of variants of the model) is run by albert_tf/research/pretraining_study.py with these
options and this module's pretraining and report machinery.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time

from albert_tf import fileio
from albert_tf.cpu import speed_paths
from albert_tf.cpu.speed_paths import SpeedPathOptions
from albert_tf.errors import UserError
from albert_tf.model.config import AlbertConfig, preset
from albert_tf.options import REQUIRED, check, option
from albert_tf.research import ablation_report, plots, smoothness
from albert_tf.run import selection
from albert_tf.run.output_folder import OutputFolder
from albert_tf.tasks import pretraining
from albert_tf.weights import checkpoints

_logger = logging.getLogger(__name__)

DEMO_DIR = pretraining.DEMO_DIR
TINY = preset("albert_tiny")
PAPER_TASKS = ("squad_v1", "squad_v2", "MNLI", "SST-2", "race")


@dataclasses.dataclass(frozen=True)
class Variant:
    """One row of a study.

    label: the row name. config: AlbertConfig changes to the demo model (may
    include `cross_layer_sharing`). sentence_task: pretraining pairs, "sop" or
    "nsp". sentence_order_loss_weight: 0 trains the masked LM alone.
    warm_start: initialise from the previous row's final weights (Table 11).
    reference: the label of the row this one is compared with (the paper's
    baseline; None for that row itself). pretrain_steps: the pretraining study's budget
    (0: from scratch); None in the paper's studies (--num_train_steps).
    """

    label: str
    config: dict
    sentence_task: str = "sop"
    sentence_order_loss_weight: float = 1.0
    warm_start: bool = False
    reference: str | None = None
    pretrain_steps: int | None = None


def _sharing(name: str, layers: int = TINY.num_hidden_layers) -> dict:
    """Config changes of the paper's sharing strategies (Table 4)."""
    return {
        "all-shared": {"num_hidden_groups": 1},
        "shared-attention": {"num_hidden_groups": layers, "cross_layer_sharing": "attention"},
        "shared-FFN": {"num_hidden_groups": layers, "cross_layer_sharing": "ffn"},
        "not-shared": {"num_hidden_groups": layers},
    }[name]


PRETRAINING_BUDGETS = (4500, 9000)


def pretraining_rows(budgets) -> list[Variant]:
    """The pretraining study's rows: from scratch, then pretrained for each budget (steps),
    each compared with from scratch."""
    return [
        Variant(
            "from scratch" if steps == 0 else f"pretrained {steps} steps",
            {},
            pretrain_steps=steps,
            reference=None if steps == 0 else "from scratch",
        )
        for steps in (0, *sorted(budgets))
    ]


def _compared_with(reference: str, label: str) -> str | None:
    return None if label == reference else reference


# The paper's E of 64..768 at H = 768 become 16..128 at H = 128. References: the demo model
# (all-shared, E = 64, SOP, no dropout, L = 4) wherever a study has it; Table 4 compares
# within each E.
STUDIES = {
    "embedding_size": [  # Table 3
        Variant(
            f"{sharing} E={e}",
            {"embedding_size": e, **_sharing(sharing)},
            reference=_compared_with("all-shared E=64", f"{sharing} E={e}"),
        )
        for sharing in ("not-shared", "all-shared")
        for e in (16, 32, 64, 128)
    ],
    "sharing": [  # Table 4
        Variant(
            f"E={e} {sharing}",
            {"embedding_size": e, **_sharing(sharing)},
            reference=_compared_with(f"E={e} all-shared", f"E={e} {sharing}"),
        )
        for e in (128, 64)
        for sharing in ("all-shared", "shared-attention", "shared-FFN", "not-shared")
    ],
    "sentence_loss": [  # Table 5
        Variant("None", {}, "sop", 0.0, reference="SOP"),
        Variant("NSP", {}, "nsp", reference="SOP"),
        Variant("SOP", {}, "sop"),
    ],
    "dropout": [  # Table 8
        Variant(
            "with dropout",
            {"hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1},
            reference="without dropout",
        ),
        Variant("without dropout", {}),
    ],
    "layers": [  # Table 11: each depth from 2 on starts from the previous depth's weights
        Variant(
            f"L={layers}",
            {"num_hidden_layers": layers},
            warm_start=layers > 1,
            reference=_compared_with("L=4", f"L={layers}"),
        )
        for layers in (1, 2, 4, 8)
    ],
    "smoothness": [  # Figure 1: ALBERT-style vs BERT-style sharing, same shape
        Variant(sharing, _sharing(sharing)) for sharing in ("all-shared", "not-shared")
    ],
    # Does pretraining transfer, on real text (albert_tf/research/pretraining_study.py)?
    "pretraining": pretraining_rows(PRETRAINING_BUDGETS),
}


@dataclasses.dataclass(kw_only=True)
class AblationOptions(SpeedPathOptions):
    """What run_ablations.py's flags decide (each field is also the flag)."""

    study: str = option("sharing", "Which ablation to run.", choices=STUDIES)
    output_dir: str = option(REQUIRED, "Data, models and results go here.", output="folder")
    num_train_steps: int = option(
        pretraining.DEMO_SETTINGS["num_train_steps"],
        "Pretraining steps per variant (batch 32, sequence length 128; --study=pretraining: "
        "its rows' budgets instead).",
        minimum=10,
    )
    tasks: tuple[str, ...] = option(
        PAPER_TASKS,
        "Downstream demo tasks (empty: intrinsic metrics only; the smoothness "
        "study fine-tunes nothing); known: squad_v1, squad_v2, race and the GLUE tasks.",
    )
    variants: tuple[str, ...] = option((), "Labels of the study's rows to run (default all).")
    dtype: str = option(
        "float32",
        "Keras dtype policy of every run of the study (as run_pretraining.py's --dtype).",
        choices=("float32", "mixed_bfloat16", "mixed_float16"),
    )
    random_seed: int = option(12345, "Seed of data, initialisation and order (the first seed).")
    seeds: int = option(
        1,
        "Pretraining seeds per row: random_seed, random_seed + 1, ...; "
        "results.md shows mean ± std over them (--study=pretraining: 3 unless given).",
        minimum=1,
    )
    dupe_factor: int = option(
        10, "Passes over the demo corpus when building the pretraining data.", minimum=1
    )
    eval_every_steps: int = option(
        200,
        "Held-out masked-LM accuracy every this many pretraining steps (the learning "
        "curves; each such checkpoint is kept); 0: no curve.",
        minimum=0,
    )
    pretraining_steps: tuple[str, ...] = option(
        tuple(map(str, PRETRAINING_BUDGETS)),
        "--study=pretraining: the budgets (pretraining steps) of its rows besides from "
        "scratch; one run of the largest per seed, the others are its checkpoints.",
    )
    real_text_dir: str | None = option(
        None,
        "--study=pretraining: the folder data/get_real_text.py wrote (corpus, spm.model, glue/).",
    )
    smoothness_checkpoints: tuple[str, ...] = option(
        (),
        "--study=smoothness: measure these models instead of training two, as "
        "label=path (a release folder, a run_pretraining.py output folder, a Google BERT "
        "folder with bert_config.json, or a checkpoint prefix in such a folder).",
    )
    smoothness_text_file: str | None = option(
        None,
        "--study=smoothness: held-out text (pretraining input format) to measure on; "
        "default the demo corpus part pretraining holds out.",
    )
    smoothness_max_sequences: int = option(
        256, "--study=smoothness: sequences (of 128 tokens at most) measured.", minimum=1
    )


# --------------------------------------------------------------------------------------
# Downstream tasks, with the README's demo settings
# --------------------------------------------------------------------------------------
def _squad(version_2):
    def run(init_checkpoint, output_dir, seed, common):
        from albert_tf.tasks import squad

        suffix = "v2.0" if version_2 else "v1.1"
        return squad.run(
            squad.SquadOptions(
                output_dir=output_dir,
                init_checkpoint=init_checkpoint,
                spm_model_file=str(DEMO_DIR / "spm.model"),
                train_file=str(DEMO_DIR / "squad" / f"train-{suffix}.json"),
                predict_file=str(DEMO_DIR / "squad" / f"dev-{suffix}.json"),
                version_2_with_negative=version_2,
                do_train=True,
                do_predict=True,
                max_seq_length=128,
                doc_stride=64,
                max_query_length=32,
                train_batch_size=32,
                predict_batch_size=32,
                num_train_epochs=40,
                learning_rate=5e-4,
                save_checkpoints_steps=100 if version_2 else 75,
                random_seed=seed,
                **common,
            )
        )

    return run


def _glue(task):
    def run(init_checkpoint, output_dir, seed, common):
        from albert_tf.tasks import classifier

        return classifier.run(
            classifier.ClassifierOptions(
                task_name=task,
                output_dir=output_dir,
                data_dir=str(DEMO_DIR / "glue"),
                init_checkpoint=init_checkpoint,
                spm_model_file=str(DEMO_DIR / "spm.model"),
                max_seq_length=128,
                do_train=True,
                do_eval=True,
                train_batch_size=32,
                eval_batch_size=32,
                learning_rate=1e-4,
                train_step=300,
                warmup_step=30,
                save_checkpoints_steps=50,
                random_seed=seed,
                **common,
            )
        )

    return run


def _race(init_checkpoint, output_dir, seed, common):
    from albert_tf.tasks import race

    return race.run(
        race.RaceOptions(
            data_dir=str(DEMO_DIR),
            output_dir=output_dir,
            init_checkpoint=init_checkpoint,
            spm_model_file=str(DEMO_DIR / "spm.model"),
            max_seq_length=128,
            max_qa_length=32,
            train_batch_size=32,
            eval_batch_size=32,
            learning_rate=5e-5,
            train_step=300,
            warmup_step=30,
            save_checkpoints_steps=100,
            random_seed=seed,
            **common,
        )
    )


# task -> (run(init_checkpoint, output_dir, seed, common) -> summary with "best", column
# title); common: the study's flags every run takes (`run_settings`)
TASKS = {
    "squad_v1": (_squad(False), "SQuAD1.1 F1"),
    "squad_v2": (_squad(True), "SQuAD2.0 F1"),
    "race": (_race, "RACE acc"),
    **{
        t: (_glue(t), t)
        for t in ("CoLA", "MNLI", "MRPC", "QNLI", "QQP", "RTE", "SST-2", "STS-B", "WNLI")
    },
}


# --------------------------------------------------------------------------------------
# Pretraining and intrinsic evaluation
# --------------------------------------------------------------------------------------
def variant_config(variant: Variant, vocab_size: int) -> AlbertConfig:
    return TINY.replace(vocab_size=vocab_size, **variant.config)


def _demo_data(output_dir, seed, dupe_factor, train_tasks):
    """SOP and NSP TFRecords of the demo corpus: {task: (train or None, eval)}, and the spm
    model. Both held-out sets are built (intrinsic_metrics reads both), training data only
    for the sentence tasks in `train_tasks`."""
    s = pretraining.DEMO_SETTINGS
    data, spm_model = {}, None
    for task in ("sop", "nsp"):
        splits = ("train", "eval") if task in train_tasks else ("eval",)
        train, held_out, spm_model = pretraining.ensure_demo_data(
            os.path.join(output_dir, f"data_{task}_seed{seed}_dupe{dupe_factor}"),
            s["max_seq_length"],
            s["max_predictions_per_seq"],
            dupe_factor=dupe_factor,
            random_seed=seed,
            random_next_sentence=task == "nsp",
            splits=splits,
        )
        data[task] = (train if "train" in splits else None, held_out)
    return data, spm_model


def pretrain(
    variant,
    config,
    folder,
    data,
    num_train_steps,
    seed,
    init_checkpoint=None,
    eval_every_steps=0,
    common=None,
    settings=pretraining.DEMO_SETTINGS,
):
    """Pretrains one variant into `folder` (resumes if a checkpoint is there). With
    `eval_every_steps`, a checkpoint is kept every that many steps (the learning curve)
    and the model is evaluated on the SOP held-out data at the start and the end.
    `common`: the study's flags every run takes (`run_settings`); `settings`: sequence
    length, batch sizes, learning rate and warmup (the demo's by default)."""
    config_file = os.path.join(folder, "albert_config.json")
    fileio.makedirs(folder)
    config.to_json_file(config_file)
    s = settings
    every = eval_every_steps or num_train_steps
    return pretraining.run(
        pretraining.PretrainingOptions(
            output_dir=folder,
            albert_config_file=config_file,
            input_file=data[variant.sentence_task][0],
            eval_file=data["sop"][1],
            init_checkpoint=init_checkpoint,
            init_from_other_depth=init_checkpoint is not None,  # Table 11's warm start
            num_train_steps=num_train_steps,
            num_warmup_steps=min(s["num_warmup_steps"], num_train_steps // 10),
            save_checkpoints_steps=every,
            keep_checkpoint_max=-(-num_train_steps // every) + 1,
            do_eval=eval_every_steps > 0,
            random_seed=seed,
            **(common or {}),
            sentence_order_loss_weight=variant.sentence_order_loss_weight,
            **{
                k: s[k]
                for k in (
                    "max_seq_length",
                    "max_predictions_per_seq",
                    "train_batch_size",
                    "eval_batch_size",
                    "learning_rate",
                    "iterations_per_loop",
                    "max_eval_steps",
                )
            },
        )
    )


def _restored_pretrainer(config, checkpoint):

    from albert_tf.model.modeling import AlbertPretrainer

    model = AlbertPretrainer(config, full_sequence_output=False)
    model.build()
    checkpoints.init_from_checkpoint(model, checkpoint)  # either format, every variable
    return model


def _held_out_metrics(model, eval_file):
    import tensorflow as tf

    from albert_tf.data.input_pipeline import pretraining_dataset

    s = pretraining.DEMO_SETTINGS

    def dataset_fn(ctx):
        return pretraining_dataset(
            eval_file,
            s["eval_batch_size"],
            s["max_seq_length"],
            s["max_predictions_per_seq"],
            False,
            input_context=ctx,
        )

    return pretraining.evaluate(
        tf.distribute.get_strategy(), model, dataset_fn, s["max_eval_steps"]
    )


def intrinsic_metrics(config, folder, data):
    """Masked-LM accuracy (SOP held-out data) and the sentence head's accuracy on held-out
    SOP and NSP pairs, from the latest checkpoint in `folder`."""
    model = _restored_pretrainer(config, _latest_checkpoint(folder))
    out = {}
    for task in ("sop", "nsp"):
        metrics = _held_out_metrics(model, data[task][1])
        if task == "sop":
            out["masked_lm_accuracy"] = metrics["masked_lm_accuracy"]
        out[f"{task}_accuracy"] = metrics["sentence_order_accuracy"]
    return out


def learning_curve(folder) -> dict:
    """Held-out masked-LM and sentence-order accuracy before training and at every
    checkpoint of the pretraining run in `folder` (the run evaluates each checkpoint it
    writes into eval_results.txt). Returns {"global_step": [...], "masked_lm_accuracy":
    [...], "sentence_order_accuracy": [...]}, by step."""
    known = {
        **selection.read_eval_results(folder, pretraining.BEFORE_TRAINING_RESULTS),
        **selection.read_eval_results(folder),
    }
    keys = ("masked_lm_accuracy", "sentence_order_accuracy")
    steps = [step for step, metrics in known.items() if all(k in metrics for k in keys)]
    return {"global_step": steps, **{k: [known[step][k] for step in steps] for k in keys}}


# --------------------------------------------------------------------------------------
# A study
# --------------------------------------------------------------------------------------
def resolve(o: AblationOptions) -> list[Variant]:
    """The variants to run; UserError names the bad option."""
    check(o)
    unknown = [t for t in o.tasks if t not in TASKS]
    if unknown:
        raise UserError(f"--tasks: unknown {', '.join(unknown)}; known: {', '.join(TASKS)}")
    if o.smoothness_checkpoints and o.study != "smoothness":
        raise UserError(
            f"--smoothness_checkpoints: only with --study=smoothness, not --study={o.study}"
        )
    variants = STUDIES[o.study]
    labels = [v.label for v in variants]
    missing = [v for v in o.variants if v not in labels]
    if missing:
        raise UserError(
            f"--variants: {', '.join(map(repr, missing))} not in study "
            f"{o.study!r} ({'; '.join(labels)})"
        )
    return [v for v in variants if not o.variants or v.label in o.variants]


def _tasks(o: AblationOptions) -> tuple:
    """The downstream tasks the study runs (none for the smoothness study)."""
    if o.study != "smoothness":
        return o.tasks
    if "tasks" in o.given and o.tasks:
        _logger.warning("--tasks is ignored by the smoothness study (it fine-tunes nothing)")
    return ()


def _held_out_sequences(o: AblationOptions, tokenizer):
    """The smoothness study's sequences: --smoothness_text_file, default the demo corpus part
    that pretraining holds out, in `tokenizer`'s vocabulary."""
    corpus = sorted((DEMO_DIR / "corpus").glob("part-*.txt"))
    text_file = o.smoothness_text_file or str(corpus[-1])
    return smoothness.text_sequences(
        text_file,
        tokenizer,
        pretraining.DEMO_SETTINGS["max_seq_length"],
        o.smoothness_max_sequences,
    )


def read_rows(results_path, default_seed: int) -> list[dict]:
    """The rows of a results.json (none when it does not exist). Rows written before seeds
    were recorded count as run with `default_seed` (--random_seed)."""
    text = fileio.read_text(results_path)
    rows = json.loads(text) if text else []
    for row in rows:
        if "random_seed" not in row:
            _logger.info(
                "%s: row %r has no random_seed: counted as seed %d",
                results_path,
                row["label"],
                default_seed,
            )
            row["random_seed"] = default_seed
    return rows


def run(o: AblationOptions) -> list[dict]:
    """Runs the study's (variant, seed) pairs not yet in results.json, seed by seed;
    rewrites results.json, results.md and the pictures after each; returns all rows."""
    import sentencepiece as spm

    speed_paths.use(o.speed_paths)  # the studies' own models (held-out metrics, smoothness)
    variants = resolve(o)
    tasks = _tasks(o)
    study_dir = os.path.join(o.output_dir, o.study)
    fileio.makedirs(study_dir)
    results_path = os.path.join(study_dir, "results.json")
    rows = read_rows(results_path, o.random_seed)
    settings = _settings(o, tasks)
    _check_same_settings(rows, settings, results_path)
    study = STUDIES[o.study]
    sequences = None
    for seed in range(o.random_seed, o.random_seed + o.seeds):
        done = {r["label"] for r in rows if r["random_seed"] == seed}
        todo = [v for v in variants if v.label not in done]
        for variant in variants:
            if variant.label in done:
                _logger.info("%s: %s (seed %d) already done", o.study, variant.label, seed)
        if not todo:
            continue
        data, spm_model = _demo_data(
            o.output_dir, seed, o.dupe_factor, {v.sentence_task for v in todo}
        )
        vocab_size = spm.SentencePieceProcessor(model_file=spm_model).get_piece_size()
        for variant in todo:
            index = study.index(variant)
            folder = os.path.join(f"{index:02d}", f"seed{seed}")
            pretrain_dir = os.path.join(study_dir, folder, "pretrain")
            config = variant_config(variant, vocab_size)
            init = _warm_start(study, index, seed, rows, study_dir) if variant.warm_start else None
            _logger.info(
                "%s: pretraining %s, seed %d (%d parameters)",
                o.study,
                variant.label,
                seed,
                config.num_parameters(),
            )
            start = time.time()
            pretrain(
                variant,
                config,
                pretrain_dir,
                data,
                o.num_train_steps,
                seed,
                init,
                o.eval_every_steps,
                run_settings(o),
            )
            row = {
                "label": variant.label,
                "random_seed": seed,
                "folder": folder,
                "parameters": config.num_parameters(),
                **{k: settings[k] for k in ("num_train_steps", "dupe_factor")},
                "pretrain_seconds": round(time.time() - start, 1),
                **intrinsic_metrics(config, pretrain_dir, data),
                "tasks": {},
            }
            if o.eval_every_steps:
                row["curve"] = learning_curve(pretrain_dir)
            if o.study == "smoothness":
                encoder, tokenizer = smoothness.load_model(pretrain_dir, spm_model)
                if sequences is None:
                    sequences = _held_out_sequences(o, tokenizer)
                row["smoothness"] = smoothness.measure(encoder, sequences)
            for task in tasks:
                start = time.time()
                summary = TASKS[task][0](
                    pretrain_dir, os.path.join(study_dir, folder, task), seed, run_settings(o)
                )
                row["tasks"][task] = task_result(summary, start)
            rows.append(row)
            fileio.atomic_write_text(results_path, json.dumps(rows, indent=2) + "\n")
            write_report(o.study, study_dir, rows)
            _logger.info(
                "%s: %s (seed %d) done: %s",
                o.study,
                variant.label,
                seed,
                json.dumps({k: v for k, v in row.items() if k != "curve"}),
            )
    if rows:  # also redraws the pictures of a finished study (e.g. once matplotlib is there)
        write_report(o.study, study_dir, rows)
    return rows


def write_report(study: str, study_dir, rows) -> list[str]:
    """results.md and the pictures of a study's rows (albert_tf/research/ablation_report.py)."""
    variants = STUDIES[study]
    return ablation_report.write_study_report(
        study_dir,
        study,
        rows,
        [v.label for v in variants],
        {v.label: v.reference for v in variants if v.reference},
        {task: title for task, (_, title) in TASKS.items()},
    )


def _warm_start(study, index, seed, rows, study_dir):
    """The final checkpoint of the previous row's run at `seed` (Table 11's warm start)."""
    previous = study[index - 1]
    row = next((r for r in rows if r["label"] == previous.label and r["random_seed"] == seed), None)
    # Rows of the single-seed layout (before --seeds) have no "folder": <index>/pretrain.
    checkpoint = row and _latest_checkpoint(
        os.path.join(study_dir, row.get("folder", f"{index - 1:02d}"), "pretrain")
    )
    if not checkpoint:
        raise UserError(
            f"{study[index].label} starts from the previous row's weights: run "
            f"{previous.label!r} with seed {seed} first"
        )
    return checkpoint


def measure_checkpoints(o: AblationOptions) -> str:
    """--study=smoothness --smoothness_checkpoints=label=path,...: measures each model on the
    held-out text and writes <output_dir>/smoothness.{json,md,png}. Returns the Markdown."""
    resolve(o)
    models = smoothness.parse_model_flags(o.smoothness_checkpoints)
    measurements, sources = {}, {}
    demo_spm = str(DEMO_DIR / "spm.model")
    for label, path in models:
        encoder, tokenizer = smoothness.load_model(path, demo_spm)
        measurements[label] = [smoothness.measure(encoder, _held_out_sequences(o, tokenizer))]
        sources[label] = path
        _logger.info("%s: %s", label, json.dumps(measurements[label][0]))
    text = "# Layer input vs output (Figure 1)\n\n" + ablation_report.smoothness_table(measurements)
    fileio.atomic_write_text(
        os.path.join(o.output_dir, "smoothness.json"),
        json.dumps(
            {label: {"path": sources[label], **m[0]} for label, m in measurements.items()}, indent=2
        )
        + "\n",
    )
    fileio.atomic_write_text(os.path.join(o.output_dir, "smoothness.md"), text)
    if plots.available():
        plots.smoothness(
            os.path.join(o.output_dir, "smoothness.png"),
            "Layer input vs output",
            ablation_report.smoothness_summary(measurements),
        )
    else:
        _logger.info(plots.MISSING)
    return text


def task_result(summary: dict, start: float) -> dict:
    """A fine-tuning's entry in a study's row: its best dev value (the run's summary
    "best") and the seconds since `start`."""
    best = summary["best"]
    return {
        "key": best["key"],
        "value": best["value"],
        "global_step": best["global_step"],
        "seconds": round(time.time() - start, 1),
    }


def run_settings(o) -> dict:
    """The study's flags that every pretraining and fine-tuning run of it takes."""
    return {"speed_paths": o.speed_paths, "dtype": o.dtype}


def _settings(o: AblationOptions, tasks) -> dict:
    """What makes rows comparable: rows of one results.json must agree on all of it."""
    return {
        "num_train_steps": o.num_train_steps,
        "tasks": sorted(tasks),
        "dupe_factor": o.dupe_factor,
    }


def _check_same_settings(rows, settings, results_path):
    """UserError when a finished row was run with other settings (a resumed study would
    otherwise mix them in one table)."""
    for row in rows:
        ran = {
            "num_train_steps": row["num_train_steps"],
            "tasks": sorted(row["tasks"]),
            "dupe_factor": row.get("dupe_factor"),
        }
        differ = [k for k in settings if ran[k] is not None and ran[k] != settings[k]]
        if differ:
            raise UserError(
                f"{results_path}: row {row['label']!r} (seed {row['random_seed']}) was run "
                "with "
                + ", ".join(f"{k}={ran[k]}" for k in differ)
                + " (now "
                + ", ".join(f"{k}={settings[k]}" for k in differ)
                + "); pass another --output_dir or delete that study's folder"
            )


def _latest_checkpoint(folder):
    """The newest training checkpoint of a pretraining folder (either format), or None."""
    trained = OutputFolder(folder).contents().trained_checkpoints()
    return trained[-1][1] if trained else None
