"""Worker process for test_training: trains 3 steps, saves the weights."""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

from albert_tf import pretraining, training  # noqa: E402
from albert_tf.distribute import get_strategy, is_chief  # noqa: E402

from training_fixtures import build, dataset_fn  # noqa: E402


def main(output_dir, weights_file, strategy_name="default"):
    strategy = get_strategy(strategy_name)
    model, opt = build(strategy)
    config = training.LoopConfig(
        num_train_steps=3, global_batch_size=8, iterations_per_loop=3, save_checkpoints_steps=3
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
    )
    trainer.train(dataset_fn(8))
    np.savez(weights_file, **{f"w{i}": v.numpy() for i, v in enumerate(model.weights)})


if __name__ == "__main__":
    main(*sys.argv[1:])
