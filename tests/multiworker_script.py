"""Worker process for test_training: trains the tiny pretraining model under a strategy,
once per loss normalization, and saves what the tests compare.

usage: multiworker_script.py OUTPUT_DIR RESULT_NPZ [STRATEGY]
STRATEGY: default, mirrored2 (MirroredStrategy over two logical CPUs) or multi_worker
(TF_CONFIG set by worker_fixtures.run_cluster). Each run: global batch 8, STEPS steps,
ITERATIONS steps per loop, a checkpoint every SAVE_EVERY steps. RESULT_NPZ holds, per
normalization N: N/w<i> (the weights), N/progress (the steps of the progress lines),
N/summaries (the steps of the "loss" summaries, chief only), N/checkpoints (the
ckpt-<step> steps) and N/loss (the summaries' values).
"""

import logging
import os
import re
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

from albert_tf.model import losses
from albert_tf.run import training  # noqa: E402
from albert_tf.run.distribute import get_strategy, is_chief  # noqa: E402
from albert_tf.run.output_folder import OutputFolder  # noqa: E402
from albert_tf.tasks import pretraining

from training_fixtures import build, dataset_fn, loss_summaries  # noqa: E402
from worker_fixtures import strategy_named  # noqa: E402

STEPS, ITERATIONS, SAVE_EVERY = 8, 3, 4
NORMALIZERS = {"global_batch": losses.pretraining_loss_normalizers, "per_replica": None}


class ProgressSteps(logging.Handler):
    """Collects the step of every progress line ("step N/M | ...")."""

    def __init__(self):
        super().__init__()
        self.steps = []

    def emit(self, record):
        match = re.match(r"step (\d+)/", record.getMessage())
        if match:
            self.steps.append(int(match.group(1)))


def train(strategy, output_dir, normalizers):
    model, opt = build(strategy)
    config = training.LoopConfig(
        num_train_steps=STEPS,
        global_batch_size=8,
        iterations_per_loop=ITERATIONS,
        save_checkpoints_steps=SAVE_EVERY,
        # The original's norm off TPU, low enough to clip: the token-type gradient's rows
        # of every replica count, as those of one device holding the global batch.
        clip_norm=0.05,
        clip_norm_over_lookup_rows=True,
    )
    trainer = training.Trainer(
        strategy,
        model,
        opt,
        pretraining.pretraining_loss_fn,
        pretraining.METRIC_NAMES,
        output_dir,
        config,
        is_chief(strategy),
        loss_normalizers=normalizers,
    )
    progress = ProgressSteps()
    logging.getLogger("albert_tf.run.training").addHandler(progress)
    logging.getLogger("albert_tf.run.training").setLevel(logging.INFO)
    try:
        trainer.train(dataset_fn(8))
    finally:
        logging.getLogger("albert_tf.run.training").removeHandler(progress)
    summaries = loss_summaries(output_dir)
    return {
        **{f"w{i}": v.numpy() for i, v in enumerate(model.weights)},
        "progress": np.array(progress.steps),
        "summaries": np.array([step for step, _ in summaries]),
        "loss": np.array([value for _, value in summaries]),
        "checkpoints": np.array(
            [step for step, _ in OutputFolder(output_dir).contents().resume_points()]
        ),
    }


def main(output_dir, result_file, strategy_name="default"):
    if strategy_name == "multi_worker":
        strategy = get_strategy(strategy_name)
    else:
        strategy = strategy_named(strategy_name)
    result = {}
    for name, normalizers in NORMALIZERS.items():
        for key, value in train(strategy, os.path.join(output_dir, name), normalizers).items():
            result[f"{name}/{key}"] = value
    np.savez(result_file, **result)


if __name__ == "__main__":
    main(*sys.argv[1:])
