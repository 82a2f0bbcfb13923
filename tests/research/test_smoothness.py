"""The Figure-1 measure: per-layer L2 distance and angle against numpy on a small model and
against known values on identity-like layers; held-out sequences; BERT and ALBERT loading."""

import json
import math

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.data import tokenization
from albert_tf.errors import UserError
from albert_tf.model.config import preset
from albert_tf.model.modeling import AlbertModel
from albert_tf.research import smoothness
from albert_tf.tasks.pretraining import DEMO_DIR
from albert_tf.weights import checkpoints

DEMO_SPM = str(DEMO_DIR / "spm.model")


def _reference(states, mask):
    """Per-layer means over real tokens, token by token with the math module."""
    layers = len(states) - 1
    sums, count = np.zeros((3, layers)), 0
    for b, s in zip(*np.nonzero(mask)):
        count += 1
        for layer in range(layers):
            x = states[layer][b, s].astype(np.float64)
            y = states[layer + 1][b, s].astype(np.float64)
            dot = sum(float(p) * float(q) for p, q in zip(x, y))
            cosine = dot / (math.sqrt(float(x @ x)) * math.sqrt(float(y @ y)))
            sums[0, layer] += math.sqrt(sum((float(q) - float(p)) ** 2 for p, q in zip(x, y)))
            sums[1, layer] += cosine
            sums[2, layer] += math.degrees(math.acos(min(1.0, cosine)))
    return sums / count, count


def _features(lengths, seq_length, vocab_size, seed=0):
    rng = np.random.default_rng(seed)
    mask = np.array([[1] * n + [0] * (seq_length - n) for n in lengths], np.int32)
    return {
        "input_ids": rng.integers(5, vocab_size, mask.shape).astype(np.int32) * mask,
        "input_mask": mask,
        "segment_ids": (rng.integers(0, 2, mask.shape) * mask).astype(np.int32),
    }


def test_measure_matches_numpy_on_a_small_model():
    # E != H (layer 0's input is the projection), I = 2 blocks per layer, padding.
    config = preset(
        "albert_tiny",
        vocab_size=40,
        embedding_size=8,
        hidden_size=16,
        num_hidden_layers=2,
        inner_group_num=2,
        num_attention_heads=2,
        intermediate_size=32,
        initializer_range=0.5,
    )
    tf.random.set_seed(3)
    encoder = AlbertModel(config)
    encoder.build()
    features = _features([7, 3, 5], 7, config.vocab_size)
    measured = smoothness.measure(encoder, features, batch_size=2)  # batches of 2 and 1

    outputs = encoder(features)
    names = checkpoints.original_variable_map(encoder)
    kernel = names["bert/encoder/embedding_hidden_mapping_in/kernel"].numpy()
    bias = names["bert/encoder/embedding_hidden_mapping_in/bias"].numpy()
    states = [
        outputs["embedding_output"].numpy() @ kernel + bias,
        *(t.numpy() for t in outputs["encoder_outputs"]),
    ]
    expected, count = _reference(states, features["input_mask"])
    assert measured["tokens"] == count == 15
    assert len(measured["l2_distance"]) == 4  # L x I layer applications
    for row, key in enumerate(("l2_distance", "cosine_similarity", "angle_degrees")):
        np.testing.assert_allclose(measured[key], expected[row], rtol=1e-5, atol=1e-6)
    # The padding is left out: counting it would change every number.
    with_padding, _ = _reference(states, np.ones_like(features["input_mask"]))
    assert not np.allclose(measured["l2_distance"], with_padding[0], rtol=1e-3)


