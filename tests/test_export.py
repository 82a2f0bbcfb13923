"""SavedModel export round trip: load in a fresh process, same predictions as Python."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.classifier import AlbertClassifier
from albert_tf.data.classifier_data import InputExample, convert_examples_to_features, get_processor
from albert_tf.export import ClassifierServing, export_classifier
from albert_tf.tokenization import FullTokenizer

from classifier_fixtures import DEMO_SPM, tiny_config

SEQ = 32
PAIRS = [
    ("The cat sat on the mat.", "A cat was sitting on a mat!"),
    ("Ünïcode   SPACES and CAPS", ""),
    ("a very long sentence " * 10, "with a second one " * 6),
]

_CHILD = r"""
import json, sys
import numpy as np
import tensorflow as tf
import tensorflow_text  # registers the SentencePiece ops
loaded = tf.saved_model.load(sys.argv[1])
ids = np.load(sys.argv[2])
sig = loaded.signatures["serving_default"]
by_ids = sig(**{k: tf.constant(ids[k]) for k in ("input_ids", "input_mask", "segment_ids")})
pairs = json.loads(sys.argv[3])
by_text = loaded.signatures["serve_text"](text_a=tf.constant([a for a, _ in pairs]),
                                          text_b=tf.constant([b for _, b in pairs]))
np.savez(sys.argv[4], ids_prob=by_ids["probabilities"].numpy(),
         ids_pred=by_ids["predictions"].numpy(), threshold=by_ids["threshold"].numpy(),
         text_prob=by_text["probabilities"].numpy(), text_pred=by_text["predictions"].numpy(),
         signatures=np.array(sorted(loaded.signatures)))
"""


def _python_features(pairs, digit_comma="python3"):
    processor = get_processor("mrpc")
    tokenizer = FullTokenizer(spm_model_file=DEMO_SPM, do_lower_case=True, digit_comma=digit_comma)
    examples = [
        InputExample(
            str(i), processor.process_text(a), processor.process_text(b) if b else None, "0"
        )
        for i, (a, b) in enumerate(pairs)
    ]
    feats = convert_examples_to_features(examples, processor.get_labels(), SEQ, tokenizer)
    return {
        k: np.array([getattr(f, k) for f in feats], np.int32)
        for k in ("input_ids", "input_mask", "segment_ids")
    }


def _saved_ops(export_dir):
    """Op types in a SavedModel's graph and functions, and its XLA-compiled functions."""
    from tensorflow.core.protobuf import saved_model_pb2

    saved = saved_model_pb2.SavedModel()
    with open(os.path.join(export_dir, "saved_model.pb"), "rb") as f:
        saved.ParseFromString(f.read())
    graph = saved.meta_graphs[0].graph_def
    op_types = {n.op for n in graph.node}
    op_types |= {n.op for fn in graph.library.function for n in fn.node_def}
    xla = [fn.signature.name for fn in graph.library.function if fn.attr["_XlaMustCompile"].b]
    return op_types, xla


def test_export_round_trip_in_fresh_process(tmp_path):
    model = AlbertClassifier(tiny_config(), 2)
    model.build()
    features = _python_features(PAIRS)
    want = model(features, training=False)
    export_dir = export_classifier(
        model,
        str(tmp_path / "export"),
        SEQ,
        spm_model_file=DEMO_SPM,
        text_pair=True,
        label_list=["0", "1"],
        task_name="mrpc",
        threshold=0.5,
    )
    assert (tmp_path / "export" / "assets.extra" / "labels.txt").read_text() == "0\n1\n"
    # Portable serving graph: no oneDNN-only kernels, no XLA clusters.
    op_types, xla = _saved_ops(export_dir)
    assert "_MklLayerNorm" not in op_types and "MatMul" in op_types
    assert xla == []
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".tmp")]
    np.savez(tmp_path / "ids.npz", **features)
    result = tmp_path / "result.npz"
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            _CHILD,
            export_dir,
            str(tmp_path / "ids.npz"),
            json.dumps(PAIRS),
            str(result),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = np.load(result)
    assert list(got["signatures"]) == ["serve_text", "serving_default"]
    np.testing.assert_allclose(got["ids_prob"], want["probabilities"].numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got["ids_pred"], want["predictions"].numpy())
    np.testing.assert_allclose(
        got["text_prob"], want["probabilities"].numpy(), rtol=1e-5, atol=1e-6
    )
    np.testing.assert_array_equal(got["text_pred"], want["predictions"].numpy())
    np.testing.assert_allclose(got["threshold"], [0.5] * len(PAIRS))


def test_text_features_match_python_single_sentence():
    model = AlbertClassifier(tiny_config(), 2)
    model.build()
    module = ClassifierServing(model, SEQ, DEMO_SPM, text_pair=False)
    sigs = module.signatures()
    assert [s.name for s in sigs["serve_text"].structured_input_signature[0]] == ["text_a"]
    texts = [a for a, _ in PAIRS]
    got = module.text_features(tf.constant(texts))
    want = _python_features([(t, "") for t in texts])
    for k in want:
        np.testing.assert_array_equal(got[k].numpy(), want[k], err_msg=k)


@pytest.mark.parametrize("digit_comma", ["python3", "intended"])
def test_serve_text_tokenizes_with_the_training_digit_comma_mode(digit_comma):
    model = AlbertClassifier(tiny_config(), 2)
    model.build()
    module = ClassifierServing(model, SEQ, DEMO_SPM, text_pair=False, digit_comma=digit_comma)
    texts = ["In 1990, sales were 3,500, not 2,000, units.", "Prices rose 4,5,6, then fell."]
    got = module.text_features(tf.constant(texts))
    want = _python_features([(t, "") for t in texts], digit_comma)
    np.testing.assert_array_equal(got["input_ids"].numpy(), want["input_ids"])
    other = _python_features(
        [(t, "") for t in texts], "intended" if digit_comma == "python3" else "python3"
    )
    assert (other["input_ids"] != want["input_ids"]).any(axis=1).all()
