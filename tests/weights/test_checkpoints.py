"""Original-checkpoint loading and saving by the release's variable names."""

import os

import numpy as np
import pytest
import tensorflow as tf
from config_fixtures import tiny_config

from albert_tf.errors import UserError
from albert_tf.model.modeling import AlbertModel, AlbertPretrainer
from albert_tf.weights.checkpoints import (
    CheckpointMismatchError,
    check_checkpoint_readable,
    checkpoint_variable_shapes,
    init_from_checkpoint,
    load_original_checkpoint,
    original_variable_map,
    read_checkpoint_values,
    resolve_checkpoint_path,
    save_original_checkpoint,
)

import albert_numpy
from model_fixtures import assert_rel_close, make_inputs

# docs/original.md §5.2 for G = I = 1, written out literally.
RELEASED_LAYOUT_NAMES = """
bert/embeddings/word_embeddings V,E
bert/embeddings/token_type_embeddings T,E
bert/embeddings/position_embeddings P,E
bert/embeddings/LayerNorm/beta E
bert/embeddings/LayerNorm/gamma E
bert/encoder/embedding_hidden_mapping_in/kernel E,H
bert/encoder/embedding_hidden_mapping_in/bias H
bert/encoder/transformer/group_0/inner_group_0/attention_1/self/query/kernel H,H
bert/encoder/transformer/group_0/inner_group_0/attention_1/self/query/bias H
bert/encoder/transformer/group_0/inner_group_0/attention_1/self/key/kernel H,H
bert/encoder/transformer/group_0/inner_group_0/attention_1/self/key/bias H
bert/encoder/transformer/group_0/inner_group_0/attention_1/self/value/kernel H,H
bert/encoder/transformer/group_0/inner_group_0/attention_1/self/value/bias H
bert/encoder/transformer/group_0/inner_group_0/attention_1/output/dense/kernel H,H
bert/encoder/transformer/group_0/inner_group_0/attention_1/output/dense/bias H
bert/encoder/transformer/group_0/inner_group_0/LayerNorm/beta H
bert/encoder/transformer/group_0/inner_group_0/LayerNorm/gamma H
bert/encoder/transformer/group_0/inner_group_0/ffn_1/intermediate/dense/kernel H,F
bert/encoder/transformer/group_0/inner_group_0/ffn_1/intermediate/dense/bias F
bert/encoder/transformer/group_0/inner_group_0/ffn_1/intermediate/output/dense/kernel F,H
bert/encoder/transformer/group_0/inner_group_0/ffn_1/intermediate/output/dense/bias H
bert/encoder/transformer/group_0/inner_group_0/LayerNorm_1/beta H
bert/encoder/transformer/group_0/inner_group_0/LayerNorm_1/gamma H
bert/pooler/dense/kernel H,H
bert/pooler/dense/bias H
cls/predictions/transform/dense/kernel H,E
cls/predictions/transform/dense/bias E
cls/predictions/transform/LayerNorm/beta E
cls/predictions/transform/LayerNorm/gamma E
cls/predictions/output_bias V
cls/seq_relationship/output_weights 2,H
cls/seq_relationship/output_bias 2
"""


def write_tf1_checkpoint(prefix, weights, extra=None):
    """Writes `weights` the way the original did: tf.compat.v1 Saver in a graph."""
    with tf.Graph().as_default():
        variables = [tf.compat.v1.Variable(v, name=n) for n, v in weights.items()]
        for n, v in (extra or {}).items():
            variables.append(tf.compat.v1.Variable(v, name=n))
        saver = tf.compat.v1.train.Saver(variables)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            return saver.save(sess, prefix)


def read_with_tf1_graph(prefix, shapes):
    """Restores variables of the given names/shapes with a TF1 Saver (as the original would)."""
    with tf.Graph().as_default():
        variables = {n: tf.compat.v1.Variable(tf.zeros(s), name=n) for n, s in shapes.items()}
        saver = tf.compat.v1.train.Saver(list(variables.values()))
        with tf.compat.v1.Session() as sess:
            saver.restore(sess, prefix)
            return {n: sess.run(v) for n, v in variables.items()}


