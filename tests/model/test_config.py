"""AlbertConfig: JSON round trip, original defaults, presets, validation."""

import json

import pytest

from albert_tf import AlbertConfig
from albert_tf.errors import UserError
from albert_tf.model.config import PRESETS, REQUIRED_FIELDS, preset

ORIGINAL_FIELDS = [
    "vocab_size",
    "embedding_size",
    "hidden_size",
    "num_hidden_layers",
    "num_hidden_groups",
    "num_attention_heads",
    "intermediate_size",
    "inner_group_num",
    "down_scale_factor",
    "hidden_act",
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
    "max_position_embeddings",
    "type_vocab_size",
    "initializer_range",
]

# A released-style file (albert_base v2 layout, with the unused extra keys).
RELEASED_BASE_V2 = {
    "attention_probs_dropout_prob": 0,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0,
    "embedding_size": 128,
    "hidden_size": 768,
    "initializer_range": 0.02,
    "intermediate_size": 3072,
    "max_position_embeddings": 512,
    "num_attention_heads": 12,
    "num_hidden_layers": 12,
    "num_hidden_groups": 1,
    "net_structure_type": 0,
    "gap_size": 0,
    "num_memory_blocks": 0,
    "inner_group_num": 1,
    "down_scale_factor": 1,
    "type_vocab_size": 2,
    "vocab_size": 30000,
}


def test_fields_are_exactly_the_original_ones():
    assert AlbertConfig.field_names() == ORIGINAL_FIELDS


def test_json_round_trip_keeps_unknown_keys(tmp_path):
    path = tmp_path / "albert_config.json"
    path.write_text(json.dumps(RELEASED_BASE_V2))
    cfg = AlbertConfig.from_json_file(path)
    assert cfg.hidden_size == 768 and cfg.extra == {
        "net_structure_type": 0,
        "gap_size": 0,
        "num_memory_blocks": 0,
    }
    out = tmp_path / "written.json"
    cfg.to_json_file(out)
    assert json.loads(out.read_text()) == RELEASED_BASE_V2
    text = out.read_text()
    assert text.startswith('{\n  "attention_probs_dropout_prob"')  # sorted, 2-space indent
    assert AlbertConfig.from_json_file(out) == cfg
    assert [p.name for p in tmp_path.iterdir()].count("written.json") == 1
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".albert_config")]


def test_cross_layer_sharing_key(tmp_path):
    """Beyond the original's fields: written only when not "all", validated."""
    cfg = AlbertConfig.from_dict(RELEASED_BASE_V2)
    assert cfg.cross_layer_sharing == "all"
    shared = cfg.replace(num_hidden_groups=12, cross_layer_sharing="ffn")
    assert shared.cross_layer_sharing == "ffn" and cfg.cross_layer_sharing == "all"
    path = tmp_path / "c.json"
    shared.to_json_file(path)
    assert json.loads(path.read_text())["cross_layer_sharing"] == "ffn"
    assert AlbertConfig.from_json_file(path) == shared
    assert "cross_layer_sharing" not in shared.replace(cross_layer_sharing="all").to_dict()
    with pytest.raises(UserError, match="^cross_layer_sharing: expected one of all, attention"):
        cfg.replace(cross_layer_sharing="embeddings")
    path.write_text(json.dumps({**RELEASED_BASE_V2, "cross_layer_sharing": "both"}))
    with pytest.raises(UserError, match=r"c\.json: cross_layer_sharing: expected"):
        AlbertConfig.from_json_file(path)


def test_missing_field_is_an_error_naming_file_and_fields(tmp_path):
    """The original silently used the xxlarge shape (H = 4096, V = 30000) for a missing field."""
    values = dict(RELEASED_BASE_V2)
    del values["hidden_size"], values["vocab_size"]
    path = tmp_path / "c.json"
    path.write_text(json.dumps(values))
    with pytest.raises(UserError, match=rf"^{path}: missing fields vocab_size, hidden_size \("):
        AlbertConfig.from_json_file(path)
    for name in REQUIRED_FIELDS:
        with pytest.raises(UserError, match=rf"^c: missing field {name} \("):
            AlbertConfig.from_dict({k: v for k, v in RELEASED_BASE_V2.items() if k != name}, "c")


def test_only_the_unread_down_scale_factor_may_be_absent():
    assert REQUIRED_FIELDS == tuple(f for f in ORIGINAL_FIELDS if f != "down_scale_factor")
    values = {k: v for k, v in RELEASED_BASE_V2.items() if k != "down_scale_factor"}
    assert AlbertConfig.from_dict(values).down_scale_factor == 1


