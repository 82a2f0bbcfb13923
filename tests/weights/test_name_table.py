"""The one mechanism of every weight-name table (albert_tf/weights/name_table.py): lookups
both ways, the filled rows in the original's order, the layouts, and a round trip
original -> other -> original over every name of a tiny model for each of the five tables."""

import numpy as np
import pytest
from config_fixtures import tiny_config

from albert_tf.model.modeling import AlbertModel, AlbertPretrainer
from albert_tf.research import smoothness
from albert_tf.tasks.classifier import AlbertClassifier
from albert_tf.tasks.squad import AlbertSquadV1, AlbertSquadV2
from albert_tf.weights import checkpoints, hub, huggingface, keras_hub
from albert_tf.weights.name_table import (
    HEADS_BIAS,
    HEADS_IN,
    HEADS_OUT,
    SAME,
    TRANSPOSED,
    NameTable,
    original_shape,
    to_foreign,
    to_original,
)

from model_fixtures import CONFIGS

_TOY = NameTable(
    [
        ("emb", "e.weight"),
        ("g{g}/b{i}/k", "layers.{g}.{i}.k", TRANSPOSED),
        ("g{g}/b{i}/v", "layers.{g}.{i}.v"),
        ("pool", "p.weight"),
        ("head/g{g}", "h.{g}"),
    ]
)


def test_lookups_go_both_ways_with_the_group_and_block_filled_in():
    assert _TOY.foreign("g3/b1/k") == ("layers.3.1.k", TRANSPOSED)
    assert _TOY.original("layers.3.1.k") == ("g3/b1/k", TRANSPOSED)
    assert _TOY.foreign("emb") == ("e.weight", SAME)
    assert _TOY.original("p.weight") == ("pool", SAME)
    assert _TOY.foreign("g3/b1/q") is None
    assert _TOY.original("layers.x.1.k") is None
    assert _TOY.foreign("xemb") is None and _TOY.foreign("emb/") is None


def test_filled_rows_repeat_each_run_of_block_rows_block_by_block():
    assert [o for o, _, _ in _TOY.filled([(0, 0), (0, 1), (2, 0)])] == [
        "emb",
        "g0/b0/k",
        "g0/b0/v",
        "g0/b1/k",
        "g0/b1/v",
        "g2/b0/k",
        "g2/b0/v",
        "pool",
        "head/g0",
        "head/g0",
        "head/g2",
    ]
    assert _TOY.filled([(1, 0)])[1] == ("g1/b0/k", "layers.1.0.k", TRANSPOSED)


