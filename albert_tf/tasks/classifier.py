"""GLUE fine-tuning: the classifier model, its loss, evaluation, prediction and export.

This is the task side of run_classifier.py (docs/original.md §11): `ClassifierTask` says
what GLUE runs do; the driver (albert_tf/run/driver.py) runs it.

Model (§11.4): encoder pooled output -> dropout 0.1 in training (fixed, independent of
the config) -> logits = pooled . output_weights^T + output_bias (variables
`output_weights` [K, H], `output_bias` [K], top level in the original checkpoint).
Classification: mean softmax cross-entropy, prediction = argmax. STS-B: one output,
squeezed, mean squared error, prediction = the value.

Run (§11.6, quirk 24): checkpoints are evaluated on dev and the best is kept as
`model.ckpt-best` (albert_tf/run/selection.py); the selection key is accuracy, MCC for
CoLA, Pearson for STS-B.
Prediction writes `<TASK>.tsv` (GLUE submission) and `test_results.tsv`.
"""

from __future__ import annotations

import dataclasses
import logging
import os

import keras
import numpy as np
import tensorflow as tf

from albert_tf import fileio
from albert_tf.errors import UserError
from albert_tf.export.saved_model import CLASSIFIER_KIND
from albert_tf.model.config import AlbertConfig
from albert_tf.model.heads import OutputProjection
from albert_tf.model.modeling import AlbertModel
from albert_tf.options import REQUIRED, option
from albert_tf.run import driver
from albert_tf.run.eval_outputs import collect_outputs, replica_eval_dataset_fn
from albert_tf.run.model_files import ModelFileOptions, make_tokenizer, resolve_model_files
from albert_tf.tasks import metrics as glue

_logger = logging.getLogger(__name__)

CLASSIFIER_DROPOUT = 0.1  # hard-coded in the original (quirk 9)
SINGLE_SENTENCE_TASKS = ("cola", "sst-2")
# Tasks run with another task's model: MNLI's is evaluated on the mismatched dev set
# (MisMNLI) and predicts the diagnostic set (AX), in MNLI's output folder too.
MODEL_OF_TASK = {"mismnli": "mnli", "ax": "mnli"}
HEAD_PATTERNS = [r"^output_"]  # original names of the head, absent from pretraining checkpoints


# --------------------------------------------------------------------------------------
# Model and loss
# --------------------------------------------------------------------------------------
class AlbertClassifier(keras.Model):
    """ALBERT encoder + the run_classifier.py head.

    Args:
      config: AlbertConfig.
      num_labels: K (1 = regression, as STS-B).
      classifier_dropout: dropout on the pooled output in training (0.1 as the original).

    Call with the encoder's dict of int32 [B, S] inputs. Returns a dict:
      logits [B, K] float32 ([B] when K == 1),
      probabilities: softmax [B, K] (K == 1: the value [B], as the original),
      predictions: argmax int32 [B] (K == 1: the value [B]),
      pooled_output [B, H].
    """

    def __init__(self, config, num_labels, classifier_dropout=CLASSIFIER_DROPOUT, **kwargs):
        kwargs.setdefault("name", "albert_classifier")
        super().__init__(**kwargs)
        if isinstance(config, dict):
            config = AlbertConfig.from_dict(config)
        if int(num_labels) < 1:
            raise ValueError(f"num_labels must be >= 1, got {num_labels}")
        self.config = config
        self.num_labels = int(num_labels)
        self.is_regression = self.num_labels == 1
        self.classifier_dropout = float(classifier_dropout)
        self.albert = AlbertModel(config, name="albert")
        self.dropout = keras.layers.Dropout(self.classifier_dropout, name="classifier_dropout")
        self.classifier = OutputProjection(
            self.num_labels, initializer_range=config.initializer_range, name="classifier"
        )

    def build(self, input_shape=None):
        self.albert.build()
        self.classifier.build((None, self.config.hidden_size))
        self.built = True

    def call(self, inputs, training=False):
        # Only the pooled [CLS] row is used: the last block computes just that row.
        no_rows = tf.zeros([tf.shape(inputs["input_ids"])[0], 0], tf.int32)
        encoded = self.albert(inputs, training=training, output_positions=no_rows)
        pooled = encoded["pooled_output"]
        if training and self.classifier_dropout > 0:
            pooled = self.dropout(pooled, training=True)
        logits = self.classifier(pooled)
        if self.is_regression:
            logits = tf.squeeze(logits, axis=-1)
            return {
                "logits": logits,
                "probabilities": logits,
                "predictions": logits,
                "pooled_output": encoded["pooled_output"],
            }
        return {
            "logits": logits,
            "probabilities": tf.nn.softmax(logits, axis=-1),
            "predictions": tf.argmax(logits, axis=-1, output_type=tf.int32),
            "pooled_output": encoded["pooled_output"],
        }

    def get_config(self):
        return {
            "config": self.config.to_dict(),
            "num_labels": self.num_labels,
            "classifier_dropout": self.classifier_dropout,
            "name": self.name,
        }

    @classmethod
    def from_config(cls, config):
        return cls(
            AlbertConfig.from_dict(config["config"]),
            config["num_labels"],
            config.get("classifier_dropout", CLASSIFIER_DROPOUT),
            name=config.get("name", "albert_classifier"),
        )