def test_names_and_shapes_equal_released_layout():
    cfg = tiny_config(num_hidden_layers=12)
    model = AlbertPretrainer(cfg)
    model.build()
    dims = {
        "V": cfg.vocab_size,
        "E": cfg.embedding_size,
        "H": cfg.hidden_size,
        "F": cfg.intermediate_size,
        "P": cfg.max_position_embeddings,
        "T": cfg.type_vocab_size,
        "2": 2,
    }
    expected = []
    for line in RELEASED_LAYOUT_NAMES.strip().splitlines():
        name, shape = line.split()
        expected.append((name, tuple(dims[d] for d in shape.split(","))))
    got = [(n, tuple(v.shape)) for n, v in original_variable_map(model).items()]
    assert got == expected
    assert len(got) == 32


@pytest.mark.parametrize(
    "overrides",
    [
        dict(num_hidden_groups=2, inner_group_num=2),
        dict(num_hidden_layers=4, num_hidden_groups=3, inner_group_num=3),
        dict(embedding_size=16),
        dict(num_hidden_groups=3, inner_group_num=2, cross_layer_sharing="attention"),
        dict(num_hidden_groups=3, cross_layer_sharing="ffn"),
    ],
)
def test_names_and_shapes_general_groups(overrides):
    sharing = overrides.pop("cross_layer_sharing", "all")
    cfg = tiny_config(**overrides).replace(cross_layer_sharing=sharing)
    model = AlbertPretrainer(cfg)
    model.build()
    got = {n: tuple(v.shape) for n, v in original_variable_map(model).items()}
    assert got == albert_numpy.original_shapes(cfg.to_dict())
    # Every Keras variable appears exactly once in the table.
    assert len({id(v) for v in original_variable_map(model).values()}) == len(model.weights)


@pytest.fixture
def tf1_checkpoint(tmp_path):
    cfg = tiny_config(num_hidden_groups=2, inner_group_num=2, hidden_act="relu")
    weights = albert_numpy.random_weights(cfg.to_dict(), seed=7)
    slots = {}
    for n, v in weights.items():
        slots[n + "/adam_m"] = np.full_like(v, 0.5)
        slots[n + "/adam_v"] = np.full_like(v, 0.25)
    slots["global_step"] = np.int64(1234)
    prefix = write_tf1_checkpoint(str(tmp_path / "model.ckpt-best"), weights, slots)
    return cfg, weights, prefix


def test_tf1_checkpoint_loads_and_reproduces_outputs(tf1_checkpoint):
    cfg, weights, prefix = tf1_checkpoint
    model = AlbertPretrainer(cfg)
    report = load_original_checkpoint(model, prefix)
    assert len(report.loaded) == len(weights)
    assert "global_step" in report.ignored
    assert sum(n.endswith(("/adam_m", "/adam_v")) for n in report.ignored) == 2 * len(weights)
    inputs = make_inputs(cfg)
    got = model(inputs)
    want = albert_numpy.forward_features(weights, cfg, inputs)
    for key in ("sequence_output", "pooled_output", "mlm_logits", "sop_logits"):
        assert_rel_close(got[key], want[key])


def test_encoder_only_model_ignores_heads(tf1_checkpoint):
    cfg, weights, prefix = tf1_checkpoint
    report = load_original_checkpoint(AlbertModel(cfg), prefix)
    assert "cls/seq_relationship/output_weights" in report.ignored
    assert all(n.startswith("bert/") for n in report.loaded)


def test_path_forms(tf1_checkpoint, tmp_path):
    cfg, weights, prefix = tf1_checkpoint
    folder = os.path.dirname(prefix)
    data = [p for p in os.listdir(folder) if ".data-" in p][0]
    for form in (prefix, prefix + ".index", os.path.join(folder, data), folder, prefix + ".meta"):
        assert resolve_checkpoint_path(form) == prefix
    # Directory without a `checkpoint` state file, several checkpoints: -best wins.
    os.remove(os.path.join(folder, "checkpoint"))
    write_tf1_checkpoint(str(tmp_path / "model.ckpt-100"), {"x": np.zeros(1, np.float32)})
    os.remove(os.path.join(folder, "checkpoint"))
    assert resolve_checkpoint_path(folder) == prefix
    # Without -best the highest step wins.
    other = tmp_path / "steps"
    other.mkdir()
    for step in (5, 40, 300):
        write_tf1_checkpoint(str(other / f"ckpt-{step}"), {"x": np.zeros(1, np.float32)})
    os.remove(other / "checkpoint")
    assert resolve_checkpoint_path(str(other)) == str(other / "ckpt-300")
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        resolve_checkpoint_path(str(tmp_path / "nope"))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        resolve_checkpoint_path(str(empty))


