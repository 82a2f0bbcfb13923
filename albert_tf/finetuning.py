"""What every fine-tuning run shares (GLUE, SQuAD, RACE): its output folder,
checkpoint selection on dev, and initialization from --init_checkpoint.

Training writes `ckpt-<step>` (object-based) every save_checkpoints_steps. Every
checkpoint is evaluated on dev in step order; results are appended to
eval_results.txt, the best by the task's selection key is kept as
`model.ckpt-best` in the ORIGINAL variable format (loadable by the original code)
and described in `best_checkpoint` (JSON). Reported dev numbers are therefore
best-checkpoint-on-dev, as the original's.

A task model is an `albert` encoder plus one head attribute named in
`checkpoints.HEAD_SCOPES`; the functions here take that attribute's name.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import re
from typing import Callable, Sequence

import keras
import numpy as np
import tensorflow as tf

from albert_tf import checkpoints, fileio

_logger = logging.getLogger(__name__)

BEST_PREFIX = "model.ckpt-best"
BEST_FILE = "best_checkpoint"
EVAL_RESULTS = "eval_results.txt"
_CKPT = re.compile(r"^ckpt-(\d+)$")


class FineTuningError(ValueError):
    """A user error (bad flag, missing file, unusable checkpoint) with a clear message."""


# --------------------------------------------------------------------------------------
# Options every run has (the flags of cli.define_run_flags)
# --------------------------------------------------------------------------------------
@dataclasses.dataclass(kw_only=True)
class RunOptions:
    """Devices (the original's TPU flags; ours: strategy), seed, host memory and the number
    of ckpt-<step> kept. Task options subclass it and add their own fields."""
    use_tpu: bool = False
    tpu_name: str | None = None
    tpu_zone: str | None = None
    gcp_project: str | None = None
    master: str | None = None
    num_tpu_cores: int = 8  # accepted; the TPU topology decides
    keep_checkpoint_max: int = 5
    strategy: str = "default"
    random_seed: int = 12345
    host_allocator: str = "auto"


# --------------------------------------------------------------------------------------
# The model files a run needs
# --------------------------------------------------------------------------------------
def resolve_model_files(*, init_checkpoint, albert_config_file, spm_model_file, vocab_file,
                        albert_hub_module_handle, max_seq_length, error=FineTuningError,
                        require_spm=False):
    """Validates the flags that name the model; returns (AlbertConfig, spm model file,
    vocab file). A release folder as --init_checkpoint supplies the config and the
    SentencePiece model unless they are given. Raises `error` naming the flag and file."""
    from albert_tf import release
    from albert_tf.config import AlbertConfig

    if albert_hub_module_handle:
        raise error("--albert_hub_module_handle: TF-Hub modules are not supported; unpack the "
                    "released model and pass its folder as --init_checkpoint (it provides "
                    "albert_config.json, model.ckpt-best and 30k-clean.model)")
    config_file, spm, vocab = albert_config_file, spm_model_file, vocab_file
    is_release = bool(init_checkpoint) and release.is_release_folder(init_checkpoint)
    if is_release:
        try:
            files = release.release_files(init_checkpoint)
        except FileNotFoundError as err:
            raise error(f"--init_checkpoint: {err}") from None
        config_file = config_file or files.config_file
        if not spm and not vocab:
            spm = files.spm_model_file
            vocab = None if spm else files.vocab_file
    if not config_file:
        raise error("--albert_config_file is required (or pass a release folder holding "
                    "albert_config.json as --init_checkpoint)")
    if not tf.io.gfile.exists(config_file):
        raise error(f"--albert_config_file={config_file}: file not found")
    try:
        config = AlbertConfig.from_json_file(config_file)
    except (ValueError, TypeError, KeyError) as err:
        raise error(f"--albert_config_file={config_file}: {err}") from None
    if require_spm and not spm:
        raise error("--spm_model_file is required: SQuAD features are SentencePiece only, as "
                    "the original's" + (" (--vocab_file is not used)" if vocab else ""))
    if not spm and not vocab:
        raise error("--spm_model_file (or --vocab_file) is required")
    for flag, path in (("spm_model_file", spm), ("vocab_file", vocab)):
        if path and not tf.io.gfile.exists(path):
            raise error(f"--{flag}={path}: file not found")
    if max_seq_length > config.max_position_embeddings:
        raise error(f"--max_seq_length={max_seq_length} exceeds max_position_embeddings="
                    f"{config.max_position_embeddings} of {config_file}")
    if init_checkpoint and not is_release:
        try:
            checkpoints.resolve_checkpoint_path(init_checkpoint)
        except FileNotFoundError as err:
            raise error(f"--init_checkpoint={init_checkpoint}: {err}") from None
    return config, spm, vocab


# --------------------------------------------------------------------------------------
# The steps every run takes
# --------------------------------------------------------------------------------------
def start_run(opts, config, error=FineTuningError):
    """Host allocator, seeds and distribution strategy from the run's options (fields
    host_allocator, random_seed, strategy, use_tpu, tpu_*, gcp_project, master,
    train_batch_size). Returns (strategy, is_chief, replicas)."""
    from albert_tf.distribute import get_strategy, is_chief
    from albert_tf.host_memory import configure_host_allocator

    configure_host_allocator(opts.host_allocator,  # before TensorFlow's first op
                             num_parameters=config.num_parameters())
    keras.utils.set_random_seed(opts.random_seed)
    strategy = get_strategy(opts.strategy, opts.use_tpu, opts.tpu_name, opts.tpu_zone,
                            opts.gcp_project, opts.master)
    replicas = strategy.num_replicas_in_sync
    if opts.train_batch_size % replicas:
        raise error(f"--train_batch_size={opts.train_batch_size} is not divisible by the "
                    f"{replicas} replicas")
    return strategy, is_chief(strategy), replicas


def initialize(model, opts, head, head_patterns, error=FineTuningError):
    """Loads --init_checkpoint unless a training run resumes from its own ckpt-<step>;
    returns the description (None when nothing was loaded)."""
    resuming = opts.do_train and bool(object_checkpoints(opts.output_dir))
    if not opts.init_checkpoint or resuming:
        return None
    message = init_from_checkpoint(model, opts.init_checkpoint, head, head_patterns, error)
    _logger.info("--init_checkpoint: %s", message)
    return message


def make_trainer(strategy, model, loss_fn, opts, num_train_steps, num_warmup_steps, is_chief,
                 optimizer="adamw"):
    """The original's optimizer and schedule and a Trainer checkpointing into output_dir
    (fields learning_rate, train_batch_size, iterations_per_loop, save_checkpoints_steps,
    keep_checkpoint_max, output_dir)."""
    from albert_tf import training
    from albert_tf.optimization import create_optimizer

    with strategy.scope():
        opt = create_optimizer(opts.learning_rate, num_train_steps, num_warmup_steps, optimizer)
    loop = training.LoopConfig(
        num_train_steps=num_train_steps, global_batch_size=opts.train_batch_size,
        iterations_per_loop=min(opts.iterations_per_loop, opts.save_checkpoints_steps),
        save_checkpoints_steps=opts.save_checkpoints_steps,
        keep_checkpoint_max=opts.keep_checkpoint_max)
    return training.Trainer(strategy, model, opt, loss_fn, [], opts.output_dir, loop, is_chief)


# --------------------------------------------------------------------------------------
# Files of the output folder
# --------------------------------------------------------------------------------------
def append_eval_results(output_dir, metrics, global_step):
    """Appends a "key = value" block (global_step first) to eval_results.txt."""
    path = os.path.join(output_dir, EVAL_RESULTS)
    fileio.append_eval_results(path, metrics, global_step)
    return path


def evaluated_steps(output_dir):
    """Steps already in eval_results.txt (so a resumed run does not redo them)."""
    path = os.path.join(output_dir, EVAL_RESULTS)
    if not tf.io.gfile.exists(path):
        return set()
    with tf.io.gfile.GFile(path) as f:
        return {int(m) for m in re.findall(r"^global_step = (\d+)$", f.read(), re.M)}


def read_best(output_dir):
    """The `best_checkpoint` record (dict) or None."""
    path = os.path.join(output_dir, BEST_FILE)
    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path) as f:
        return json.loads(f.read())


def object_checkpoints(output_dir):
    """[(step, prefix)] of the `ckpt-<step>` files in output_dir, in step order."""
    found = {}
    for index in tf.io.gfile.glob(os.path.join(output_dir, "ckpt-*.index")):
        name = os.path.basename(index)[: -len(".index")]
        m = _CKPT.match(name)
        if m:
            found[int(m.group(1))] = os.path.join(output_dir, name)
    return sorted(found.items())


def restore_trained(model, prefix, head, error=FineTuningError):
    """Restores a task model from one of its training checkpoints (ckpt-<step>);
    `head` is the model attribute that must be in it."""
    parts = checkpoints.restore_object_checkpoint(model, prefix)
    if head not in parts:
        raise error(f"{prefix}: holds no {head} head (model/{head})")


class CheckpointSelector:
    """Evaluates checkpoints and keeps the best as model.ckpt-best (original format).

    evaluate(): metrics dict of the model's current weights; `key` names the one to
    maximize.
    """

    def __init__(self, key: str, output_dir: str, model, evaluate: Callable[[], dict],
                 head: str, is_chief: bool = True, error=FineTuningError):
        self.key = key
        self.output_dir = output_dir
        self.model = model
        self.evaluate = evaluate
        self.head = head
        self.is_chief = is_chief
        self.error = error
        self.best = read_best(output_dir)
        self.last_metrics = None

    def evaluate_current(self, step):
        """Evaluates the model's current weights as global step `step`."""
        result = self.evaluate()
        self.last_metrics = result
        value = result[self.key]
        _logger.info("eval at step %d: %s", step,
                     ", ".join(f"{k} = {v:.4f}" for k, v in sorted(result.items())))
        if not self.is_chief:
            return result
        append_eval_results(self.output_dir, result, step)
        if self.best is None or value > self.best["value"]:
            checkpoints.save_original_checkpoint(
                self.model, os.path.join(self.output_dir, BEST_PREFIX), global_step=step,
                update_checkpoint_state=False)  # the `checkpoint` file stays the trainer's
            self.best = {"global_step": int(step), "key": self.key, "value": float(value),
                         "checkpoint": BEST_PREFIX, "metrics": result}
            fileio.atomic_write_text(os.path.join(self.output_dir, BEST_FILE),
                                     json.dumps(self.best, indent=2, sort_keys=True) + "\n")
            _logger.info("new best %s = %.4f at step %d -> %s", self.key, value, step, BEST_PREFIX)
        return result

    def evaluate_pending(self):
        """Evaluates every ckpt-<step> not yet in eval_results.txt, in step order.
        Returns the number evaluated."""
        done = evaluated_steps(self.output_dir)
        count = 0
        for step, prefix in object_checkpoints(self.output_dir):
            if step in done:
                continue
            restore_trained(self.model, prefix, self.head, self.error)
            self.evaluate_current(step)
            count += 1
        return count


