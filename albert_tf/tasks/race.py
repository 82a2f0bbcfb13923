"""RACE fine-tuning: the multiple-choice model and the run (the task side of run_race.py;
docs/original.md §13).

Model (§13.3): the 4 choice sequences of an example [B, 4 x S] are encoded as [4B, S];
each pooled output -> dropout (training) -> one score (`output_weights` [1, H],
`output_bias` [1], top level as the original); the 4 scores of an example are its logits
[B, 4], trained with softmax cross-entropy. Evaluation: eval_accuracy and eval_loss over
real examples; checkpoints selected by eval_accuracy into `model.ckpt-best`
(albert_tf/run/selection.py). --do_predict evaluates the test split with the selected
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

from albert_tf import fileio
from albert_tf.data import race_data
from albert_tf.errors import UserError
from albert_tf.model.config import AlbertConfig
from albert_tf.model.heads import OutputProjection
from albert_tf.options import REQUIRED, option
from albert_tf.run import driver, selection
from albert_tf.run.model_files import ModelFileOptions, make_tokenizer, resolve_model_files
from albert_tf.run.output_folder import OutputFolder
from albert_tf.tasks import metrics
from albert_tf.tasks.classifier import (
    HEAD_PATTERNS,
    AlbertClassifier,
    eval_dataset_fn,
    loss_fn,
    predict_arrays,
)

_logger = logging.getLogger(__name__)

HEAD = "classifier"  # output_weights / output_bias at the top level, as GLUE's


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
        self.classifier = OutputProjection(
            1, initializer_range=self.config.initializer_range, name="classifier"
        )

    def call(self, inputs, training=False):
        length = tf.shape(inputs["input_ids"])[-1] // self.num_choices
        flat = {
            k: tf.reshape(inputs[k], [-1, length])
            for k in ("input_ids", "input_mask", "segment_ids")
        }
        no_rows = tf.zeros([tf.shape(flat["input_ids"])[0], 0], tf.int32)
        pooled = self.albert(flat, training=training, output_positions=no_rows)["pooled_output"]
        hidden = (
            self.dropout(pooled, training=True) if training and self.classifier_dropout else pooled
        )
        logits = tf.reshape(self.classifier(hidden), [-1, self.num_choices])
        return {
            "logits": logits,
            "probabilities": tf.nn.softmax(logits, axis=-1),
            "predictions": tf.argmax(logits, axis=-1, output_type=tf.int32),
            "pooled_output": pooled,
        }

    def get_config(self):
        return {
            "config": self.config.to_dict(),
            "num_choices": self.num_choices,
            "dropout_prob": self.classifier_dropout,
            "name": self.name,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        return cls(AlbertConfig.from_dict(config.pop("config")), **config)


def race_metrics(arrays) -> dict:
    """eval_accuracy and eval_loss over the real examples of `predict_arrays` output."""
    real = arrays["is_real_example"] != 0
    loss = float(np.mean(arrays["per_example_loss"][real])) if real.any() else 0.0
    # `loss`: the Estimator's key in the original's results (the same mean here).
    return {
        "eval_accuracy": metrics.accuracy(arrays["predictions"], arrays["label_ids"], real),
        "eval_loss": loss,
        "loss": loss,
    }


@dataclasses.dataclass(kw_only=True)
class RaceOptions(driver.RunOptions, ModelFileOptions):
    """run_race.py's flags (original names and defaults, §13.4) plus ours.

    Accepted and without effect: num_keep_checkpoint (unused by the original too; see
    keep_checkpoint_max), num_tpu_cores (the TPU topology decides).
    """

    data_dir: str = option(REQUIRED, "Folder holding RACE/{train,dev,test}/{middle,high}.")
    task_name: str = option("race", "Only 'race'.")
    train_file: str | None = option(
        None, "Training records (default <output_dir>/train.tf_record; always rebuilt)."
    )
    eval_file: str | None = option(None, "Dev records (default <output_dir>/eval.tf_record).")
    predict_file: str | None = option(
        None, "Test records (default <output_dir>/predict.tf_record)."
    )
    dropout_prob: float = option(
        0.1, "Dropout on the pooled output (training).", minimum=0.0, below=1.0
    )
    max_seq_length: int = option(512, "Length of each choice's sequence.", minimum=1)
    max_qa_length: int = option(128, "Question+option pieces kept (the last ones).", minimum=1)
    num_keep_checkpoint: int = option(5, "Accepted (unused, as in the original).")
    high_only: bool = option(False, "Only the high-school questions.")
    middle_only: bool = option(False, "Only the middle-school questions.")
    do_train: bool = driver.RunOptions.default("do_train", True)
    do_eval: bool = option(True, "Evaluate every checkpoint on dev, keep the best.")
    do_predict: bool = option(
        False, "Evaluate the test split with the best checkpoint (predict_results.txt)."
    )
    eval_batch_size: int = option(8, "Eval batch size.", minimum=1)
    predict_batch_size: int = option(8, "Predict batch size.", minimum=1)
    learning_rate: float = driver.RunOptions.default("learning_rate", 1e-5)
    train_step: int = option(12000, "Optimizer steps.", minimum=1)
    warmup_step: int = option(1000, "Linear warmup steps.", minimum=0)
    save_checkpoints_steps: int = driver.RunOptions.default("save_checkpoints_steps", 100)


class RaceTask(driver.Task):
    """RACE: records built from the JSON-lines folders for every split used, checkpoints
    selected by dev accuracy, the test split evaluated into predict_results.txt."""

    head = HEAD
    head_patterns = tuple(HEAD_PATTERNS)

    def resolve(self):
        opts = self.options
        if (opts.task_name or "").lower() != "race":
            raise UserError(f"--task_name={opts.task_name!r}; run_race.py only runs 'race'")
        if not (opts.do_train or opts.do_eval or opts.do_predict):
            raise UserError("at least one of --do_train, --do_eval or --do_predict must be set")
        if opts.high_only and opts.middle_only:
            raise UserError("--high_only and --middle_only exclude each other")
        if opts.max_seq_length <= opts.max_qa_length + 3:
            raise UserError(
                f"--max_seq_length={opts.max_seq_length} must exceed "
                f"--max_qa_length={opts.max_qa_length} + 3"
            )
        self.files = resolve_model_files(opts, opts.max_seq_length)
        if opts.data_dir:
            fileio.check_input_folder(opts.data_dir, f"--data_dir={opts.data_dir}")
        if not opts.data_dir or not tf.io.gfile.isdir(os.path.join(opts.data_dir, "RACE")):
            raise UserError(
                f"--data_dir={opts.data_dir}: no RACE folder in it (expected "
                "<data_dir>/RACE/{train,dev,test}/{middle,high}/all.txt or "
                "numbered *.txt files)"
            )
        self.tokenizer = make_tokenizer(opts, self.files)
        splits = [("train", opts.do_train), ("dev", opts.do_eval), ("test", opts.do_predict)]
        self.examples = {split: self._read(split) for split, used in splits if used}
        return self.files.config

    def _read(self, split):
        """The questions of one split (those the level flags keep): at least one."""
        opts = self.options
        try:
            examples = race_data.read_race_examples(
                opts.data_dir,
                split,
                opts.do_lower_case,
                opts.high_only,
                opts.middle_only,
                use_spm=self.tokenizer.spm_mode,
            )
        except FileNotFoundError as err:
            raise UserError(str(err)) from None
        if not examples:
            levels = (
                "high/" if opts.high_only else "middle/" if opts.middle_only else "{middle,high}/"
            )
            raise UserError(
                f"--data_dir={opts.data_dir}: RACE/{split}/{levels} holds no question; "
                "expected all.txt or numbered *.txt files of JSON lines"
            )
        return examples

    def _record_paths(self):
        """{flag: path} of the records each used split is written to."""
        opts = self.options
        used = {
            "train_file": ("train.tf_record", opts.do_train),
            "eval_file": ("eval.tf_record", opts.do_eval),
            "predict_file": ("predict.tf_record", opts.do_predict),
        }
        return {
            flag: getattr(opts, flag) or os.path.join(opts.output_dir, name)
            for flag, (name, on) in used.items()
            if on
        }

    def file_outputs(self):
        names = ("input_ids", "input_mask", "segment_ids", "label_ids")
        return {flag: (path, names) for flag, path in self._record_paths().items()}

    def file_inputs(self):
        race = tf.io.gfile.glob(os.path.join(self.options.data_dir, "RACE", "*", "*", "*"))
        return {**super().file_inputs(), "--data_dir": race}

    def input_shape(self):
        opts = self.options
        return {
            name: getattr(opts, name)
            for name in (
                "data_dir",
                "train_file",
                "high_only",
                "middle_only",
                "max_seq_length",
                "max_qa_length",
                "do_lower_case",
                "train_batch_size",
            )
        }

    def build_model(self, config):
        return AlbertRace(config, dropout_prob=self.options.dropout_prob)

    def loss_fn(self, model, features, training):
        return loss_fn(model, features, training)

    def prepare(self, run):
        self.length = race_data.record_length(self.options.max_seq_length)

    def _records(self, split, path):
        """Writes the split's records to `path`; returns the example count."""
        opts = self.options
        return race_data.write_features(
            self.examples[split], self.tokenizer, opts.max_seq_length, opts.max_qa_length, path
        )

    def _metrics_fn(self, run, split, path_flag, default_name, batch_size):
        path = path_flag or os.path.join(self.options.output_dir, default_name)
        count = self._records(split, path)
        run.summary[f"num_{split}_examples"] = count
        dataset_fn = eval_dataset_fn(path, self.length, batch_size, count, False, run.replicas)
        return lambda: race_metrics(
            predict_arrays(run.strategy, run.model, dataset_fn, run.jit_compile)
        )

    def evaluator(self, run):
        opts = self.options
        if not opts.do_eval:
            return None
        return driver.Evaluation(
            "eval_accuracy",
            self._metrics_fn(run, "dev", opts.eval_file, "eval.tf_record", opts.eval_batch_size),
            selection.RACE_FORMAT,
        )

    def training_plan(self, run):
        from albert_tf.data.classifier_data import classifier_dataset

        opts = self.options
        path = opts.train_file or os.path.join(opts.output_dir, "train.tf_record")
        run.summary["num_train_examples"] = self._records("train", path)

        def dataset_fn(ctx):
            return classifier_dataset(
                path,
                self.length,
                opts.train_batch_size,
                is_training=True,
                input_context=ctx,
                seed=opts.random_seed,
            )

        return driver.TrainingPlan(dataset_fn, opts.train_step, opts.warmup_step)

    def wants_final_weights(self):
        return self.options.do_predict

    def predict(self, run):
        # The original's "prediction" evaluates the test split (RACE's test has answers).
        opts = self.options
        result = self._metrics_fn(
            run, "test", opts.predict_file, "predict.tf_record", opts.predict_batch_size
        )()
        run.summary["test"] = result
        if run.is_chief:
            # The original's layout: a title, the sorted results with the step of the
            # weights, and the best dev value.
            best = run.summary.get("best") or OutputFolder(opts.output_dir).read_best()
            values = {**result, "global_step": best["global_step"] if best else 0}
            path = os.path.join(opts.output_dir, "predict_results.txt")
            fileio.atomic_write_text(
                path,
                "***** Predict results *****\n"
                + "".join(f"{k} = {values[k]}\n" for k in sorted(values))
                + f"best = {best['value'] if best else -1}\n",
            )
            run.summary["predict_results"] = path


def run(opts: RaceOptions) -> dict:
    """Runs what the options ask for; returns a summary dict."""
    return driver.run(RaceTask(opts))


__all__ = ["AlbertRace", "RaceOptions", "RaceTask", "race_metrics", "run"]
