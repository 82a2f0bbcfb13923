"""GLUE fine-tuning: the classifier model, its loss, evaluation, prediction and export.

This is the task side of run_classifier.py (ORIGINAL_RELEASE.md §11); the script only
parses flags into `ClassifierOptions` and calls `run`.

Model (§11.4): encoder pooled output -> dropout 0.1 in training (fixed, independent of
the config) -> logits = pooled . output_weights^T + output_bias (variables
`output_weights` [K, H], `output_bias` [K], top level in the original checkpoint).
Classification: mean softmax cross-entropy, prediction = argmax. STS-B: one output,
squeezed, mean squared error, prediction = the value.

Run (§11.6, quirk 24): checkpoints are evaluated on dev and the best is kept as
`model.ckpt-best` (albert_tf/finetuning.py); the selection key is accuracy, MCC for
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

from albert_tf import finetuning, metrics as glue
from albert_tf.config import AlbertConfig
from albert_tf.heads import OutputProjection
from albert_tf.modeling import AlbertModel

_logger = logging.getLogger(__name__)

CLASSIFIER_DROPOUT = 0.1  # hard-coded in the original (quirk 9)
SINGLE_SENTENCE_TASKS = ("cola", "sst-2")
HEAD_PATTERNS = [r"^output_"]  # original names of the head, absent from pretraining checkpoints


class ClassifierError(finetuning.FineTuningError):
    """A user error of a GLUE run (bad flag, missing file, unusable checkpoint)."""


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
        self.classifier = OutputProjection(self.num_labels,
                                           initializer_range=config.initializer_range,
                                           name="classifier")

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
            return {"logits": logits, "probabilities": logits, "predictions": logits,
                    "pooled_output": encoded["pooled_output"]}
        return {"logits": logits, "probabilities": tf.nn.softmax(logits, axis=-1),
                "predictions": tf.argmax(logits, axis=-1, output_type=tf.int32),
                "pooled_output": encoded["pooled_output"]}

    def get_config(self):
        return {"config": self.config.to_dict(), "num_labels": self.num_labels,
                "classifier_dropout": self.classifier_dropout, "name": self.name}

    @classmethod
    def from_config(cls, config):
        return cls(AlbertConfig.from_dict(config["config"]), config["num_labels"],
                   config.get("classifier_dropout", CLASSIFIER_DROPOUT),
                   name=config.get("name", "albert_classifier"))


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
    loss = tf.reduce_mean(per_example_loss(out["logits"], features["label_ids"],
                                           model.is_regression))
    return loss, {}


# --------------------------------------------------------------------------------------
# Eval / predict loops
# --------------------------------------------------------------------------------------
def eval_dataset_fn(path, seq_length, batch_size, num_examples, is_regression, replicas):
    """Every eval/predict record once, in file order, in padded per-replica batches
    (finetuning.replica_eval_dataset_fn)."""
    from albert_tf.data.classifier_data import classifier_dataset

    return finetuning.replica_eval_dataset_fn(
        lambda per_replica: classifier_dataset(path, seq_length, per_replica,
                                               is_training=False, is_regression=is_regression),
        num_examples, batch_size, replicas, ClassifierError)


def predict_arrays(strategy, model, dataset_fn):
    """Runs the model over an eval/predict dataset; returns numpy arrays in file order:
    probabilities, predictions, per_example_loss, label_ids, is_real_example."""
    def step(features):
        out = model(features, training=False)
        return {"probabilities": out["probabilities"], "predictions": out["predictions"],
                "per_example_loss": per_example_loss(out["logits"], features["label_ids"],
                                                     model.is_regression),
                "label_ids": features["label_ids"],
                "is_real_example": features["is_real_example"]}

    try:
        return finetuning.collect_outputs(strategy, dataset_fn, step)
    except finetuning.FineTuningError as err:
        raise ClassifierError(str(err)) from None


def compute_metrics(task_name, arrays):
    """The task's GLUE metrics plus eval_loss (mean over real examples)."""
    real = arrays["is_real_example"]
    result = glue.glue_metrics(task_name, arrays["predictions"], arrays["label_ids"], real)
    mask = real != 0
    result["eval_loss"] = float(np.mean(arrays["per_example_loss"][mask])) if mask.any() else 0.0
    return result


def init_from_checkpoint(model, path):
    """Fills an AlbertClassifier from --init_checkpoint (see finetuning.init_from_checkpoint;
    the `output_*` head may be missing). Returns a one-line description."""
    return finetuning.init_from_checkpoint(model, path, "classifier", HEAD_PATTERNS,
                                           ClassifierError)