def train_and_select(trainer, dataset_fn, selector: CheckpointSelector | None):
    """Trains to trainer.config.num_train_steps; with a selector, stops at every
    checkpoint and evaluates it (the original ran its eval loop beside training; here
    it runs in-process between segments). Returns the final step."""
    total = trainer.config.num_train_steps
    save = trainer.config.save_checkpoints_steps
    if selector is None:
        trainer.train(dataset_fn)
    else:
        selector.evaluate_pending()  # checkpoints of an interrupted run
        while int(trainer.optimizer.iterations.numpy()) < total:
            done = int(trainer.optimizer.iterations.numpy())
            trainer.config.num_train_steps = min(total, (done // save + 1) * save)
            trainer.train(dataset_fn)
            selector.evaluate_pending()
        trainer.config.num_train_steps = total
    return int(trainer.optimizer.iterations.numpy())


# --------------------------------------------------------------------------------------
# Running a model over eval data
# --------------------------------------------------------------------------------------
def replica_eval_dataset_fn(make_dataset, num_records, batch_size, replicas,
                            error=FineTuningError):
    """A dataset_fn over every record once, in file order, for `collect_outputs`.

    make_dataset(per_replica_batch) -> batches padded to full size with zero rows. Whole
    zero batches are appended so the batch count is a multiple of the replicas: every
    step feeds every replica the same static shape. Not sharded: every worker reads the
    whole (small) file, so the local results concatenate in file order.
    """
    if batch_size % replicas:
        raise error(f"batch size {batch_size} is not divisible by the {replicas} replicas")
    per_replica = batch_size // replicas
    extra = (-max(1, math.ceil(num_records / per_replica))) % replicas

    def fn(_input_context=None):
        d = make_dataset(per_replica)
        if extra:
            zeros = d.take(1).map(lambda b: {k: tf.zeros_like(v) for k, v in b.items()})
            d = d.concatenate(zeros.repeat(extra))
        return d
    return fn


def collect_outputs(strategy, dataset_fn, step_fn):
    """Runs `step_fn(features) -> {name: tensor [batch, ...]}` on every replica over the
    distributed dataset; returns {name: numpy array} with the batches concatenated in
    replica order (file order when every worker reads the whole file)."""
    dataset = strategy.distribute_datasets_from_function(dataset_fn)
    step = tf.function(step_fn)
    parts = {}
    for features in dataset:
        out = strategy.run(step, args=(features,))
        for name, value in out.items():
            parts.setdefault(name, []).extend(
                v.numpy() for v in strategy.experimental_local_results(value))
    if not parts:
        raise FineTuningError("the evaluation data produced no batch")
    return {name: np.concatenate(values, axis=0) for name, values in parts.items()}


# --------------------------------------------------------------------------------------
# Initialization from --init_checkpoint and the weights predictions use
# --------------------------------------------------------------------------------------
def init_from_checkpoint(model, path, head: str, head_patterns: Sequence[str],
                         error=FineTuningError):
    """Fills `model` from --init_checkpoint; returns a one-line description.

    Accepts an original-format checkpoint (pretraining: `cls/*` ignored, fresh head;
    or fine-tuned: head restored), one of our object-based checkpoints (`ckpt-N` of
    run_pretraining.py or a fine-tuning run: encoder restored, head where present),
    or a release folder (albert_config.json + model.ckpt-best). `head`: the head's
    attribute; `head_patterns`: regexes of its original names, which may be missing. Raises `error` when
    the checkpoint cannot fill the encoder (nothing loaded).
    """
    from albert_tf import release

    try:
        if release.is_release_folder(path):
            prefix = release.release_files(path).checkpoint
        else:
            prefix = checkpoints.resolve_checkpoint_path(path)
    except FileNotFoundError as err:
        raise error(f"--init_checkpoint={path}: {err}") from None
    object_based = checkpoints.is_object_based(prefix)
    try:
        report = checkpoints.init_from_checkpoint(model, prefix, allow_missing=list(head_patterns))
    except checkpoints.CheckpointMismatchError as err:
        lines = str(err).splitlines()
        detail = "\n".join(lines[:12] + ([f"  ... ({len(lines) - 12} more lines)"]
                                         if len(lines) > 12 else []))
        raise error(f"--init_checkpoint={path}: nothing loaded; the checkpoint "
                    f"cannot fill this model:\n{detail}") from None
    if not report.loaded:
        raise error(f"--init_checkpoint={path}: no variable matched")
    fresh = f"; fresh {head} head" if report.missing_allowed else ""
    kind = "object checkpoint" if object_based else "original-format checkpoint"
    return f"loaded {len(report.loaded)} variables from {kind} {prefix}{fresh}"


def final_weights(model, output_dir, init_checkpoint, head, error=FineTuningError):
    """Loads the weights predict/export use: output_dir's model.ckpt-best, else its latest
    ckpt-<step>, else the --init_checkpoint weights already loaded. Returns their path."""
    best = os.path.join(output_dir, BEST_PREFIX)
    if tf.io.gfile.exists(best + ".index"):
        try:
            checkpoints.load_original_checkpoint(model, best)
        except checkpoints.CheckpointMismatchError as err:
            raise error(f"{best}: {err}") from None
        return best
    trained = object_checkpoints(output_dir)
    if trained:
        restore_trained(model, trained[-1][1], head, error)
        return trained[-1][1]
    if init_checkpoint:
        return init_checkpoint
    raise error(f"nothing to predict with: no {BEST_PREFIX} or ckpt-<step> in "
                f"{output_dir} and no --init_checkpoint")


__all__ = ["FineTuningError", "RunOptions", "resolve_model_files", "start_run", "initialize", "make_trainer", "CheckpointSelector",
           "replica_eval_dataset_fn", "collect_outputs", "train_and_select", "init_from_checkpoint", "final_weights",
           "object_checkpoints", "restore_trained", "read_best", "evaluated_steps",
           "append_eval_results", "BEST_PREFIX", "BEST_FILE", "EVAL_RESULTS"]