def test_identity_like_layers_give_known_distances():
    """Zeroed attention and FFN outputs leave each layer's layer norms: a layer maps a
    normalized u (mean 0, variance 1, |u| = sqrt(H)) to c * u + beta * 1, where (c, beta)
    are its last layer norm's gamma and beta (1 is orthogonal to u). With (c, beta) =
    (1, 0), (2, 0), (2, 2) and the embeddings normalized: layer 0 is the identity, layer 1
    doubles u (distance sqrt(H), angle 0), layer 2 adds 2 * 1 (distance 2 sqrt(H), 45°)."""
    h = 16
    config = preset(
        "albert_tiny",
        vocab_size=40,
        embedding_size=h,
        hidden_size=h,
        num_hidden_layers=3,
        num_hidden_groups=3,
        num_attention_heads=2,
        intermediate_size=32,
        initializer_range=0.5,
    )
    encoder = AlbertModel(config)
    encoder.build()
    names = checkpoints.original_variable_map(encoder)
    for layer, (gamma, beta) in enumerate([(1.0, 0.0), (2.0, 0.0), (2.0, 2.0)]):
        scope = f"bert/encoder/transformer/group_{layer}/inner_group_0/"
        for dense in ("attention_1/output/dense/", "ffn_1/intermediate/output/dense/"):
            for part in ("kernel", "bias"):
                variable = names[scope + dense + part]
                variable.assign(np.zeros(variable.shape, np.float32))
        names[scope + "LayerNorm_1/gamma"].assign(np.full(h, gamma, np.float32))
        names[scope + "LayerNorm_1/beta"].assign(np.full(h, beta, np.float32))
    measured = smoothness.measure(encoder, _features([6, 2], 6, config.vocab_size))
    np.testing.assert_allclose(
        measured["l2_distance"], [0.0, math.sqrt(h), 2 * math.sqrt(h)], atol=1e-4
    )
    np.testing.assert_allclose(measured["cosine_similarity"], [1.0, 1.0, math.sqrt(0.5)], atol=1e-6)
    np.testing.assert_allclose(measured["angle_degrees"], [0.0, 0.0, 45.0], atol=0.02)
    assert measured["tokens"] == 8


def test_text_sequences(tmp_path):
    tokenizer = tokenization.FullTokenizer(spm_model_file=DEMO_SPM)
    lines = [
        "Omar decided to learn poetry.",
        "He practised for two hours.",
        "",
        "Freya had a small garden.",
        "",
        "",
    ]
    path = tmp_path / "held_out.txt"
    path.write_text("\n".join(lines) + "\n")
    special = tokenizer.special_ids()
    first = tokenizer.encode(lines[0]) + tokenizer.encode(lines[1])
    second = tokenizer.encode(lines[3])
    width = 8 - 2
    chunks = [doc[i : i + width] for doc in (first, second) for i in range(0, len(doc), width)]
    assert len(first) % width and len(chunks) > 3  # a short last chunk in each document
    sequences = smoothness.text_sequences(str(path), tokenizer, max_seq_length=8)
    assert sequences["input_ids"].shape == (len(chunks), 8)
    for ids, mask, chunk in zip(sequences["input_ids"], sequences["input_mask"], chunks):
        n = len(chunk) + 2
        assert list(ids[:n]) == [special["cls"], *chunk, special["sep"]]
        assert list(ids[n:]) == [special["pad"]] * (8 - n)
        assert list(mask) == [1] * n + [0] * (8 - n)
    assert not sequences["segment_ids"].any()
    assert sequences["input_ids"].dtype == np.int32
    cut = smoothness.text_sequences(str(path), tokenizer, max_seq_length=8, max_sequences=2)
    np.testing.assert_array_equal(cut["input_ids"], sequences["input_ids"][:2])
    with pytest.raises(UserError, match="no such held-out text file"):
        smoothness.text_sequences(str(tmp_path / "absent.txt"), tokenizer)


BERT_LAYER_0 = [  # the names of a Google BERT checkpoint (one layer)
    "bert/embeddings/word_embeddings",
    "bert/embeddings/token_type_embeddings",
    "bert/embeddings/position_embeddings",
    "bert/embeddings/LayerNorm/beta",
    "bert/embeddings/LayerNorm/gamma",
    *(
        f"bert/encoder/layer_0/{name}"
        for name in (
            "attention/self/query/kernel",
            "attention/self/query/bias",
            "attention/self/key/kernel",
            "attention/self/key/bias",
            "attention/self/value/kernel",
            "attention/self/value/bias",
            "attention/output/dense/kernel",
            "attention/output/dense/bias",
            "attention/output/LayerNorm/beta",
            "attention/output/LayerNorm/gamma",
            "intermediate/dense/kernel",
            "intermediate/dense/bias",
            "output/dense/kernel",
            "output/dense/bias",
            "output/LayerNorm/beta",
            "output/LayerNorm/gamma",
        )
    ),
    "bert/pooler/dense/kernel",
    "bert/pooler/dense/bias",
]