# --------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------
@dataclasses.dataclass
class ClassifierOptions(finetuning.RunOptions):
    """run_classifier.py's flags (original names and defaults, §11.1) plus ours."""
    task_name: str
    output_dir: str
    data_dir: str | None = None
    init_checkpoint: str | None = None
    albert_config_file: str | None = None
    albert_hub_module_handle: str | None = None
    spm_model_file: str | None = None
    vocab_file: str | None = None
    do_lower_case: bool = True
    max_seq_length: int = 512
    do_train: bool = False
    do_eval: bool = False
    do_predict: bool = False
    train_batch_size: int = 32
    eval_batch_size: int = 8
    predict_batch_size: int = 8
    learning_rate: float = 5e-5
    train_step: int = 1000
    warmup_step: int = 0
    save_checkpoints_steps: int = 1000
    iterations_per_loop: int = 1000
    optimizer: str = "adamw"
    cached_dir: str | None = None
    export_dir: str | None = None
    threshold_to_export: float = float("nan")
    use_tfds: bool = False
    tfds_data_dir: str | None = None
    full_shuffle: bool = False


@dataclasses.dataclass
class Resolved:
    """Files and settings derived from the options before anything is built."""
    config: AlbertConfig
    spm_model_file: str | None
    vocab_file: str | None
    processor: object
    label_list: list


def resolve(opts: ClassifierOptions) -> Resolved:
    """Validates the options (clear ClassifierError naming the flag/file); nothing is written."""
    from albert_tf.data.classifier_data import PROCESSORS, get_processor

    task = (opts.task_name or "").lower()
    if task not in PROCESSORS:
        raise ClassifierError(f"--task_name={opts.task_name!r} is not a known task; "
                              f"known: {', '.join(sorted(PROCESSORS))}")
    if not (opts.do_train or opts.do_eval or opts.do_predict or opts.export_dir):
        raise ClassifierError("at least one of --do_train, --do_eval, --do_predict or "
                              "--export_dir must be set")
    if not opts.output_dir:
        raise ClassifierError("--output_dir is required")
    if opts.optimizer not in ("adamw", "lamb"):
        raise ClassifierError(f"--optimizer={opts.optimizer!r}; expected adamw or lamb")
    for name in ("train_batch_size", "eval_batch_size", "predict_batch_size", "train_step",
                 "save_checkpoints_steps", "iterations_per_loop"):
        if getattr(opts, name) < 1:
            raise ClassifierError(f"--{name} must be >= 1, got {getattr(opts, name)}")
    if opts.warmup_step < 0:
        raise ClassifierError(f"--warmup_step must be >= 0, got {opts.warmup_step}")

    config, spm, vocab = finetuning.resolve_model_files(
        init_checkpoint=opts.init_checkpoint, albert_config_file=opts.albert_config_file,
        spm_model_file=opts.spm_model_file, vocab_file=opts.vocab_file,
        albert_hub_module_handle=opts.albert_hub_module_handle,
        max_seq_length=opts.max_seq_length, error=ClassifierError)
    if opts.max_seq_length < 3:
        raise ClassifierError(f"--max_seq_length must be >= 3, got {opts.max_seq_length}")

    processor = get_processor(task, use_spm=bool(spm), do_lower_case=opts.do_lower_case)
    splits = ([("train", "do_train")] if opts.do_train else []) + \
             ([("dev", "do_eval")] if opts.do_eval else []) + \
             ([("test", "do_predict")] if opts.do_predict else [])
    if splits and not opts.use_tfds:
        if not opts.data_dir:
            raise ClassifierError("--data_dir is required (or --use_tfds)")
        if not tf.io.gfile.isdir(opts.data_dir):
            raise ClassifierError(f"--data_dir={opts.data_dir}: directory not found")
        for split, flag in splits:
            try:
                path = processor.data_file(opts.data_dir, split)
            except ValueError as err:
                raise ClassifierError(f"--{flag} with --task_name={task}: {err}") from None
            if not tf.io.gfile.exists(path):
                raise ClassifierError(f"--{flag}: {path} not found (task {task} reads "
                                      f"{processor.folder}/{processor.files[split]} under "
                                      "--data_dir)")
    return Resolved(config, spm, vocab, processor, processor.get_labels())


def _features(opts, res, tokenizer, split):
    from albert_tf.data.classifier_data import cached_features

    cache = opts.cached_dir or opts.output_dir
    try:
        return cached_features(opts.task_name.lower(), split, opts.data_dir, cache, tokenizer,
                               opts.max_seq_length, do_lower_case=opts.do_lower_case,
                               spm_model_file=res.spm_model_file, vocab_file=res.vocab_file,
                               use_tfds=opts.use_tfds, tfds_data_dir=opts.tfds_data_dir)
    except (ValueError, FileNotFoundError) as err:
        raise ClassifierError(f"{split} data: {err}") from None


def _test_guids(opts, res):
    from albert_tf.data.classifier_data import tfds_examples

    use_spm = bool(res.spm_model_file)
    if opts.use_tfds:
        examples = tfds_examples(opts.task_name.lower(), "test", opts.tfds_data_dir, use_spm,
                                 opts.do_lower_case)
    else:
        examples = res.processor.get_examples(opts.data_dir, "test")
    return [e.guid for e in examples]


