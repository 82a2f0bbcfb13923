"""RACE fine-tuning: the multiple-choice model and the run (the task side of run_race.py;
ORIGINAL_RELEASE.md §13).

Model (§13.3): the 4 choice sequences of an example [B, 4 x S] are encoded as [4B, S];
each pooled output -> dropout (training) -> one score (`output_weights` [1, H],
`output_bias` [1], top level as the original); the 4 scores of an example are its logits
[B, 4], trained with softmax cross-entropy. Evaluation: eval_accuracy and eval_loss over
real examples; checkpoints selected by eval_accuracy into `model.ckpt-best`
(albert_tf/finetuning.py). --do_predict evaluates the test split with the selected
weights and writes predict_results.txt, as the original.

The records have GLUE's names and layout, so GLUE's reader, loss, eval loop and
checkpoint machinery serve RACE unchanged.
"""

from __future__ import annotations

import dataclasses
import logging
import os

import numpy as np
import tensorflow as tf

from albert_tf import fileio, finetuning, metrics
from albert_tf.classifier import (HEAD_PATTERNS, AlbertClassifier, eval_dataset_fn, loss_fn,
                                  predict_arrays)
from albert_tf.config import AlbertConfig
from albert_tf.data import race_data
from albert_tf.heads import OutputProjection

_logger = logging.getLogger(__name__)

HEAD = "classifier"  # output_weights / output_bias at the top level, as GLUE's


class RaceError(finetuning.FineTuningError):
    """A user error of a RACE run (bad flag, missing file, unusable checkpoint)."""


class AlbertRace(AlbertClassifier):
    """ALBERT encoder + run_race.py's head.

    Call with int32 input_ids / input_mask / segment_ids [B, num_choices x S] (the choices
    one after the other). Returns logits [B, num_choices], probabilities, predictions
    [B], pooled_output [B x num_choices, H].
    """

    def __init__(self, config, num_choices=race_data.NUM_CHOICES, dropout_prob=0.1, **kwargs):
        kwargs.setdefault("name", "albert_race")
        super().__init__(config, num_choices, classifier_dropout=dropout_prob, **kwargs)
        self.num_choices = int(num_choices)
        # One score per choice: the original's [1, H] projection.
        self.classifier = OutputProjection(1, initializer_range=self.config.initializer_range,
                                           name="classifier")

    def call(self, inputs, training=False):
        length = tf.shape(inputs["input_ids"])[-1] // self.num_choices
        flat = {k: tf.reshape(inputs[k], [-1, length])
                for k in ("input_ids", "input_mask", "segment_ids")}
        no_rows = tf.zeros([tf.shape(flat["input_ids"])[0], 0], tf.int32)
        pooled = self.albert(flat, training=training, output_positions=no_rows)["pooled_output"]
        hidden = self.dropout(pooled, training=True) if training and self.classifier_dropout \
            else pooled
        logits = tf.reshape(self.classifier(hidden), [-1, self.num_choices])
        return {"logits": logits, "probabilities": tf.nn.softmax(logits, axis=-1),
                "predictions": tf.argmax(logits, axis=-1, output_type=tf.int32),
                "pooled_output": pooled}

    def get_config(self):
        return {"config": self.config.to_dict(), "num_choices": self.num_choices,
                "dropout_prob": self.classifier_dropout, "name": self.name}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        return cls(AlbertConfig.from_dict(config.pop("config")), **config)


def race_metrics(arrays) -> dict:
    """eval_accuracy and eval_loss over the real examples of `predict_arrays` output."""
    real = arrays["is_real_example"] != 0
    return {"eval_accuracy": metrics.accuracy(arrays["predictions"], arrays["label_ids"], real),
            "eval_loss": float(np.mean(arrays["per_example_loss"][real])) if real.any() else 0.0}


@dataclasses.dataclass
class RaceOptions(finetuning.RunOptions):
    """run_race.py's flags (original names and defaults, §13.4) plus ours.

    Accepted and without effect: num_keep_checkpoint (unused by the original too; see
    keep_checkpoint_max), num_tpu_cores (the TPU topology decides).
    """
    data_dir: str
    output_dir: str
    albert_config_file: str | None = None
    spm_model_file: str | None = None
    task_name: str = "race"
    vocab_file: str | None = None
    train_file: str | None = None
    eval_file: str | None = None
    predict_file: str | None = None
    init_checkpoint: str | None = None
    albert_hub_module_handle: str | None = None
    do_lower_case: bool = True
    dropout_prob: float = 0.1
    max_seq_length: int = 512
    max_qa_length: int = 128
    num_keep_checkpoint: int = 5
    high_only: bool = False
    middle_only: bool = False
    do_train: bool = True
    do_eval: bool = True
    do_predict: bool = False
    train_batch_size: int = 32
    eval_batch_size: int = 8
    predict_batch_size: int = 8
    learning_rate: float = 1e-5
    train_step: int = 12000
    warmup_step: int = 1000
    save_checkpoints_steps: int = 100
    iterations_per_loop: int = 1000


