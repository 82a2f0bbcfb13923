"""Tests of albert_tf.data.example_serialization: the bytes tf.train.Example and
tf.io.TFRecordWriter would write."""

import random
import subprocess
import sys

import numpy as np
import pytest

from albert_tf.data import example_serialization as es
from albert_tf.data import pretraining_instances as pi

from instance_fixtures import synthetic_corpus


def test_serialization_parses_with_tensorflow():
    tf = pytest.importorskip("tensorflow")
    inst = pi.Instance(
        np.array([2, 300, 40000, 3, 2**22, 3], np.int32),
        np.array([0, 0, 0, 0, 1, 1], np.int32),
        np.array([1, 1, 0, 1, 1, 1], np.int32),
        np.array([1, 4], np.int32),
        np.array([300, 2**22], np.int32),
        1,
    )
    ex = tf.train.Example.FromString(es.serialize_example(inst, 8, 3))
    f = ex.features.feature
    assert list(f["input_ids"].int64_list.value) == [2, 300, 40000, 3, 2**22, 3, 0, 0]
    assert list(f["input_mask"].int64_list.value) == [1] * 6 + [0, 0]
    assert list(f["segment_ids"].int64_list.value) == [0, 0, 0, 0, 1, 1, 0, 0]
    assert list(f["token_boundary"].int64_list.value) == [1, 1, 0, 1, 1, 1, 0, 0]
    assert list(f["masked_lm_positions"].int64_list.value) == [1, 4, 0]
    assert list(f["masked_lm_ids"].int64_list.value) == [300, 2**22, 0]
    assert list(f["masked_lm_weights"].float_list.value) == [1.0, 1.0, 0.0]
    assert list(f["next_sentence_labels"].int64_list.value) == [1]
    ex2 = tf.train.Example.FromString(es.serialize_example(inst, 8, 3, with_masks=False))
    assert "masked_lm_ids" not in ex2.features.feature


def test_tfrecord_framing_equals_tf_writer(tmp_path):
    """serialize_batch(tfrecord=True) writes what tf.io.TFRecordWriter writes (length, CRC-32C)."""
    tf = pytest.importorskip("tensorflow")
    for cfg in (
        pi.MaskingConfig(max_seq_length=64, max_predictions_per_seq=10),
        pi.MaskingConfig(max_seq_length=200, do_masking=False),
    ):
        corpus, vocab = synthetic_corpus(120)
        b = pi.InstanceBuilder(cfg, vocab, random.Random(5), np.random.default_rng(5))
        S, P, masked = cfg.max_seq_length, cfg.max_predictions_per_seq, cfg.do_masking
        for batch in b.iter_batches(corpus, b.document_order(corpus), 2, batch_size=100):
            raw, offs = es.serialize_batch(batch, S, P, with_masks=masked)
            framed, _ = es.serialize_batch(batch, S, P, with_masks=masked, tfrecord=True)
            path = str(tmp_path / "ref.tfrecord")
            with tf.io.TFRecordWriter(path) as w:
                for k, inst in enumerate(batch.instances()):
                    rec = raw[offs[k] : offs[k + 1]].tobytes()
                    assert rec == es.serialize_example(inst, S, P, with_masks=masked)
                    w.write(rec)
            with open(path, "rb") as f:
                assert f.read() == framed.tobytes()


def test_example_bytes_are_the_same_in_another_process():
    # A protobuf map's entries come out in an order that changes between processes.
    code = (
        "from tensorflow.core.example import example_pb2\n"
        "from albert_tf.data.example_serialization import example_bytes\n"
        "ex = example_pb2.Example()\n"
        "for i, name in enumerate(['input_ids', 'input_mask', 'segment_ids', 'label_ids',"
        " 'is_real_example', 'p_mask']):\n"
        "    ex.features.feature[name].int64_list.value.extend([i, 2 * i])\n"
        "print(example_bytes(ex).hex())\n"
    )
    runs = [
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        for _ in range(2)
    ]
    first, second = (bytes.fromhex(r.stdout.strip()) for r in runs)
    assert first == second and len(first) > 60
