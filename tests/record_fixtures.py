"""Checks on the bytes of TFRecord files the data builders write."""

import tensorflow as tf


def assert_records_sorted_by_feature_name(path):
    """Every record of `path` is a tf.train.Example written with its features sorted by
    name (deterministic serialization: the same bytes in every process), and there is
    at least one."""
    records = [r.numpy() for r in tf.data.TFRecordDataset(path)]
    assert records
    for record in records:
        example = tf.train.Example.FromString(record)
        assert record == example.SerializeToString(deterministic=True)