def test_bert_names():
    encoder = AlbertModel(
        preset("albert_tiny", embedding_size=128, num_hidden_layers=1, num_hidden_groups=1)
    )
    encoder.build()
    names = [smoothness.bert_variable_name(n) for n in checkpoints.original_variable_map(encoder)]
    assert names == BERT_LAYER_0


def _write_bert_folder(folder, reference, bert_config):
    """A Google BERT download: bert_config.json, vocab.txt, bert_model.ckpt.*."""
    folder.mkdir()
    (folder / "bert_config.json").write_text(json.dumps(bert_config))
    vocab = [
        "[PAD]",
        "[UNK]",
        "[CLS]",
        "[SEP]",
        "[MASK]",
        "the",
        "garden",
        "omar",
        "had",
        "a",
        "small",
        ".",
    ]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    variables = checkpoints.original_variable_map(reference)
    tf.raw_ops.SaveV2(
        prefix=str(folder / "bert_model.ckpt"),
        tensor_names=[smoothness.bert_variable_name(n) for n in variables],
        shape_and_slices=[""] * len(variables),
        tensors=[tf.convert_to_tensor(v) for v in variables.values()],
    )
    return len(vocab)


def test_load_a_bert_checkpoint(tmp_path):
    bert_config = {
        "vocab_size": 12,
        "hidden_size": 16,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 32,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1,
        "max_position_embeddings": 32,
        "type_vocab_size": 2,
        "initializer_range": 0.5,
    }
    reference = AlbertModel(
        preset("albert_tiny", **bert_config, embedding_size=16, num_hidden_groups=2)
    )
    reference.build()
    _write_bert_folder(tmp_path / "bert", reference, bert_config)

    encoder, tokenizer = smoothness.load_model(tmp_path / "bert", DEMO_SPM)
    config = encoder.config
    assert (config.embedding_size, config.num_hidden_groups, config.inner_group_num) == (16, 2, 1)
    assert encoder.embedding_projection is None
    assert not tokenizer.spm_mode and tokenizer.vocab_size == 12
    features = _features([9, 4], 9, 12)
    for ours, theirs in zip(
        encoder(features)["encoder_outputs"], reference(features)["encoder_outputs"]
    ):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    # The checkpoint prefix works as well as the folder.
    again, _ = smoothness.load_model(tmp_path / "bert" / "bert_model.ckpt", DEMO_SPM)
    np.testing.assert_array_equal(
        again(features)["sequence_output"].numpy(), reference(features)["sequence_output"].numpy()
    )

    # A config that does not fit the checkpoint names what differs.
    (tmp_path / "bert" / "bert_config.json").write_text(
        json.dumps({**bert_config, "intermediate_size": 48})
    )
    with pytest.raises(
        UserError,
        match=r"does not fit its bert_config.json: "
        r"bert/encoder/layer_0/intermediate/dense/kernel",
    ):
        smoothness.load_model(tmp_path / "bert", DEMO_SPM)


def test_load_errors_and_flags(tmp_path):
    with pytest.raises(UserError, match="no albert_config.json or bert_config.json"):
        smoothness.load_model(tmp_path, DEMO_SPM)
    (tmp_path / "albert_config.json").write_text(
        preset("albert_tiny", vocab_size=77).to_json_string()
    )
    with pytest.raises(UserError, match="no checkpoint"):
        smoothness.load_model(tmp_path, DEMO_SPM)
    (tmp_path / "c=d").mkdir()
    (tmp_path / "model.ckpt-7.index").write_bytes(b"")
    prefix = str(tmp_path / "model.ckpt-7")  # a checkpoint prefix: its files exist
    assert smoothness.parse_model_flags([f"ALBERT={prefix}", f"BERT = {tmp_path}/c=d"]) == [
        ("ALBERT", prefix),
        ("BERT", f"{tmp_path}/c=d"),
    ]
    with pytest.raises(UserError, match="expected label=path, got '/a/b'"):
        smoothness.parse_model_flags(["/a/b"])
    with pytest.raises(UserError, match="labels must differ"):
        smoothness.parse_model_flags([f"A={tmp_path}", f"A={prefix}"])
    with pytest.raises(UserError) as err:
        smoothness.parse_model_flags([f"X={tmp_path}/missing"])
    assert str(err.value) == (
        f"--smoothness_checkpoints=X={tmp_path}/missing: {tmp_path}/missing does not exist; "
        "expected a release folder, an output folder or a checkpoint prefix"
    )