def test_layouts_against_the_original_layout_by_index():
    n, d, h = 2, 3, 6
    kernel = np.arange(h * h, dtype=np.float32).reshape(h, h)
    bias = np.arange(h, dtype=np.float32)
    heads_in, heads_out = to_foreign(kernel, HEADS_IN, n), to_foreign(kernel, HEADS_OUT, n)
    heads_bias = to_foreign(bias, HEADS_BIAS, n)
    for c in range(h):  # column (or row) c of the original is head c // D, entry c % D
        np.testing.assert_array_equal(heads_in[:, c // d, c % d], kernel[:, c])
        np.testing.assert_array_equal(heads_out[c // d, c % d, :], kernel[c, :])
        assert heads_bias[c // d, c % d] == bias[c]
    np.testing.assert_array_equal(to_foreign(kernel, TRANSPOSED), kernel.T)
    np.testing.assert_array_equal(to_foreign(kernel, SAME), kernel)
    for value, how in (
        (kernel, HEADS_IN),
        (kernel, HEADS_OUT),
        (bias, HEADS_BIAS),
        (kernel[:4], TRANSPOSED),
        (kernel, SAME),
    ):
        stored = to_foreign(value, how, n)
        assert original_shape(stored.shape, how) == value.shape
        np.testing.assert_array_equal(to_original(stored, how), value)


def test_renaming_a_set_of_tensors_names_what_no_row_has():
    values = {"g0/b0/k": np.ones([2, 3]), "emb": np.zeros([4]), "other": np.ones([1])}
    foreign, unknown = _TOY.to_foreign(values)
    assert unknown == ["other"]
    assert {k: v.shape for k, v in foreign.items()} == {"layers.0.0.k": (3, 2), "e.weight": (4,)}
    assert all(v.dtype == np.float32 for v in foreign.values())
    back, unknown = _TOY.to_original({**foreign, "x": np.ones([1])})
    assert unknown == ["x"]
    assert {k: v.shape for k, v in back.items()} == {"g0/b0/k": (2, 3), "emb": (4,)}


def _round_trip(table, names):
    """Each original name -> its other name -> the original name again."""
    others = []
    for name in names:
        found = table.foreign(name)
        assert found is not None, name
        assert table.original(found[0]) == (name, found[1])
        others.append(found[0])
    assert len(set(others)) == len(others)  # no two names share one other name
    return others


def _built(model):
    model.build()
    return model


# --- our model's variables (checkpoints.py) ----------------------------------------------
@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_checkpoint_table_round_trips_every_variable_of_the_model(config):
    models = [
        _built(AlbertPretrainer(CONFIGS[config])),
        _built(AlbertClassifier(CONFIGS[config], 3)),
        _built(AlbertSquadV1(CONFIGS[config])),
        _built(AlbertSquadV2(CONFIGS[config])),
    ]
    for model in models:
        encoder = checkpoints.encoder_of(model)
        variables = checkpoints.original_variable_map(model)
        scopes = {
            scope: getattr(model, attribute)
            for attribute, scope in checkpoints.HEAD_SCOPES.items()
            if getattr(model, attribute, None) is not None
        }
        encoder_names = [n for n in variables if n.startswith("bert/")]
        for name, path in zip(encoder_names, _round_trip(checkpoints.ENCODER_NAMES, encoder_names)):
            assert checkpoints.variable_at(encoder, path) is variables[name]
        for scope, head in scopes.items():
            table = checkpoints.head_names(head)
            names = [n for n in variables if not n.startswith("bert/")]
            names = [n[len(scope) + 1 :] if scope else n for n in names if n.startswith(scope)]
            for name, path in zip(names, _round_trip(table, names)):
                full = f"{scope}/{name}" if scope else name
                assert checkpoints.variable_at(head, path) is variables[full]
        assert len({id(v) for v in variables.values()}) == len(model.weights)


def test_checkpoint_table_lists_the_encoder_in_the_original_order():
    encoder = _built(AlbertModel(tiny_config(num_hidden_groups=2, inner_group_num=2)))
    filled = checkpoints.ENCODER_NAMES.filled([(0, 0), (0, 1), (1, 0), (1, 1)])
    assert [o for o, _, _ in filled] == list(checkpoints.original_variable_map(encoder))
    assert filled[7] == (
        "bert/encoder/transformer/group_0/inner_group_0/attention_1/self/query/kernel",
        "group_0_inner_group_0.query.kernel",
        SAME,
    )


def test_a_part_a_block_borrows_and_a_missing_projection_have_no_variable():
    encoder = _built(AlbertModel(CONFIGS["shared_ffn_E_eq_H"]))
    assert checkpoints.variable_at(encoder, "embedding_projection.kernel") is None
    assert checkpoints.variable_at(encoder, "group_1_inner_group_0.ffn_output.kernel") is None
    owner = checkpoints.variable_at(encoder, "group_0_inner_group_0.ffn_output.kernel")
    assert owner is encoder.group_1_inner_group_0.ffn_output.kernel
    assert checkpoints.variable_at(encoder, "group_1_inner_group_0.query.kernel") is not None


# --- the foreign formats -----------------------------------------------------------------
def _names(model):
    return list(checkpoints.original_variable_map(_built(model)))


def test_huggingface_table_round_trips_every_name_of_the_models_it_holds():
    config = tiny_config()
    names = _names(AlbertPretrainer(config))
    names += [n for n in _names(AlbertClassifier(config, 2)) if not n.startswith("bert/")]
    names += [n for n in _names(AlbertSquadV1(config)) if not n.startswith("bert/")]
    others = _round_trip(huggingface.NAMES, names)
    assert others[
        names.index(
            "bert/encoder/transformer/group_0/inner_group_0/ffn_1/intermediate/output/dense/kernel"
        )
    ] == ("albert.encoder.albert_layer_groups.0.albert_layers.0.ffn_output.weight")
    assert huggingface.NAMES.foreign("bert/pooler/dense/kernel")[1] == TRANSPOSED


def test_keras_hub_table_round_trips_every_encoder_name():
    names = _names(AlbertModel(tiny_config(num_hidden_groups=2, inner_group_num=2)))
    others = _round_trip(keras_hub.NAMES, names)
    assert "group_1_inner_layer_1/_self_attention_layer/query_dense/0" in others
    assert keras_hub.NAMES.foreign(names[-1]) == ("pooled_dense/1", SAME)


def test_model_garden_table_round_trips_every_name_of_its_encoder_and_head():
    names = _names(AlbertPretrainer(tiny_config()))
    names = [n for n in names if not n.startswith("cls/seq_relationship/")]
    _round_trip(hub.MODEL_GARDEN_NAMES, names)
    kernel = "bert/encoder/transformer/group_0/inner_group_0/attention_1/output/dense/kernel"
    for older in ("self_attention/attention_output", "self_attention_output"):
        assert hub.MODEL_GARDEN_NAMES.original(f"transformer/{older}/kernel") == (kernel, HEADS_OUT)


def test_bert_table_round_trips_every_name_of_a_not_shared_encoder():
    names = _names(AlbertModel(CONFIGS["bert_shaped_E_eq_H_tanh"]))
    others = _round_trip(smoothness.BERT_NAMES, names)
    assert others[
        names.index("bert/encoder/transformer/group_2/inner_group_0/LayerNorm_1/gamma")
    ] == ("bert/encoder/layer_2/output/LayerNorm/gamma")
    assert smoothness.bert_variable_name(names[0]) == "bert/embeddings/word_embeddings"
    assert (
        smoothness.bert_variable_name(
            "bert/encoder/transformer/group_0/inner_group_1/LayerNorm/beta"
        )
        is None
    )
