"""Worker process for test_classifier: GLUE eval (`predict_arrays`) under a strategy.

    python multiworker_eval_script.py EVAL_TFRECORD OUT_NPZ STRATEGY NUM_EXAMPLES

STRATEGY: default, mirrored2 (MirroredStrategy over two logical CPU devices) or
multi_worker (TF_CONFIG from the environment). The model's weights come from a
fixed seed, so every process evaluates the same model; the arrays land in OUT_NPZ.
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

from albert_tf.run.distribute import get_strategy  # noqa: E402
from albert_tf.tasks import classifier  # noqa: E402

from classifier_fixtures import glue_config  # noqa: E402
from worker_fixtures import strategy_named  # noqa: E402

SEQ = 16
BATCH = 4


def main(eval_file, out_file, strategy_name, num_examples):
    strategy = (
        strategy_named(strategy_name)
        if strategy_name == "mirrored2"
        else get_strategy(strategy_name)
    )
    with strategy.scope():
        model = classifier.AlbertClassifier(glue_config(), 3)
        model.build()
    rng = np.random.default_rng(0)
    for variable in model.weights:
        variable.assign(rng.normal(0.0, 0.1, variable.shape).astype(np.float32))
    replicas = strategy.num_replicas_in_sync
    arrays = classifier.predict_arrays(
        strategy,
        model,
        classifier.eval_dataset_fn(eval_file, SEQ, BATCH, int(num_examples), False, replicas),
    )
    np.savez(out_file, replicas=replicas, **arrays)


if __name__ == "__main__":
    main(*sys.argv[1:])