@pytest.mark.parametrize(
    "field,value,expected",
    [
        ("hidden_size", "768", "a positive integer, got '768'"),
        ("hidden_size", 768.0, "a positive integer, got 768.0"),
        ("num_hidden_layers", True, "a positive integer, got True"),
        ("vocab_size", 0, "a positive integer, got 0"),
        ("down_scale_factor", None, "a positive integer, got None"),
        ("hidden_dropout_prob", "0.1", r"a number in \[0, 1\), got '0.1'"),
        ("attention_probs_dropout_prob", 1.0, r"a number in \[0, 1\), got 1.0"),
        ("hidden_dropout_prob", False, r"a number in \[0, 1\), got False"),
        ("initializer_range", -1, "a number > 0, got -1"),
        ("initializer_range", 0, "a number > 0, got 0"),
        ("initializer_range", float("nan"), "a number > 0, got nan"),
        ("hidden_act", None, "one of gelu, relu, tanh, linear, got None"),
        ("hidden_act", "swish", "one of gelu, relu, tanh, linear, got 'swish'"),
        ("num_hidden_groups", 13, r"at most num_hidden_layers \(12\), got 13"),
        (
            "num_attention_heads",
            7,
            r"hidden_size: expected a multiple of num_attention_heads \(7\), got 768",
        ),
    ],
)
def test_bad_field_is_a_user_error_naming_file_and_field(tmp_path, field, value, expected):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({**RELEASED_BASE_V2, field: value}))
    prefix = "" if expected.startswith("hidden_size:") else f"{field}: expected "
    with pytest.raises(UserError, match=f"^{path}: {prefix}{expected}$"):
        AlbertConfig.from_json_file(path)


def test_released_activation_spellings_are_accepted():
    for act in ("gelu", "relu", "tanh", "linear", "", "GELU"):
        assert AlbertConfig.from_dict({**RELEASED_BASE_V2, "hidden_act": act}).hidden_act == act


def test_errors_name_the_file_and_field(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"vocab_size": 10,\n "hidden_size": }')
    with pytest.raises(UserError, match=r"bad.json: not valid JSON \(line 2"):
        AlbertConfig.from_json_file(bad)
    with pytest.raises(UserError, match="cannot read ALBERT config"):
        AlbertConfig.from_json_file(tmp_path / "missing.json")
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(UserError, match="cannot read ALBERT config .*binary.json"):
        AlbertConfig.from_json_file(binary)
    with pytest.raises(UserError, match="^hidden_size: expected a multiple"):
        AlbertConfig(hidden_size=10, num_attention_heads=3)
    with pytest.raises(UserError, match="^hidden_act"):
        AlbertConfig(hidden_act="swish")
    with pytest.raises(UserError, match="^num_hidden_layers"):
        AlbertConfig(num_hidden_layers=0)
    notobj = tmp_path / "list.json"
    notobj.write_text("[1, 2]")
    with pytest.raises(UserError, match="list.json: expected a JSON object"):
        AlbertConfig.from_json_file(notobj)
    # Still a ValueError for callers that catch that.
    assert issubclass(UserError, ValueError)


@pytest.mark.parametrize(
    "size,layers,hidden,heads,ffn",
    [
        ("base", 12, 768, 12, 3072),
        ("large", 24, 1024, 16, 4096),
        ("xlarge", 24, 2048, 16, 8192),
        ("xxlarge", 12, 4096, 64, 16384),
    ],
)
def test_released_presets(size, layers, hidden, heads, ffn):
    for version in ("v1", "v2"):
        cfg = preset(f"albert_{size}_{version}")
        assert (
            cfg.num_hidden_layers,
            cfg.hidden_size,
            cfg.num_attention_heads,
            cfg.intermediate_size,
        ) == (layers, hidden, heads, ffn)
        assert (cfg.vocab_size, cfg.embedding_size, cfg.num_hidden_groups, cfg.inner_group_num) == (
            30000,
            128,
            1,
            1,
        )
        expected_dropout = 0.1 if version == "v1" and size != "xxlarge" else 0.0
        assert cfg.hidden_dropout_prob == cfg.attention_probs_dropout_prob == expected_dropout
    assert preset(size) == preset(f"albert_{size}_v2")


def test_bert_presets_have_no_sharing():
    cfg = preset("bert_large")
    assert cfg.embedding_size == cfg.hidden_size == 1024
    assert cfg.num_hidden_groups == cfg.num_hidden_layers == 24
    assert cfg.used_groups() == list(range(24))
    with pytest.raises(ValueError, match="unknown preset"):
        preset("huge")
    assert len(PRESETS) == 11


def test_group_index_is_the_original_float_rule():
    cfg = AlbertConfig(num_hidden_layers=12, num_hidden_groups=4)
    assert [cfg.group_index(l) for l in range(12)] == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    quirky = AlbertConfig(num_hidden_layers=22, num_hidden_groups=22)
    assert [quirky.group_index(l) for l in range(22)] == [int(l / 22 * 22) for l in range(22)]
    assert quirky.group_index(15) == 14