def per_example_loss(logits, labels, is_regression):
    """Cross-entropy of the true class [B] (or squared error [B] for regression)."""
    if is_regression:
        return tf.square(tf.cast(logits, tf.float32) - tf.cast(labels, tf.float32))
    log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1)
    one_hot = tf.one_hot(tf.cast(labels, tf.int32), tf.shape(logits)[-1], dtype=tf.float32)
    return -tf.reduce_sum(one_hot * log_probs, axis=-1)


def loss_fn(model, features, training):
    """Trainer loss: mean over the replica's batch (training batches hold no padding)."""
    out = model(features, training=training)
    loss = tf.reduce_mean(
        per_example_loss(out["logits"], features["label_ids"], model.is_regression)
    )
    return loss, {}


# --------------------------------------------------------------------------------------
# Eval / predict loops
# --------------------------------------------------------------------------------------
def eval_dataset_fn(path, seq_length, batch_size, num_examples, is_regression, replicas):
    """Every eval/predict record once, in file order, in padded per-replica batches
    (eval_outputs.replica_eval_dataset_fn)."""
    from albert_tf.data.classifier_data import classifier_dataset

    return replica_eval_dataset_fn(
        lambda per_replica: classifier_dataset(
            path, seq_length, per_replica, is_training=False, is_regression=is_regression
        ),
        num_examples,
        batch_size,
        replicas,
    )


def predict_arrays(strategy, model, dataset_fn, jit_compile=False):
    """Runs the model over an eval/predict dataset (`jit_compile`: the step compiled with
    XLA); returns numpy arrays in file order: probabilities, predictions,
    per_example_loss, label_ids, is_real_example."""

    def step(features):
        out = model(features, training=False)
        return {
            "probabilities": out["probabilities"],
            "predictions": out["predictions"],
            "per_example_loss": per_example_loss(
                out["logits"], features["label_ids"], model.is_regression
            ),
            "label_ids": features["label_ids"],
            "is_real_example": features["is_real_example"],
        }

    return collect_outputs(strategy, dataset_fn, step, jit_compile)


def compute_metrics(task_name, arrays):
    """The task's GLUE metrics plus eval_loss (mean over real examples)."""
    real = arrays["is_real_example"]
    result = glue.glue_metrics(task_name, arrays["predictions"], arrays["label_ids"], real)
    mask = real != 0
    result["eval_loss"] = float(np.mean(arrays["per_example_loss"][mask])) if mask.any() else 0.0
    result["loss"] = result["eval_loss"]  # the Estimator's key in the original's results
    return result


def init_from_checkpoint(model, path):
    """Fills an AlbertClassifier from --init_checkpoint (see driver.init_from_checkpoint;
    the `output_*` head may be missing). Returns a one-line description."""
    return driver.init_from_checkpoint(model, path, "classifier", HEAD_PATTERNS)


# --------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------
@dataclasses.dataclass(kw_only=True)
class ClassifierOptions(driver.RunOptions, ModelFileOptions):
    """run_classifier.py's flags (original names and defaults, §11.1) plus ours."""

    task_name: str = option(
        REQUIRED, "Task: cola, sst-2, mrpc, sts-b, qqp, mnli, mismnli, qnli, rte, wnli, ax."
    )
    data_dir: str | None = option(None, "GLUE data folder (holds MRPC/, SST-2/, ...).")
    cached_dir: str | None = option(
        None, "Feature cache folder (default: --output_dir).", output="folder"
    )
    max_seq_length: int = option(512, "Sequence length (<= max_position_embeddings).", minimum=3)
    do_eval: bool = option(False, "Evaluate every checkpoint on dev, keep the best.")
    do_predict: bool = option(False, "Write <TASK>.tsv and test_results.tsv for the test set.")
    eval_batch_size: int = option(8, "Eval batch size.", minimum=1)
    predict_batch_size: int = option(8, "Predict batch size.", minimum=1)
    train_step: int = option(1000, "Optimizer steps.", minimum=1)
    warmup_step: int = option(0, "Linear warmup steps.", minimum=0)
    export_dir: str | None = option(
        None,
        "Write a SavedModel here: serving_default over token ids (loads with TensorFlow "
        "alone) and serve_text over raw strings (loading needs `import tensorflow_text`).",
        output="folder",
    )
    threshold_to_export: float = option(
        float("nan"), "If set, the SavedModel also outputs this constant as `threshold`."
    )
    use_tfds: bool = option(False, "Read GLUE from TensorFlow Datasets instead of TSVs.")
    tfds_data_dir: str | None = option(None, "TFDS data directory.")
    full_shuffle: bool = option(
        False,
        "Shuffle the whole training set each epoch instead of the original's 100-record buffer.",
    )


