"""Worker process for test_squad / test_race: prediction under a strategy.

    python replica_predict_script.py TASK STRATEGY OUT_NPZ

TASK: squad_v1, squad_v2 or race (features from the demo data, written next to OUT_NPZ).
STRATEGY: default or mirrored2 (MirroredStrategy over two logical CPU devices). The model's
weights come from a fixed seed, so every process predicts with the same model; the outputs
land in OUT_NPZ (SQuAD: one row per feature, keyed by unique_id; RACE: one per question).
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

from albert_tf.data import race_data, squad_data, tokenization  # noqa: E402
from albert_tf.tasks import classifier, race, squad  # noqa: E402

from classifier_fixtures import DEMO_SPM, glue_config  # noqa: E402
from worker_fixtures import strategy_named  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEQ = 64
BATCH = 6  # global: 3 per replica on two


def squad_outputs(strategy, version_2, path):
    tokenizer = tokenization.FullTokenizer(spm_model_file=DEMO_SPM)
    name = "dev-v2.0.json" if version_2 else "dev-v1.1.json"
    examples = squad_data.read_squad_examples(
        os.path.join(REPO, "data", "demo", "squad", name), False
    )[:7]
    features = squad_data.write_features(
        squad_data.convert_examples_to_features(examples, tokenizer, SEQ, 24, 16, False),
        path,
        False,
    )
    with strategy.scope():
        model = (
            squad.AlbertSquadV2(glue_config()) if version_2 else squad.AlbertSquadV1(glue_config())
        )
        model.build()
    seed_weights(model)
    results = squad.predict_outputs(
        strategy,
        model,
        squad.eval_dataset_fn(path, SEQ, BATCH, len(features), strategy.num_replicas_in_sync),
    )
    ids = sorted(results)
    names = sorted(results[ids[0]])
    return {
        "unique_ids": np.array(ids),
        "feature_ids": np.array([f.unique_id for f in features]),
        **{n: np.stack([results[i][n] for i in ids]) for n in names},
    }


def race_outputs(strategy, path):
    tokenizer = tokenization.FullTokenizer(spm_model_file=DEMO_SPM)
    examples = race_data.read_race_examples(os.path.join(REPO, "data", "demo"), "dev")[:7]
    count = race_data.write_features(examples, tokenizer, SEQ, 16, path)
    with strategy.scope():
        model = race.AlbertRace(glue_config())
        model.build()
    seed_weights(model)
    return classifier.predict_arrays(
        strategy,
        model,
        classifier.eval_dataset_fn(
            path, race_data.record_length(SEQ), BATCH, count, False, strategy.num_replicas_in_sync
        ),
    )


def seed_weights(model):
    rng = np.random.default_rng(0)
    for variable in model.weights:
        variable.assign(rng.normal(0.0, 0.1, variable.shape).astype(np.float32))


def main(task, strategy_name, out_file):
    strategy = strategy_named(strategy_name)
    path = out_file + ".tf_record"
    if task == "race":
        arrays = race_outputs(strategy, path)
    else:
        arrays = squad_outputs(strategy, task == "squad_v2", path)
    np.savez(out_file, replicas=strategy.num_replicas_in_sync, **arrays)


if __name__ == "__main__":
    main(*sys.argv[1:])
