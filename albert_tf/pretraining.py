"""The pretraining task: loss function, evaluation, and the demo data set-up.

Glue between the model (AlbertPretrainer), the losses, the input pipeline and
the training loop; run_pretraining.py only parses flags and calls this.
"""

from __future__ import annotations

import logging
import os
import pathlib
import tempfile

import tensorflow as tf

from albert_tf import losses

_logger = logging.getLogger(__name__)

REPO_DATA_DIR = pathlib.Path(__file__).resolve().parents[1] / "data"
DEMO_DIR = REPO_DATA_DIR / "demo"
METRIC_NAMES = ("masked_lm_loss", "sentence_order_loss")


def pretraining_loss_fn(model, features, training):
    """loss_fn for albert_tf.training.Trainer: MLM + SOP on one replica's batch."""
    outputs = model(features, training=training)
    return losses.pretraining_loss(outputs, features)


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
    previous = ""
    if tf.io.gfile.exists(path):
        with tf.io.gfile.GFile(path) as f:
            previous = f.read()
    lines = [f"global_step = {global_step}"] + [
        f"{k} = {metrics[k]}" for k in sorted(metrics)]
    text = previous + "\n".join(lines) + "\n"
    tmp = path + ".tmp"
    with tf.io.gfile.GFile(tmp, "w") as f:
        f.write(text)
    tf.io.gfile.rename(tmp, path, overwrite=True)
    return path


def write_eval_summaries(output_dir, metrics, global_step):
    writer = tf.summary.create_file_writer(os.path.join(output_dir, "eval"))
    with writer.as_default(step=global_step):
        for k, v in metrics.items():
            tf.summary.scalar(k, v)
    writer.flush()


def ensure_demo_data(folder, max_seq_length, max_predictions_per_seq, dupe_factor,
                     random_seed=12345):
    """Builds the demo TFRecords (train + eval) from data/demo if missing.

    The last corpus part is held out for evaluation. Returns
    (train_pattern, eval_pattern, spm_model_file).
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
        if os.path.exists(output):
            continue
        _logger.info("building demo %s data %s", split, output)
        config = pi.MaskingConfig(max_seq_length=max_seq_length,
                                  max_predictions_per_seq=max_predictions_per_seq)
        cpd.create_pretraining_data(
            inputs, output, config, spm_model_file=str(spm_model), do_lower_case=True,
            dupe_factor=dupe_factor if split == "train" else 1,
            random_seed=random_seed + (split == "eval"))
    return outputs["train"][1], outputs["eval"][1], str(spm_model)
