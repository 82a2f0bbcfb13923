"""The paper's ablation studies at small scale (Tables 3, 4, 5, 8 and 11).

A study is a list of variants of the demo model (`albert_tiny`: L = 4, H = 128,
E = 64, F = 512, all layers shared). Every variant is pretrained on the demo
corpus with the demo's settings (`pretraining.DEMO_SETTINGS`, LAMB), then
measured as the paper measures:

- intrinsic (Table 5's columns): masked-LM accuracy, and the sentence head's
  accuracy on held-out sentence-order (SOP) pairs and on held-out next-sentence
  (NSP, random other document) pairs;
- downstream: fine-tuned on demo tasks (the paper's SQuAD1.1, SQuAD2.0, MNLI,
  SST-2 and RACE by default) with the README's demo settings; the best
  checkpoint on dev counts, as in the original.

Each finished variant is appended to `<output_dir>/<study>/results.json` and
the Markdown table `results.md` is rewritten (both atomically), so an
interrupted study resumes at the first unfinished variant.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time

from albert_tf import fileio, pretraining
from albert_tf.config import AlbertConfig, preset

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
    """
    label: str
    config: dict
    sentence_task: str = "sop"
    sentence_order_loss_weight: float = 1.0
    warm_start: bool = False


def _sharing(name: str, layers: int = TINY.num_hidden_layers) -> dict:
    """Config changes of the paper's sharing strategies (Table 4)."""
    return {"all-shared": {"num_hidden_groups": 1},
            "shared-attention": {"num_hidden_groups": layers, "cross_layer_sharing": "attention"},
            "shared-FFN": {"num_hidden_groups": layers, "cross_layer_sharing": "ffn"},
            "not-shared": {"num_hidden_groups": layers}}[name]


