"""The pretraining task: loss function, evaluation, and the demo data set-up.

Glue between the model (AlbertPretrainer), the losses, the input pipeline and
the training loop; run_pretraining.py only parses flags and calls this.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import pathlib

import tensorflow as tf

from albert_tf import losses
from albert_tf.fileio import append_eval_results

_logger = logging.getLogger(__name__)

REPO_DATA_DIR = pathlib.Path(__file__).resolve().parents[1] / "data"
DEMO_DIR = REPO_DATA_DIR / "demo"
METRIC_NAMES = ("masked_lm_loss", "sentence_order_loss")


def pretraining_loss_fn(model, features, training, sentence_order_weight=1.0):
    """loss_fn for albert_tf.training.Trainer: MLM + SOP on one replica's batch
    (bind `sentence_order_weight` with functools.partial)."""
    outputs = model(features, training=training)
    return losses.pretraining_loss(outputs, features, sentence_order_weight)


def evaluate(strategy, model, dataset_fn, max_eval_steps):
    """The original's eval metrics over `max_eval_steps` batches.

    Returns masked_lm_accuracy, masked_lm_loss, sentence_order_accuracy,
    sentence_order_loss and loss (= the two losses' sum).
    """
    dataset = strategy.distribute_datasets_from_function(dataset_fn)

    @tf.function
    def eval_step(features):
        outputs = model(features, training=False)
        return losses.pretraining_metric_sums(outputs, features)

    totals = None
    for step, features in enumerate(dataset):
        if step >= max_eval_steps:
            break
        sums = strategy.run(eval_step, args=(features,))
        sums = {k: float(strategy.reduce(tf.distribute.ReduceOp.SUM, v, axis=None))
                for k, v in sums.items()}
        totals = sums if totals is None else {k: totals[k] + sums[k] for k in totals}
    if totals is None:
        raise ValueError("the evaluation data produced no batch (too few records for "
                         "--eval_batch_size?)")
    metrics = losses.finalize_pretraining_metrics(totals)
    metrics["loss"] = metrics["masked_lm_loss"] + metrics["sentence_order_loss"]
    return metrics


def write_eval_results(output_dir, metrics, global_step):
    """Appends "key = value" lines (the original's eval_results.txt) atomically."""
    path = os.path.join(output_dir, "eval_results.txt")
    append_eval_results(path, metrics, global_step)
    return path


def write_eval_summaries(output_dir, metrics, global_step):
    writer = tf.summary.create_file_writer(os.path.join(output_dir, "eval"))
    with writer.as_default(step=global_step):
        for k, v in metrics.items():
            tf.summary.scalar(k, v)
    writer.flush()


def ensure_demo_data(folder, max_seq_length, max_predictions_per_seq, dupe_factor,
                     random_seed=12345, random_next_sentence=False, splits=("train", "eval")):
    """Builds the demo TFRecords of `splits` (train, eval) from data/demo if missing.

    The last corpus part is held out for evaluation. `random_next_sentence`:
    NSP pairs (BERT's random-document negatives) instead of SOP. Returns
    (train_pattern, eval_pattern, spm_model_file); a split not asked for may not exist.
    """
    from albert_tf.data import create_pretraining_data as cpd  # only the demo needs it
    from albert_tf.data import pretraining_instances as pi

    corpus = sorted((DEMO_DIR / "corpus").glob("part-*.txt"))
    spm_model = DEMO_DIR / "spm.model"
    if len(corpus) < 2 or not spm_model.exists():
        raise FileNotFoundError(
            f"demo data not found under {DEMO_DIR}; run `python3 data/make_demo_data.py` "
            "or pass --input_file and --albert_config_file")
    os.makedirs(folder, exist_ok=True)
    outputs = {
        "train": (",".join(map(str, corpus[:-1])), os.path.join(folder, "train.tfrecord")),
        "eval": (str(corpus[-1]), os.path.join(folder, "eval.tfrecord")),
    }
    for split, (inputs, output) in outputs.items():
        if split not in splits or os.path.exists(output):
            continue
        _logger.info("building demo %s data %s", split, output)
        config = pi.MaskingConfig(max_seq_length=max_seq_length,
                                  max_predictions_per_seq=max_predictions_per_seq,
                                  random_next_sentence=random_next_sentence)
        cpd.create_pretraining_data(
            inputs, output, config, spm_model_file=str(spm_model), do_lower_case=True,
            dupe_factor=dupe_factor if split == "train" else 1,
            random_seed=random_seed + (split == "eval"))
    return outputs["train"][1], outputs["eval"][1], str(spm_model)


@dataclasses.dataclass
class PretrainingOptions:
    """Everything run_pretraining.py's flags decide (same names and defaults)."""
    output_dir: str
    albert_config_file: str | None = None
    input_file: str | None = None
    eval_file: str | None = None
    init_checkpoint: str | None = None
    max_seq_length: int = 512
    max_predictions_per_seq: int = 20
    do_train: bool = True
    do_eval: bool = False
    train_batch_size: int = 4096
    eval_batch_size: int = 64
    optimizer: str = "lamb"
    learning_rate: float = 0.00176
    poly_power: float = 1.0
    num_train_steps: int = 125000
    num_warmup_steps: int = 3125
    start_warmup_step: int = 0
    save_checkpoints_steps: int = 5000
    keep_checkpoint_max: int = 5
    iterations_per_loop: int = 1000
    max_eval_steps: int = 100
    use_tpu: bool = False
    init_from_group0: bool = False
    tpu_name: str | None = None
    tpu_zone: str | None = None
    gcp_project: str | None = None
    master: str | None = None
    masked_lm_budget: int = 0
    strategy: str = "default"
    gradient_accumulation_steps: int = 1
    use_xla: bool = False
    dtype: str = "float32"
    dynamic_masking: bool = False
    random_seed: int = 12345
    dupe_factor: int = 10
    host_allocator: str = "auto"
    sentence_order_loss_weight: float = 1.0


# The demo (no --input_file): these values replace flags not given on the command line.
DEMO_SETTINGS = dict(
    max_seq_length=128, max_predictions_per_seq=20, train_batch_size=32, eval_batch_size=32,
    learning_rate=0.005, num_train_steps=1200, num_warmup_steps=100, save_checkpoints_steps=400,
    iterations_per_loop=50, max_eval_steps=20, do_eval=True)


class UsageError(ValueError):
    """A flag combination that cannot work; the message names the flags."""


def _resolve_config_and_data(o: PretrainingOptions):
    from albert_tf.config import AlbertConfig, preset
    if o.input_file is None:  # the demo
        train_file, eval_file, spm_model = ensure_demo_data(
            os.path.join(o.output_dir, "demo_data"), o.max_seq_length,
            o.max_predictions_per_seq, o.dupe_factor, o.random_seed)
        import sentencepiece as spm
        vocab_size = spm.SentencePieceProcessor(model_file=spm_model).get_piece_size()
        config = (AlbertConfig.from_json_file(o.albert_config_file) if o.albert_config_file
                  else preset("albert_tiny", vocab_size=vocab_size))
        _logger.info("demo mode: %s -> %s", train_file, o.output_dir)
        return config, train_file, eval_file
    if not o.albert_config_file:
        raise UsageError("--albert_config_file is required with --input_file")
    return (AlbertConfig.from_json_file(o.albert_config_file), o.input_file,
            o.eval_file or o.input_file)


def run(o: PretrainingOptions):
    """Trains and/or evaluates as the options say. Returns the eval metrics
    before and after training ({} where not run)."""
    import keras

    from albert_tf import checkpoints, training
    from albert_tf.distribute import get_strategy, is_chief
    from albert_tf.host_memory import configure_host_allocator
    from albert_tf.data.input_pipeline import MaskingOptions, pretraining_dataset
    from albert_tf.modeling import AlbertPretrainer
    from albert_tf.optimization import create_optimizer

    # Before TensorFlow's first op; "auto" needs the model size (the demo data,
    # built with TensorFlow, only comes with the tiny demo model: the pool).
    if o.host_allocator != "auto":
        configure_host_allocator(o.host_allocator)
    config, train_file, eval_file = _resolve_config_and_data(o)
    if o.host_allocator == "auto":
        configure_host_allocator("auto", num_parameters=config.num_parameters())
    if o.max_seq_length > config.max_position_embeddings:
        raise UsageError(f"--max_seq_length={o.max_seq_length} exceeds the config's "
                         f"max_position_embeddings={config.max_position_embeddings}")
    keras.mixed_precision.set_global_policy(o.dtype)
    keras.utils.set_random_seed(o.random_seed)
    strategy = get_strategy(o.strategy, o.use_tpu, o.tpu_name, o.tpu_zone, o.gcp_project,
                            o.master)
    accumulation = o.gradient_accumulation_steps
    if o.train_batch_size % (strategy.num_replicas_in_sync * accumulation):
        raise UsageError(
            f"--train_batch_size={o.train_batch_size} is not divisible by replicas "
            f"({strategy.num_replicas_in_sync}) x --gradient_accumulation_steps ({accumulation})")
    chief = is_chief(strategy)
    tf.io.gfile.makedirs(o.output_dir)
    if chief:
        config.to_json_file(os.path.join(o.output_dir, "albert_config.json"))

    with strategy.scope():
        model = AlbertPretrainer(config, full_sequence_output=False)
        model.build()
        optimizer = create_optimizer(o.learning_rate, o.num_train_steps, o.num_warmup_steps,
                                     o.optimizer, o.poly_power, o.start_warmup_step)
    fresh_start = tf.train.latest_checkpoint(o.output_dir) is None
    if o.init_checkpoint and fresh_start:
        report = checkpoints.init_from_checkpoint(
            model, o.init_checkpoint, allow_missing=["^cls/"],
            init_from_group0=o.init_from_group0)
        _logger.info("initialised %d variables from %s", len(report.loaded), report.checkpoint)

    dynamic = o.dynamic_masking or o.masked_lm_budget > 0
    masking = MaskingOptions(vocab_size=config.vocab_size, mask_id=4) if dynamic else None

    def dataset_fn(pattern, global_batch, is_training):
        def fn(ctx):
            return pretraining_dataset(
                pattern, ctx.get_per_replica_batch_size(global_batch), o.max_seq_length,
                o.max_predictions_per_seq, is_training, input_context=ctx,
                seed=o.random_seed, dynamic_masking=dynamic, masking_options=masking)
        return fn

    def run_eval(step):
        metrics = evaluate(strategy, model, dataset_fn(eval_file, o.eval_batch_size, False),
                           o.max_eval_steps)
        if chief:
            write_eval_results(o.output_dir, metrics, step)
            write_eval_summaries(o.output_dir, metrics, step)
        _logger.info("eval at step %d: %s", step, json.dumps(metrics))
        return metrics

    results = {"before": {}, "after": {}, "step": 0}
    if o.do_train:
        if o.do_eval and fresh_start:  # shows what training changed
            results["before"] = run_eval(0)
        loop = training.LoopConfig(
            num_train_steps=o.num_train_steps, global_batch_size=o.train_batch_size,
            iterations_per_loop=o.iterations_per_loop,
            save_checkpoints_steps=o.save_checkpoints_steps,
            keep_checkpoint_max=o.keep_checkpoint_max,
            gradient_accumulation_steps=accumulation, jit_compile=o.use_xla)
        loss_fn = functools.partial(pretraining_loss_fn,
                                    sentence_order_weight=o.sentence_order_loss_weight)
        trainer = training.Trainer(strategy, model, optimizer, loss_fn,
                                   METRIC_NAMES, o.output_dir, loop, chief)
        trainer.train(dataset_fn(train_file, o.train_batch_size // accumulation, True))
        step = int(optimizer.iterations.numpy())
        if chief:  # the same weights in the original TF1 format
            checkpoints.save_original_checkpoint(
                model, os.path.join(o.output_dir, f"model.ckpt-{step}"), global_step=step,
                update_checkpoint_state=False)
    else:
        latest = tf.train.latest_checkpoint(o.output_dir)
        if latest is None:
            raise UsageError(f"--do_train=false needs a checkpoint in {o.output_dir}")
        tf.train.Checkpoint(model=model).restore(latest).expect_partial()
        step = int(latest.rsplit("-", 1)[1])
    results["step"] = step
    if o.do_eval:
        results["after"] = run_eval(step)
    return results