def resolve(opts: RaceOptions):
    """Validates the options (RaceError naming the flag/file); returns (config, spm,
    vocab). Nothing is written."""
    if (opts.task_name or "").lower() != "race":
        raise RaceError(f"--task_name={opts.task_name!r}; run_race.py only runs 'race'")
    if not (opts.do_train or opts.do_eval or opts.do_predict):
        raise RaceError("at least one of --do_train, --do_eval or --do_predict must be set")
    if not opts.output_dir:
        raise RaceError("--output_dir is required")
    if opts.high_only and opts.middle_only:
        raise RaceError("--high_only and --middle_only exclude each other")
    for name in ("train_batch_size", "eval_batch_size", "predict_batch_size", "train_step",
                 "save_checkpoints_steps", "iterations_per_loop", "max_qa_length"):
        if getattr(opts, name) < 1:
            raise RaceError(f"--{name} must be >= 1, got {getattr(opts, name)}")
    if opts.warmup_step < 0:
        raise RaceError(f"--warmup_step must be >= 0, got {opts.warmup_step}")
    if not 0 <= opts.dropout_prob < 1:
        raise RaceError(f"--dropout_prob must be in [0, 1), got {opts.dropout_prob}")
    if opts.max_seq_length <= opts.max_qa_length + 3:
        raise RaceError(f"--max_seq_length={opts.max_seq_length} must exceed "
                        f"--max_qa_length={opts.max_qa_length} + 3")
    config, spm, vocab = finetuning.resolve_model_files(
        init_checkpoint=opts.init_checkpoint, albert_config_file=opts.albert_config_file,
        spm_model_file=opts.spm_model_file, vocab_file=opts.vocab_file,
        albert_hub_module_handle=opts.albert_hub_module_handle,
        max_seq_length=opts.max_seq_length, error=RaceError)
    if not opts.data_dir or not tf.io.gfile.isdir(os.path.join(opts.data_dir, "RACE")):
        raise RaceError(f"--data_dir={opts.data_dir}: no RACE folder in it (expected "
                        "<data_dir>/RACE/{train,dev,test}/{middle,high}/*.txt)")
    return config, spm, vocab


def _records(opts, tokenizer, split, path):
    """Reads the split and writes its records to `path`; returns the example count."""
    try:
        examples = race_data.read_race_examples(
            opts.data_dir, split, opts.do_lower_case, opts.high_only, opts.middle_only,
            use_spm=tokenizer.spm_mode)
    except (race_data.RaceDataError, FileNotFoundError) as err:
        raise RaceError(str(err)) from None
    if not examples:
        raise RaceError(f"the {split} split of {opts.data_dir}/RACE holds no question")
    return race_data.write_features(examples, tokenizer, opts.max_seq_length,
                                    opts.max_qa_length, path)


def run(opts: RaceOptions) -> dict:
    """Runs what the options ask for; returns a summary dict."""
    from albert_tf import tokenization
    from albert_tf.data.classifier_data import classifier_dataset

    config, spm, vocab = resolve(opts)
    strategy, chief, replicas = finetuning.start_run(opts, config, RaceError)
    tokenizer = tokenization.FullTokenizer(vocab_file=vocab, do_lower_case=opts.do_lower_case,
                                           spm_model_file=spm)
    with strategy.scope():
        model = AlbertRace(config, dropout_prob=opts.dropout_prob)
        model.build()
    summary = {}
    message = finetuning.initialize(model, opts, HEAD, HEAD_PATTERNS, RaceError)
    if message:
        summary["init"] = message
    tf.io.gfile.makedirs(opts.output_dir)  # only once the inputs proved usable
    length = race_data.record_length(opts.max_seq_length)

    def eval_fn(split, path_flag, default_name, batch_size):
        path = path_flag or os.path.join(opts.output_dir, default_name)
        count = _records(opts, tokenizer, split, path)
        summary[f"num_{split}_examples"] = count
        dataset_fn = eval_dataset_fn(path, length, batch_size, count, False, replicas)
        return lambda: race_metrics(predict_arrays(strategy, model, dataset_fn))

    selector = None
    if opts.do_eval:
        selector = finetuning.CheckpointSelector(
            "eval_accuracy", opts.output_dir, model,
            eval_fn("dev", opts.eval_file, "eval.tf_record", opts.eval_batch_size), HEAD,
            chief, RaceError)

    if opts.do_train:
        train_path = opts.train_file or os.path.join(opts.output_dir, "train.tf_record")
        summary["num_train_examples"] = _records(opts, tokenizer, "train", train_path)
        trainer = finetuning.make_trainer(strategy, model, loss_fn, opts, opts.train_step,
                                          opts.warmup_step, chief)

        def dataset_fn(ctx):
            return classifier_dataset(train_path, length, opts.train_batch_size,
                                      is_training=True, input_context=ctx,
                                      seed=opts.random_seed)

        summary["train_step"] = finetuning.train_and_select(trainer, dataset_fn, selector)

    if selector is not None:
        if not selector.evaluate_pending() and selector.best is None:
            if not opts.init_checkpoint:
                raise RaceError(f"--do_eval: no checkpoint (ckpt-<step>) in {opts.output_dir} "
                                "and no --init_checkpoint to evaluate")
            selector.evaluate_current(0)  # the --init_checkpoint weights
        summary["best"] = selector.best

    if opts.do_predict:
        summary["predict_weights"] = finetuning.final_weights(
            model, opts.output_dir, opts.init_checkpoint, HEAD, RaceError)
        # The original's "prediction" evaluates the test split (RACE's test has answers).
        result = eval_fn("test", opts.predict_file, "predict.tf_record",
                         opts.predict_batch_size)()
        summary["test"] = result
        if chief:
            path = os.path.join(opts.output_dir, "predict_results.txt")
            fileio.atomic_write_text(path, "".join(f"{k} = {result[k]}\n" for k in sorted(result)))
            summary["predict_results"] = path
    return summary


__all__ = ["AlbertRace", "RaceOptions", "RaceError", "race_metrics", "resolve", "run"]
