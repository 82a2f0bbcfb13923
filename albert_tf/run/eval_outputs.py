"""Running a model over evaluation or prediction data: every record once, in file order,
under any distribution strategy."""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

from albert_tf import interrupts
from albert_tf.errors import UserError


def replica_eval_dataset_fn(make_dataset, num_records, batch_size, replicas):
    """A dataset_fn over every record once, in file order, for `collect_outputs`.

    make_dataset(per_replica_batch) -> batches padded to full size with zero rows. Whole
    zero batches are appended so the batch count is a multiple of the replicas: every
    step feeds every replica the same static shape. Not sharded: every worker reads the
    whole (small) file, so the local results concatenate in file order.
    """
    if batch_size % replicas:
        raise UserError(f"batch size {batch_size} is not divisible by the {replicas} replicas")
    per_replica = batch_size // replicas
    extra = (-max(1, math.ceil(num_records / per_replica))) % replicas

    def fn(_input_context=None):
        dataset = make_dataset(per_replica)
        if extra:
            zeros = dataset.take(1).map(lambda b: {k: tf.zeros_like(v) for k, v in b.items()})
            dataset = dataset.concatenate(zeros.repeat(extra))
        return dataset

    return fn


def collect_outputs(strategy, dataset_fn, step_fn, jit_compile=False) -> dict:
    """Runs `step_fn(features) -> {name: tensor [batch, ...]}` on every replica over the
    distributed dataset (`jit_compile`: compiled with XLA); returns {name: numpy array}
    with the batches concatenated in replica order (file order when every worker reads
    the whole file)."""
    dataset = strategy.distribute_datasets_from_function(dataset_fn)
    step = tf.function(step_fn, jit_compile=jit_compile)
    parts = {}
    for batch, features in enumerate(dataset):
        out = strategy.run(step, args=(features,))
        for name, value in out.items():
            parts.setdefault(name, []).extend(
                v.numpy() for v in strategy.experimental_local_results(value)
            )
        if batch == 0:
            interrupts.hold_for_test("evaluation_batch")  # a test hook; see interrupts.py
    if not parts:
        raise UserError("the evaluation data produced no batch")
    return {name: np.concatenate(values, axis=0) for name, values in parts.items()}


__all__ = ["replica_eval_dataset_fn", "collect_outputs"]