def run(opts: ClassifierOptions) -> dict:
    """Runs what the options ask for; returns a summary dict (eval metrics, best, files)."""
    from albert_tf import tokenization
    from albert_tf.data.classifier_data import classifier_dataset

    res = resolve(opts)
    task = opts.task_name.lower()
    summary = {"task": task}
    strategy, chief, replicas = finetuning.start_run(opts, res.config, ClassifierError)
    tokenizer = tokenization.FullTokenizer(vocab_file=res.vocab_file,
                                           do_lower_case=opts.do_lower_case,
                                           spm_model_file=res.spm_model_file)
    if tokenizer.vocab_size != res.config.vocab_size:
        _logger.warning("tokenizer has %d pieces but the config's vocab_size is %d",
                        tokenizer.vocab_size, res.config.vocab_size)

    with strategy.scope():
        model = AlbertClassifier(res.config, len(res.label_list))
        model.build()
    message = finetuning.initialize(model, opts, "classifier", HEAD_PATTERNS, ClassifierError)
    if message:
        summary["init"] = message
    tf.io.gfile.makedirs(opts.output_dir)  # only once the inputs proved usable

    selector = None
    if opts.do_eval:
        dev = _features(opts, res, tokenizer, "dev")
        summary["num_dev_examples"] = dev.num_examples
        dev_fn = eval_dataset_fn(dev.path, opts.max_seq_length, opts.eval_batch_size,
                                  dev.num_examples, model.is_regression, replicas)
        selector = finetuning.CheckpointSelector(
            glue.selection_key(task), opts.output_dir, model,
            lambda: compute_metrics(task, predict_arrays(strategy, model, dev_fn)),
            "classifier", chief, ClassifierError)

    if opts.do_train:
        train = _features(opts, res, tokenizer, "train")
        summary["num_train_examples"] = train.num_examples
        if train.num_examples < opts.train_batch_size:
            raise ClassifierError(f"training data has {train.num_examples} examples, fewer "
                                  f"than --train_batch_size={opts.train_batch_size}")
        trainer = finetuning.make_trainer(strategy, model, loss_fn, opts, opts.train_step,
                                          opts.warmup_step, chief, opts.optimizer)

        def dataset_fn(ctx):
            return classifier_dataset(train.path, opts.max_seq_length, opts.train_batch_size,
                                      is_training=True, is_regression=model.is_regression,
                                      input_context=ctx, full_shuffle=opts.full_shuffle,
                                      seed=opts.random_seed)

        summary["train_step"] = finetuning.train_and_select(trainer, dataset_fn, selector)

    if selector is not None:
        if not selector.evaluate_pending() and selector.best is None:
            if not opts.init_checkpoint:
                raise ClassifierError(f"--do_eval: no checkpoint (ckpt-<step>) in "
                                      f"{opts.output_dir} and no --init_checkpoint to evaluate")
            if not opts.do_train:
                selector.evaluate_current(0)  # the --init_checkpoint weights
        summary["best"] = selector.best
        if chief and selector.best is not None:
            _logger.info("best checkpoint on dev: step %d, %s = %.4f (best-on-dev, as the "
                         "original's reported numbers)", selector.best["global_step"],
                         selector.best["key"], selector.best["value"])

    if opts.do_predict or opts.export_dir:
        summary["predict_weights"] = finetuning.final_weights(
            model, opts.output_dir, opts.init_checkpoint, "classifier", ClassifierError)

    if opts.do_predict:
        test = _features(opts, res, tokenizer, "test")
        guids = _test_guids(opts, res)
        if len(guids) != test.num_examples:
            raise ClassifierError(f"test data: {len(guids)} examples but {test.num_examples} "
                                  "features (stale cache?)")
        arrays = predict_arrays(strategy, model, eval_dataset_fn(
            test.path, opts.max_seq_length, opts.predict_batch_size, test.num_examples,
            model.is_regression, replicas))
        real = arrays["is_real_example"] != 0
        probabilities, predictions = arrays["probabilities"][real], arrays["predictions"][real]
        if chief:
            summary["submission"] = glue.write_glue_submission(
                opts.output_dir, task, guids, predictions, res.label_list)
            summary["test_results"] = glue.write_test_results(
                os.path.join(opts.output_dir, "test_results.tsv"), probabilities)
            _logger.info("wrote %s and %s (%d examples)", summary["submission"],
                         summary["test_results"], len(guids))

    if opts.export_dir and chief:
        from albert_tf.export import export_classifier

        summary["export_dir"] = export_classifier(
            model, opts.export_dir, opts.max_seq_length, spm_model_file=res.spm_model_file,
            do_lower_case=opts.do_lower_case, text_pair=task not in SINGLE_SENTENCE_TASKS,
            label_list=res.label_list, task_name=task, threshold=opts.threshold_to_export)
    return summary


__all__ = ["AlbertClassifier", "ClassifierOptions", "ClassifierError",
           "loss_fn", "per_example_loss", "predict_arrays", "compute_metrics",
           "init_from_checkpoint", "resolve", "run"]