# The paper's E of 64..768 at H = 768 become 16..128 at H = 128.
STUDIES = {
    "embedding_size": [  # Table 3
        Variant(f"{sharing} E={e}", {"embedding_size": e, **_sharing(sharing)})
        for sharing in ("not-shared", "all-shared") for e in (16, 32, 64, 128)],
    "sharing": [  # Table 4
        Variant(f"E={e} {sharing}", {"embedding_size": e, **_sharing(sharing)})
        for e in (128, 64)
        for sharing in ("all-shared", "shared-attention", "shared-FFN", "not-shared")],
    "sentence_loss": [  # Table 5
        Variant("None", {}, "sop", 0.0),
        Variant("NSP", {}, "nsp"),
        Variant("SOP", {}, "sop"),
    ],
    "dropout": [  # Table 8
        Variant("with dropout", {"hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1}),
        Variant("without dropout", {}),
    ],
    "layers": [  # Table 11: each depth from 2 on starts from the previous depth's weights
        Variant(f"L={layers}", {"num_hidden_layers": layers}, warm_start=layers > 1)
        for layers in (1, 2, 4, 8)],
}


@dataclasses.dataclass
class AblationOptions:
    """What run_ablations.py's flags decide."""
    study: str
    output_dir: str
    num_train_steps: int = pretraining.DEMO_SETTINGS["num_train_steps"]
    tasks: tuple = PAPER_TASKS
    variants: tuple = ()  # labels to run (default all)
    random_seed: int = 12345
    dupe_factor: int = 10  # passes over the demo corpus when building the TFRecords


class AblationError(ValueError):
    """Options that cannot work; the message names the option."""


# --------------------------------------------------------------------------------------
# Downstream tasks, with the README's demo settings
# --------------------------------------------------------------------------------------
def _squad(version_2):
    def run(init_checkpoint, output_dir, seed):
        from albert_tf import squad
        suffix = "v2.0" if version_2 else "v1.1"
        return squad.run(squad.SquadOptions(
            output_dir=output_dir, init_checkpoint=init_checkpoint,
            spm_model_file=str(DEMO_DIR / "spm.model"),
            train_file=str(DEMO_DIR / "squad" / f"train-{suffix}.json"),
            predict_file=str(DEMO_DIR / "squad" / f"dev-{suffix}.json"),
            version_2_with_negative=version_2, do_train=True, do_predict=True,
            max_seq_length=128, doc_stride=64, max_query_length=32, train_batch_size=32,
            predict_batch_size=32, num_train_epochs=40, learning_rate=5e-4,
            save_checkpoints_steps=100 if version_2 else 75, random_seed=seed))
    return run


def _glue(task):
    def run(init_checkpoint, output_dir, seed):
        from albert_tf import classifier
        return classifier.run(classifier.ClassifierOptions(
            task_name=task, output_dir=output_dir, data_dir=str(DEMO_DIR / "glue"),
            init_checkpoint=init_checkpoint, spm_model_file=str(DEMO_DIR / "spm.model"),
            max_seq_length=128, do_train=True, do_eval=True, train_batch_size=32,
            eval_batch_size=32, learning_rate=1e-4, train_step=300, warmup_step=30,
            save_checkpoints_steps=50, random_seed=seed))
    return run


def _race(init_checkpoint, output_dir, seed):
    from albert_tf import race
    return race.run(race.RaceOptions(
        data_dir=str(DEMO_DIR), output_dir=output_dir, init_checkpoint=init_checkpoint,
        spm_model_file=str(DEMO_DIR / "spm.model"), max_seq_length=128, max_qa_length=32,
        train_batch_size=32, eval_batch_size=32, learning_rate=5e-5, train_step=300,
        warmup_step=30, save_checkpoints_steps=100, random_seed=seed))


# task -> (run(init_checkpoint, output_dir, seed) -> summary with "best", column title)
TASKS = {
    "squad_v1": (_squad(False), "SQuAD1.1 F1"),
    "squad_v2": (_squad(True), "SQuAD2.0 F1"),
    "race": (_race, "RACE acc"),
    **{t: (_glue(t), t) for t in ("CoLA", "MNLI", "MRPC", "QNLI", "QQP", "RTE", "SST-2",
                                  "STS-B", "WNLI")},
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
            s["max_predictions_per_seq"], dupe_factor=dupe_factor, random_seed=seed,
            random_next_sentence=task == "nsp", splits=splits)
        data[task] = (train if "train" in splits else None, held_out)
    return data, spm_model


def pretrain(variant, config, folder, data, num_train_steps, seed, init_checkpoint=None):
    """Pretrains one variant into `folder` (resumes if a checkpoint is there)."""
    config_file = os.path.join(folder, "albert_config.json")
    os.makedirs(folder, exist_ok=True)
    config.to_json_file(config_file)
    train, held_out = data[variant.sentence_task]
    s = pretraining.DEMO_SETTINGS
    return pretraining.run(pretraining.PretrainingOptions(
        output_dir=folder, albert_config_file=config_file, input_file=train, eval_file=held_out,
        init_checkpoint=init_checkpoint, num_train_steps=num_train_steps,
        num_warmup_steps=min(s["num_warmup_steps"], num_train_steps // 10),
        save_checkpoints_steps=num_train_steps, do_eval=False, random_seed=seed,
        sentence_order_loss_weight=variant.sentence_order_loss_weight,
        **{k: s[k] for k in ("max_seq_length", "max_predictions_per_seq", "train_batch_size",
                             "eval_batch_size", "learning_rate", "iterations_per_loop",
                             "max_eval_steps")}))


def intrinsic_metrics(config, folder, data):
    """Masked-LM accuracy (SOP held-out data) and the sentence head's accuracy on held-out
    SOP and NSP pairs, from the latest checkpoint in `folder`."""
    import tensorflow as tf

    from albert_tf.data.input_pipeline import pretraining_dataset
    from albert_tf.modeling import AlbertPretrainer

    s = pretraining.DEMO_SETTINGS
    strategy = tf.distribute.get_strategy()
    model = AlbertPretrainer(config, full_sequence_output=False)
    model.build()
    tf.train.Checkpoint(model=model).restore(_latest_checkpoint(folder)).expect_partial()
    out = {}
    for task in ("sop", "nsp"):
        def dataset_fn(ctx, path=data[task][1]):
            return pretraining_dataset(path, s["eval_batch_size"], s["max_seq_length"],
                                       s["max_predictions_per_seq"], False, input_context=ctx)
        metrics = pretraining.evaluate(strategy, model, dataset_fn, s["max_eval_steps"])
        if task == "sop":
            out["masked_lm_accuracy"] = metrics["masked_lm_accuracy"]
        out[f"{task}_accuracy"] = metrics["sentence_order_accuracy"]
    return out


# --------------------------------------------------------------------------------------
# A study
# --------------------------------------------------------------------------------------
def resolve(o: AblationOptions) -> list[Variant]:
    """The variants to run; AblationError names the bad option."""
    if o.study not in STUDIES:
        raise AblationError(f"--study={o.study!r}; known: {', '.join(STUDIES)}")
    unknown = [t for t in o.tasks if t not in TASKS]
    if unknown:
        raise AblationError(f"--tasks: unknown {', '.join(unknown)}; known: {', '.join(TASKS)}")
    if o.num_train_steps < 10:
        raise AblationError(f"--num_train_steps={o.num_train_steps}: at least 10")
    variants = STUDIES[o.study]
    labels = [v.label for v in variants]
    missing = [v for v in o.variants if v not in labels]
    if missing:
        raise AblationError(f"--variants: {', '.join(map(repr, missing))} not in study "
                            f"{o.study!r} ({'; '.join(labels)})")
    return [v for v in variants if not o.variants or v.label in o.variants]


def run(o: AblationOptions) -> list[dict]:
    """Runs the study's variants not yet in results.json; returns all its rows."""
    import sentencepiece as spm

    variants = resolve(o)
    study_dir = os.path.join(o.output_dir, o.study)
    os.makedirs(study_dir, exist_ok=True)
    results_path = os.path.join(study_dir, "results.json")
    rows = json.loads(fileio.read_text(results_path)) if os.path.exists(results_path) else []
    settings = _settings(o)
    _check_same_settings(rows, settings, results_path)
    done = {r["label"] for r in rows}
    data, spm_model = _demo_data(o.output_dir, o.random_seed, o.dupe_factor,
                                 {v.sentence_task for v in variants})
    vocab_size = spm.SentencePieceProcessor(model_file=spm_model).get_piece_size()
    previous = None
    for index, variant in enumerate(STUDIES[o.study]):
        folder = os.path.join(study_dir, f"{index:02d}")
        if variant not in variants:
            previous = folder
            continue
        if variant.label in done:
            _logger.info("%s: %s already done", o.study, variant.label)
            previous = folder
            continue
        config = variant_config(variant, vocab_size)
        init = None
        if variant.warm_start and previous is not None:
            init = _latest_checkpoint(os.path.join(previous, "pretrain"))
            if init is None:
                raise AblationError(f"{variant.label} starts from the previous row's weights: "
                                    f"run {STUDIES[o.study][index - 1].label!r} first")
        _logger.info("%s: pretraining %s (%d parameters)", o.study, variant.label,
                     config.num_parameters())
        start = time.time()
        pretrain(variant, config, os.path.join(folder, "pretrain"), data, o.num_train_steps,
                 o.random_seed, init)
        row = {"label": variant.label, "parameters": config.num_parameters(),
               **{k: settings[k] for k in ("num_train_steps", "random_seed", "dupe_factor")},
               "pretrain_seconds": round(time.time() - start, 1),
               **intrinsic_metrics(config, os.path.join(folder, "pretrain"), data),
               "tasks": {}}
        for task in o.tasks:
            summary = TASKS[task][0](os.path.join(folder, "pretrain"),
                                     os.path.join(folder, task), o.random_seed)
            best = summary["best"]
            row["tasks"][task] = {"key": best["key"], "value": best["value"],
                                  "global_step": best["global_step"]}
        rows.append(row)
        fileio.atomic_write_text(results_path, json.dumps(rows, indent=2) + "\n")
        fileio.atomic_write_text(os.path.join(study_dir, "results.md"), markdown_table(rows))
        _logger.info("%s: %s done: %s", o.study, variant.label, json.dumps(row))
        previous = folder
    return rows


def _settings(o: AblationOptions) -> dict:
    """What makes rows comparable: rows of one results.json must agree on all of it."""
    return {"num_train_steps": o.num_train_steps, "tasks": sorted(o.tasks),
            "random_seed": o.random_seed, "dupe_factor": o.dupe_factor}


def _check_same_settings(rows, settings, results_path):
    """AblationError when a finished row was run with other settings (a resumed study would
    otherwise mix them in one table)."""
    for row in rows:
        ran = {"num_train_steps": row["num_train_steps"], "tasks": sorted(row["tasks"]),
               "random_seed": row.get("random_seed"), "dupe_factor": row.get("dupe_factor")}
        differ = [k for k in settings if ran[k] is not None and ran[k] != settings[k]]
        if differ:
            raise AblationError(
                f"{results_path}: row {row['label']!r} was run with "
                + ", ".join(f"{k}={ran[k]}" for k in differ) + " (now "
                + ", ".join(f"{k}={settings[k]}" for k in differ)
                + "); pass another --output_dir or delete that study's folder")


def _latest_checkpoint(folder):
    import tensorflow as tf
    return tf.train.latest_checkpoint(folder)


def markdown_table(rows: list[dict]) -> str:
    """The rows as the paper's tables: parameters, intrinsic accuracies, each task's best
    dev score (x100) and their average."""
    tasks = list(dict.fromkeys(t for r in rows for t in r["tasks"]))
    header = (["Variant", "Params", "MLM acc", "SOP acc", "NSP acc"]
              + [TASKS[t][1] for t in tasks] + (["Avg"] if tasks else []))
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        scores = [r["tasks"][t]["value"] * (1 if t.startswith("squad") else 100)
                  if t in r["tasks"] else None for t in tasks]
        cells = [r["label"], f"{r['parameters'] / 1e6:.2f}M",
                 *(f"{100 * r[k]:.1f}" for k in ("masked_lm_accuracy", "sop_accuracy",
                                                   "nsp_accuracy")),
                 *("" if s is None else f"{s:.1f}" for s in scores)]
        if tasks:
            known = [s for s in scores if s is not None]
            cells.append(f"{sum(known) / len(known):.1f}" if len(known) == len(tasks) else "")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