class ClassifierTask(driver.Task):
    """GLUE fine-tuning: features cached per split, dev metrics by the original's key
    (metrics.selection_key), submission files from the test split, SavedModel export."""

    head = "classifier"
    head_patterns = tuple(HEAD_PATTERNS)
    export_kind = CLASSIFIER_KIND

    def __init__(self, options: ClassifierOptions):
        super().__init__(options)
        self.task = (options.task_name or "").lower()

    def output_identity(self):
        # Two-label tasks have heads of one shape: only the name tells MRPC's
        # checkpoints from SST-2's.
        return {"task_name": MODEL_OF_TASK.get(self.task, self.task)}

    def input_shape(self):
        opts = self.options
        names = (
            "task_name",
            "data_dir",
            "use_tfds",
            "max_seq_length",
            "do_lower_case",
            "train_batch_size",
            "full_shuffle",
        )
        return {name: getattr(opts, name) for name in names}

    def resolve(self):
        from albert_tf.data.classifier_data import PROCESSORS, get_processor

        opts = self.options
        if self.task not in PROCESSORS:
            raise UserError(
                f"--task_name={opts.task_name!r} is not a known task; "
                f"known: {', '.join(sorted(PROCESSORS))}"
            )
        if not (opts.do_train or opts.do_eval or opts.do_predict or opts.export_dir):
            raise UserError(
                "at least one of --do_train, --do_eval, --do_predict or --export_dir must be set"
            )
        self.files = resolve_model_files(
            opts, opts.max_seq_length, token_types=1 if self.task in SINGLE_SENTENCE_TASKS else 2
        )
        self.processor = get_processor(
            self.task, use_spm=bool(self.files.spm_model_file), do_lower_case=opts.do_lower_case
        )
        self.label_list = self.processor.get_labels()
        splits = (
            ([("train", "do_train")] if opts.do_train else [])
            + ([("dev", "do_eval")] if opts.do_eval else [])
            + ([("test", "do_predict")] if opts.do_predict else [])
        )
        self.tokenizer = make_tokenizer(opts, self.files)
        self.examples = {}
        if splits and not opts.use_tfds:
            if not opts.data_dir:
                raise UserError("--data_dir is required (or --use_tfds)")
            fileio.check_input_folder(opts.data_dir, f"--data_dir={opts.data_dir}")
            for split, flag in splits:
                self.examples[split] = self._read_split(split, flag)
        return self.files.config

    def _read_split(self, split, flag):
        """The examples of one split's TSV file: it exists, parses and holds at least one
        example. A training set smaller than a batch is fine: training repeats the records
        forever, as the original does."""
        opts = self.options
        try:
            path = self.processor.data_file(opts.data_dir, split)
        except ValueError as err:
            raise UserError(f"--{flag} with --task_name={self.task}: {err}") from None
        if not tf.io.gfile.exists(path):
            raise UserError(
                f"--{flag}: {path} not found (task {self.task} reads "
                f"{self.processor.folder}/{self.processor.files[split]} under --data_dir)"
            )
        fileio.check_input_file(path, f"--data_dir={opts.data_dir}: {path}")  # a FIFO blocks
        try:
            examples = self.processor.get_examples(opts.data_dir, split)
        except (ValueError, FileNotFoundError) as err:
            raise UserError(str(err)) from None
        if not examples:
            raise UserError(f"--{flag}: {path} holds no example; expected at least one data row")
        return examples

    def build_model(self, config):
        return AlbertClassifier(config, len(self.label_list))

    def loss_fn(self, model, features, training):
        return loss_fn(model, features, training)

    def _features(self, split):
        from albert_tf.data.classifier_data import cached_features

        opts = self.options
        try:
            return cached_features(
                self.task,
                split,
                opts.data_dir,
                opts.cached_dir or opts.output_dir,
                self.tokenizer,
                opts.max_seq_length,
                do_lower_case=opts.do_lower_case,
                spm_model_file=self.files.spm_model_file,
                vocab_file=self.files.vocab_file,
                use_tfds=opts.use_tfds,
                tfds_data_dir=opts.tfds_data_dir,
                examples=self.examples.get(split),
            )
        except (ValueError, FileNotFoundError) as err:
            raise UserError(f"{split} data: {err}") from None

    def evaluator(self, run):
        opts = self.options
        if not opts.do_eval:
            return None
        dev = self._features("dev")
        run.summary["num_dev_examples"] = dev.num_examples
        dev_fn = eval_dataset_fn(
            dev.path,
            opts.max_seq_length,
            opts.eval_batch_size,
            dev.num_examples,
            run.model.is_regression,
            run.replicas,
        )
        return driver.Evaluation(
            glue.selection_key(self.task),
            lambda: compute_metrics(
                self.task, predict_arrays(run.strategy, run.model, dev_fn, run.jit_compile)
            ),
        )

    def training_plan(self, run):
        from albert_tf.data.classifier_data import classifier_dataset

        opts = self.options
        train = self._features("train")
        run.summary["num_train_examples"] = train.num_examples

        def dataset_fn(ctx):
            return classifier_dataset(
                train.path,
                opts.max_seq_length,
                opts.train_batch_size,
                is_training=True,
                is_regression=run.model.is_regression,
                input_context=ctx,
                full_shuffle=opts.full_shuffle,
                seed=opts.random_seed,
            )

        return driver.TrainingPlan(dataset_fn, opts.train_step, opts.warmup_step)

    def wants_final_weights(self):
        return self.options.do_predict or bool(self.options.export_dir)

    def _test_guids(self):
        from albert_tf.data.classifier_data import tfds_examples

        opts = self.options
        if opts.use_tfds:
            examples = tfds_examples(
                self.task,
                "test",
                opts.tfds_data_dir,
                bool(self.files.spm_model_file),
                opts.do_lower_case,
            )
        else:
            examples = self.examples["test"]
        return [e.guid for e in examples]

    def predict(self, run):
        opts = self.options
        if not opts.do_predict:
            return
        test = self._features("test")
        guids = self._test_guids()
        if len(guids) != test.num_examples:
            raise UserError(
                f"test data: {len(guids)} examples but {test.num_examples} features (stale cache?)"
            )
        arrays = predict_arrays(
            run.strategy,
            run.model,
            eval_dataset_fn(
                test.path,
                opts.max_seq_length,
                opts.predict_batch_size,
                test.num_examples,
                run.model.is_regression,
                run.replicas,
            ),
            run.jit_compile,
        )
        real = arrays["is_real_example"] != 0
        probabilities, predictions = arrays["probabilities"][real], arrays["predictions"][real]
        if run.is_chief:
            run.summary["submission"] = glue.write_glue_submission(
                opts.output_dir, self.task, guids, predictions, self.label_list
            )
            # The original's name for the same file.
            fileio.atomic_write_text(
                os.path.join(opts.output_dir, "submit_results.tsv"),
                fileio.read_text(run.summary["submission"]),
            )
            run.summary["test_results"] = glue.write_test_results(
                os.path.join(opts.output_dir, "test_results.tsv"), probabilities
            )
            _logger.info(
                "wrote %s and %s (%d examples)",
                run.summary["submission"],
                run.summary["test_results"],
                len(guids),
            )

    def export(self, run):
        from albert_tf.export.saved_model import export_classifier

        opts = self.options
        if opts.export_dir and run.is_chief:
            run.summary["export_dir"] = export_classifier(
                run.model,
                opts.export_dir,
                opts.max_seq_length,
                spm_model_file=self.files.spm_model_file,
                do_lower_case=opts.do_lower_case,
                text_pair=self.task not in SINGLE_SENTENCE_TASKS,
                label_list=self.label_list,
                task_name=self.task,
                threshold=opts.threshold_to_export,
                digit_comma=opts.digit_comma,
            )


def run(opts: ClassifierOptions) -> dict:
    """Runs what the options ask for; returns a summary dict (task, best, files)."""
    return {"task": (opts.task_name or "").lower(), **driver.run(ClassifierTask(opts))}


__all__ = [
    "AlbertClassifier",
    "ClassifierOptions",
    "ClassifierTask",
    "loss_fn",
    "per_example_loss",
    "predict_arrays",
    "compute_metrics",
    "init_from_checkpoint",
    "run",
]
