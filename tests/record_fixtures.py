"""TFRecord files of the data builders: the demo corpus's pretraining records, and checks
on the bytes the builders write."""

import pathlib

import tensorflow as tf

DEMO_CORPUS = str(
    pathlib.Path(__file__).resolve().parents[1] / "data" / "demo" / "corpus" / "part-00000.txt"
)


def write_demo_pretraining_records(path, spm_model_file):
    """Writes the pretraining records of DEMO_CORPUS to `path`: max_seq_length 32, 5
    predictions, one copy, one worker."""
    from albert_tf.data import create_pretraining_data as cpd
    from albert_tf.data import pretraining_instances as pi

    cpd.create_pretraining_data(
        DEMO_CORPUS,
        str(path),
        pi.MaskingConfig(max_seq_length=32, max_predictions_per_seq=5),
        spm_model_file=spm_model_file,
        dupe_factor=1,
        num_workers=1,
    )


def assert_records_sorted_by_feature_name(path):
    """Every record of `path` is a tf.train.Example written with its features sorted by
    name (deterministic serialization: the same bytes in every process), and there is
    at least one."""
    records = [r.numpy() for r in tf.data.TFRecordDataset(path)]
    assert records
    for record in records:
        example = tf.train.Example.FromString(record)
        assert record == example.SerializeToString(deterministic=True)