def test_truncated_or_foreign_checkpoint_files_are_user_errors(tf1_checkpoint, tmp_path):
    """Caught from the index alone: no tensor is read (xxlarge data files are GBs)."""
    cfg, weights, prefix = tf1_checkpoint
    assert check_checkpoint_readable(prefix + ".index") == prefix
    data = prefix + ".data-00000-of-00001"
    size = os.path.getsize(data)
    # The index spans several table blocks here (about 100 names): the last tensor's
    # end, read from the index, is the file's length.
    assert os.path.getsize(prefix + ".index") > 4096
    for keep in (size - 1, size // 2, 0):
        with open(data, "r+b") as f:
            f.truncate(keep)
        message = f"^{data}: truncated: {keep} bytes, expected {size} bytes$"
        with pytest.raises(UserError, match=message):
            check_checkpoint_readable(prefix)
        with pytest.raises(UserError, match=message):
            load_original_checkpoint(AlbertPretrainer(cfg), prefix)
        with pytest.raises(UserError, match=message):
            init_from_checkpoint(AlbertPretrainer(cfg), prefix)
    os.remove(data)
    with pytest.raises(UserError, match=f"^{data}: missing "):
        check_checkpoint_readable(prefix)
    text = tmp_path / "x.index"
    text.write_text("model_checkpoint_path: 'model.ckpt-1'\n")
    for form in (text, tmp_path / "x"):
        with pytest.raises(UserError, match=f"^{text}: not a readable TensorFlow checkpoint"):
            check_checkpoint_readable(form)
    (tmp_path / "x.index").write_bytes(open(prefix + ".index", "rb").read()[:-9])
    with pytest.raises(UserError, match="x.index: not a readable TensorFlow checkpoint"):
        load_original_checkpoint(AlbertModel(cfg), tmp_path / "x")


def test_readable_check_accepts_object_checkpoints(tmp_path):
    """tf.train.Checkpoint files (string tensors, several dtypes) pass; cut by 1 byte, fail."""
    variables = {
        "w": tf.Variable(tf.ones([300, 7])),
        "step": tf.Variable(tf.constant(3, tf.int64)),
        "half": tf.Variable(tf.zeros([5], tf.float16)),
    }
    prefix = tf.train.Checkpoint(**variables).write(str(tmp_path / "ckpt-1"))
    assert check_checkpoint_readable(prefix) == prefix
    data = prefix + ".data-00000-of-00001"
    size = os.path.getsize(data)
    with open(data, "r+b") as f:
        f.truncate(size - 1)
    with pytest.raises(UserError, match=f"truncated: {size - 1} bytes, expected {size} bytes"):
        check_checkpoint_readable(prefix)


def test_mismatch_lists_every_problem_and_assigns_nothing(tf1_checkpoint, tmp_path):
    cfg, weights, _ = tf1_checkpoint
    broken = dict(weights)
    del broken["bert/pooler/dense/bias"]
    del broken["cls/predictions/output_bias"]
    broken["bert/embeddings/position_embeddings"] = np.zeros((7, cfg.embedding_size), np.float32)
    prefix = write_tf1_checkpoint(str(tmp_path / "broken" / "model.ckpt"), broken)
    model = AlbertPretrainer(cfg)
    model.build()
    before = [v.numpy().copy() for v in model.weights]
    with pytest.raises(CheckpointMismatchError) as info:
        load_original_checkpoint(model, prefix)
    message = str(info.value)
    assert "bert/pooler/dense/bias" in message
    assert "cls/predictions/output_bias" in message
    assert "bert/embeddings/position_embeddings: checkpoint [7, 8], model [20, 8]" in message
    assert "2 model variable(s) not in the checkpoint" in message
    for b, v in zip(before, model.weights):
        np.testing.assert_array_equal(b, v.numpy())


def test_encoder_checkpoint_into_pretrainer_needs_allow_missing(tmp_path):
    cfg = tiny_config()
    weights = albert_numpy.random_weights(cfg.to_dict(), seed=2, heads=False)
    prefix = write_tf1_checkpoint(str(tmp_path / "enc"), weights)
    with pytest.raises(CheckpointMismatchError, match="7 model variable"):
        load_original_checkpoint(AlbertPretrainer(cfg), prefix)
    report = load_original_checkpoint(AlbertPretrainer(cfg), prefix, allow_missing=["^cls/"])
    assert len(report.missing_allowed) == 7 and len(report.loaded) == len(weights)


def test_round_trip_is_bit_identical_and_readable_by_tf1(tmp_path):
    cfg = tiny_config(num_hidden_groups=3, inner_group_num=2)
    model = AlbertPretrainer(cfg)
    model.build()
    prefix = save_original_checkpoint(model, str(tmp_path / "out" / "model.ckpt-7"), global_step=7)
    assert sorted(os.listdir(tmp_path / "out")) == [
        "checkpoint",
        "model.ckpt-7.data-00000-of-00001",
        "model.ckpt-7.index",
    ]
    assert tf.train.latest_checkpoint(str(tmp_path / "out")) == prefix
    shapes = checkpoint_variable_shapes(prefix)
    expected = albert_numpy.original_shapes(cfg.to_dict())
    assert {n: tuple(s) for n, s in shapes.items() if n != "global_step"} == expected
    values = read_checkpoint_values(prefix)
    assert values["global_step"] == 7 and values["global_step"].dtype == np.int64
    clone = AlbertPretrainer(cfg)
    load_original_checkpoint(clone, prefix)
    for a, b in zip(model.weights, clone.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    restored = read_with_tf1_graph(prefix, expected)
    for name, variable in original_variable_map(model).items():
        np.testing.assert_array_equal(restored[name], variable.numpy())


def test_init_from_group0(tmp_path):
    small = tiny_config()
    weights = albert_numpy.random_weights(small.to_dict(), seed=4)
    prefix = write_tf1_checkpoint(str(tmp_path / "g1"), weights)
    grown = AlbertPretrainer(small.replace(num_hidden_groups=3))
    with pytest.raises(CheckpointMismatchError, match="group_1"):
        load_original_checkpoint(grown, prefix)
    report = load_original_checkpoint(grown, prefix, init_from_group0=True)
    mapping = original_variable_map(grown)
    for g in (1, 2):
        name = f"bert/encoder/transformer/group_{g}/inner_group_0/attention_1/self/query/kernel"
        assert report.source[name] == name.replace(f"group_{g}", "group_0")
        np.testing.assert_array_equal(
            mapping[name].numpy(),
            weights["bert/encoder/transformer/group_0/inner_group_0/attention_1/self/query/kernel"],
        )


def test_failed_save_leaves_no_files(tmp_path, monkeypatch):
    model = AlbertModel(tiny_config())
    model.build()

    def boom(**kwargs):
        open(kwargs["prefix"] + ".index", "w").close()
        raise OSError("disk full")

    monkeypatch.setattr(tf.raw_ops, "SaveV2", boom)
    with pytest.raises(OSError):
        save_original_checkpoint(model, str(tmp_path / "m"))
    assert os.listdir(tmp_path) == []


def test_save_removes_the_temporaries_of_a_killed_writer(tmp_path):
    """A save killed inside SaveV2 leaves `.tmp-<host>-<pid>-<hex>-<name>.*`; the next save
    into the folder removes those whose process is gone (only ours, only this host)."""
    from albert_tf import fileio

    host = fileio.owner_tag().rsplit("-", 1)[0]
    hex32 = "0123456789abcdef" * 2
    dead = [
        f".tmp-{host}-999999999-{hex32}-model.ckpt-4{s}" for s in (".index", ".data-00000-of-00001")
    ]
    kept = [
        f".tmp-{host}-{os.getppid()}-{hex32}-model.ckpt-4.index",  # a running process
        f".tmp-otherhost-999999999-{hex32}-model.ckpt-4.index",  # another host's
    ]
    for name in dead + kept:
        (tmp_path / name).write_bytes(b"half")
    model = AlbertModel(tiny_config())
    model.build()
    save_original_checkpoint(model, str(tmp_path / "model.ckpt-6"))
    assert sorted(os.listdir(tmp_path)) == sorted(
        ["checkpoint", "model.ckpt-6.index", "model.ckpt-6.data-00000-of-00001", *kept]
    )


def test_optimizer_exclusions_on_paths_equal_those_on_original_names():
    """LAMB/AdamW match exclusions on Keras paths; they must agree with the
    original, which matched the same regexes on the original names."""
    import re

    from albert_tf.run.optimization import DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY, create_optimizer

    model = AlbertPretrainer(tiny_config(num_hidden_groups=2, inner_group_num=2))
    model.build()
    optimizer = create_optimizer(1e-3, 10, 0, "lamb")
    optimizer.build(model.trainable_variables)
    for name, variable in original_variable_map(model).items():
        excluded = any(re.search(p, name) for p in DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY)
        assert optimizer.use_weight_decay_for(variable) == (not excluded), (name, variable.path)
        assert optimizer.use_layer_adaptation_for(variable) == (not excluded), name


def test_optimizer_slots_round_trip_under_original_names(tmp_path):
    from albert_tf.run.optimization import create_optimizer

    cfg = tiny_config()
    model = AlbertPretrainer(cfg)
    model.build()
    optimizer = create_optimizer(1e-3, 10, 0, "lamb")
    optimizer.build(model.trainable_variables)
    for i, (variable, slots) in enumerate(optimizer.slot_variables()):
        slots["adam_m"].assign(np.full(variable.shape, 0.1 * i, np.float32))
        slots["adam_v"].assign(np.full(variable.shape, 0.01 * i, np.float32))
    prefix = save_original_checkpoint(
        model, str(tmp_path / "train" / "model.ckpt-3"), global_step=3, optimizer=optimizer
    )
    shapes = checkpoint_variable_shapes(prefix)
    assert "bert/pooler/dense/kernel/adam_m" in shapes and "global_step" in shapes
    clone = AlbertPretrainer(cfg)
    clone.build()
    clone_opt = create_optimizer(1e-3, 10, 0, "lamb")
    clone_opt.build(clone.trainable_variables)
    report = load_original_checkpoint(clone, prefix, optimizer=clone_opt)
    assert report.ignored == ["global_step"]
    for (_, a), (_, b) in zip(optimizer.slot_variables(), clone_opt.slot_variables()):
        np.testing.assert_array_equal(a["adam_m"].numpy(), b["adam_m"].numpy())
        np.testing.assert_array_equal(a["adam_v"].numpy(), b["adam_v"].numpy())
    # A checkpoint without slots cannot fill an optimizer: every slot is named.
    bare = save_original_checkpoint(model, str(tmp_path / "bare" / "model.ckpt"))
    with pytest.raises(CheckpointMismatchError, match="adam_m"):
        load_original_checkpoint(clone, bare, optimizer=clone_opt)


def test_init_from_object_checkpoint(tmp_path):
    from albert_tf.weights.checkpoints import init_from_checkpoint

    cfg = tiny_config(num_hidden_groups=2)
    encoder_only = AlbertModel(cfg)
    encoder_only.build()
    prefix = tf.train.Checkpoint(model=encoder_only).save(str(tmp_path / "ckpt"))
    # A pretrainer needs heads the checkpoint does not have: refused, naming them...
    with pytest.raises(CheckpointMismatchError, match="cls/seq_relationship/output_weights"):
        init_from_checkpoint(AlbertPretrainer(cfg), prefix)
    # ...unless they may stay fresh.
    model = AlbertPretrainer(cfg)
    report = init_from_checkpoint(model, prefix, allow_missing=["^cls/"])
    assert len(report.missing_allowed) == 7
    for name, variable in original_variable_map(encoder_only).items():
        np.testing.assert_array_equal(original_variable_map(model)[name].numpy(), variable.numpy())
