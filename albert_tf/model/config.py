"""ALBERT configuration: the fields of the original `albert_config.json`.

`AlbertConfig` mirrors `AlbertConfig` of the original modeling.py. Its
constructor defaults are the original ones (the xxlarge shape). The original
also filled every field a JSON file omits with those defaults, so a file without
`hidden_size` silently became a 4096-wide model; here a file must set every
field the model reads (`REQUIRED_FIELDS`, which every released file does) and
only `down_scale_factor`, stored but never read, may be absent. Every field is
checked for type and range, and the relations between fields are checked too;
errors are `UserError`s naming the file and the field. Unknown keys (for example
`net_structure_type` or `layers_to_keep` in released files) are kept and
written back.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
from typing import Any

from albert_tf.errors import UserError
from albert_tf.fileio import atomic_write_text, check_input_file, parse_json, read_bytes

# Values of `hidden_act` (compared lower-cased, as the original does); "" means "linear".
ACTIVATIONS = ("gelu", "relu", "tanh", "linear", "")
# Values of the `cross_layer_sharing` key (see AlbertConfig.cross_layer_sharing).
CROSS_LAYER_SHARING = ("all", "attention", "ffn")


@dataclasses.dataclass
class AlbertConfig:
    """Hyper-parameters of an ALBERT encoder (names as in `albert_config.json`).

    Args:
      vocab_size: int. V, rows of the word-embedding table.
      embedding_size: int. E, width of the factorized embeddings.
      hidden_size: int. H, width of the Transformer blocks.
      num_hidden_layers: int. L, number of layer applications.
      num_hidden_groups: int. G, number of distinct parameter groups.
      num_attention_heads: int. N; H must be divisible by N.
      intermediate_size: int. F, feed-forward width.
      inner_group_num: int. I, blocks (each with own weights) per group.
      down_scale_factor: int. Stored, never read (as in the original).
      hidden_act: str. "gelu" (tanh approximation), "relu", "tanh", "linear".
      hidden_dropout_prob: float. Dropout after embeddings, attention output
        and FFN output.
      attention_probs_dropout_prob: float. Dropout on attention probabilities.
      max_position_embeddings: int. P, longest supported sequence.
      type_vocab_size: int. T, number of segment (token type) ids.
      initializer_range: float. Stddev of the truncated-normal initializer.
      extra: dict. Unknown JSON keys, kept verbatim and written back. One
        key beyond the original's is read from here: `cross_layer_sharing`
        (see the property of that name).
    """

    vocab_size: int = 30000
    embedding_size: int = 128
    hidden_size: int = 4096
    num_hidden_layers: int = 12
    num_hidden_groups: int = 1
    num_attention_heads: int = 64
    intermediate_size: int = 16384
    inner_group_num: int = 1
    down_scale_factor: int = 1
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.0
    attention_probs_dropout_prob: float = 0.0
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    extra: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        self.validate()

    # --- validation -------------------------------------------------------
    def validate(self) -> None:
        """Raises UserError("<field>: expected ..., got ...") for the first bad field."""
        for name in _POSITIVE_INT_FIELDS:
            value = getattr(self, name)
            # bool is an int subclass; `true` in a JSON file is a mistake, not 1.
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise UserError(f"{name}: expected a positive integer, got {value!r}")
        for name, (in_range, bounds) in _FLOAT_FIELDS.items():
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
                or not in_range(value)
            ):
                raise UserError(f"{name}: expected a number {bounds}, got {value!r}")
        # The original maps null to "no activation" and any other non-string to a
        # callable; in a JSON file either is a mistake, so only the names are accepted.
        if not isinstance(self.hidden_act, str) or self.hidden_act.lower() not in ACTIVATIONS:
            raise UserError(
                f"hidden_act: expected one of {', '.join(ACTIVATIONS[:-1])}, "
                f"got {self.hidden_act!r}"
            )
        if self.hidden_size % self.num_attention_heads:
            raise UserError(
                f"hidden_size: expected a multiple of num_attention_heads "
                f"({self.num_attention_heads}), got {self.hidden_size}"
            )
        # More groups than layers would leave groups that no layer uses (no weights).
        if self.num_hidden_groups > self.num_hidden_layers:
            raise UserError(
                f"num_hidden_groups: expected at most num_hidden_layers "
                f"({self.num_hidden_layers}), got {self.num_hidden_groups}"
            )
        sharing = self.extra.get("cross_layer_sharing", "all")
        if sharing not in CROSS_LAYER_SHARING:
            raise UserError(
                f"cross_layer_sharing: expected one of "
                f"{', '.join(CROSS_LAYER_SHARING)}, got {sharing!r}"
            )

    # --- derived ----------------------------------------------------------
    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def group_index(self, layer_index: int) -> int:
        """Group used by layer `layer_index`, with the original's float rule.

        The original evaluates int(layer_idx / num_hidden_layers *
        num_hidden_groups) in floating point; for some (L, G) this differs
        from floor(l * G / L) (e.g. L = G = 22, layer 15 -> group 14).
        """
        return int(layer_index / self.num_hidden_layers * self.num_hidden_groups)

    def used_groups(self) -> list[int]:
        """Sorted distinct group indices hit by some layer (others get no weights)."""
        return sorted({self.group_index(l) for l in range(self.num_hidden_layers)})

    @property
    def cross_layer_sharing(self) -> str:
        """What the groups share (the paper's Table 4; the original code has only "all").

        "all" (default): each group owns whole blocks, shared by the layers that
        map to it (the original). "attention": every group's attention sublayers
        (query, key, value, output dense, attention layer norm) are group 0's,
        the FFN sublayers (intermediate, output dense, FFN layer norm) are each
        group's own; "ffn": the reverse. With num_hidden_groups =
        num_hidden_layers these are the paper's shared-attention and shared-FFN
        models. Stored as the JSON key `cross_layer_sharing`, written only when
        not "all", so the original's files are unchanged.
        """
        return self.extra.get("cross_layer_sharing", "all")

    @property
    def shares_weights(self) -> bool:
        """True when some kernel is applied at more than one layer."""
        partial = self.cross_layer_sharing != "all" and len(self.used_groups()) > 1
        return partial or len(self.used_groups()) < self.num_hidden_layers

    def num_parameters(self) -> int:
        """Parameters of the encoder incl. the pooler (no pretraining heads)."""
        e, h, f = self.embedding_size, self.hidden_size, self.intermediate_size
        embeddings = (self.vocab_size + self.type_vocab_size + self.max_position_embeddings) * e
        embeddings += 2 * e  # layer norm
        projection = e * h + h if e != h else 0
        sublayers = {"attention": 4 * (h * h + h) + 2 * h, "ffn": (h * f + f) + (f * h + h) + 2 * h}
        groups = len(self.used_groups())
        blocks = sum(
            (1 if part == self.cross_layer_sharing else groups) * self.inner_group_num * size
            for part, size in sublayers.items()
        )
        return embeddings + projection + blocks + h * h + h

    # --- (de)serialization ------------------------------------------------
    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls) if f.name != "extra"]

    @classmethod
    def from_dict(cls, values: dict[str, Any], source: str = "config") -> "AlbertConfig":
        """Builds a validated config from the keys of an `albert_config.json`.

        Every field in `REQUIRED_FIELDS` must be present (the original would
        silently use its xxlarge defaults); `down_scale_factor`, which nothing
        reads, may be absent and then is 1 as in the original. Raises UserError
        "<source>: <field>: ..." naming the first bad or every missing field.
        """
        if not isinstance(values, dict):
            raise UserError(f"{source}: expected a JSON object, got {type(values).__name__}")
        missing = [k for k in REQUIRED_FIELDS if k not in values]
        if missing:
            raise UserError(
                f"{source}: missing field{'s' if len(missing) > 1 else ''} "
                f"{', '.join(missing)} (an ALBERT config must set every field; the "
                f"original silently used the xxlarge shape for missing ones)"
            )
        known = cls.field_names()
        kwargs = {k: values[k] for k in known if k in values}
        extra = {k: v for k, v in values.items() if k not in known}
        try:
            return cls(**kwargs, extra=extra)
        except UserError as err:
            raise UserError(f"{source}: {err}") from None

    @classmethod
    def from_json_file(cls, path: str | os.PathLike) -> "AlbertConfig":
        """Reads and validates an `albert_config.json`; UserError names the file."""
        path = os.fspath(path)
        # A folder, a FIFO (which would block the read), a symlink loop: one line.
        check_input_file(path, f"cannot read ALBERT config {path!r}")
        try:
            text = read_bytes(path).decode("utf-8")
        except (OSError, UnicodeDecodeError) as err:
            reason = getattr(err, "strerror", None) or str(err)
            raise UserError(f"cannot read ALBERT config {path!r}: {reason}") from None
        values = parse_json(text, path)
        return cls.from_dict(values, source=path)

    def to_dict(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.field_names()}
        out.update(self.extra)
        return out

    def to_json_string(self) -> str:
        # Like the original: sorted keys, 2-space indent.
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    def to_json_file(self, path: str | os.PathLike) -> None:
        """Writes atomically (temporary file in the same folder, then rename)."""
        atomic_write_text(path, self.to_json_string())

    def replace(self, **changes) -> "AlbertConfig":
        """A copy with fields changed; also accepts `cross_layer_sharing`."""
        new = copy.deepcopy(self)
        for k, v in changes.items():
            if k == "cross_layer_sharing":
                new.extra.pop(k, None)
                if v != "all":
                    new.extra[k] = v
                continue
            if k not in self.field_names():
                raise UserError(f"AlbertConfig has no field {k!r}")
            setattr(new, k, v)
        new.validate()
        return new


# Every field but `down_scale_factor` (stored, never read) changes the model, so a
# config file must set it.
REQUIRED_FIELDS = tuple(name for name in AlbertConfig.field_names() if name != "down_scale_factor")
_POSITIVE_INT_FIELDS = (
    "vocab_size",
    "embedding_size",
    "hidden_size",
    "num_hidden_layers",
    "num_hidden_groups",
    "num_attention_heads",
    "intermediate_size",
    "inner_group_num",
    "down_scale_factor",
    "max_position_embeddings",
    "type_vocab_size",
)
# name: (range check, its description). Ints are accepted: released files write 0.
_FLOAT_FIELDS = {
    "hidden_dropout_prob": (lambda v: 0 <= v < 1, "in [0, 1)"),
    "attention_probs_dropout_prob": (lambda v: 0 <= v < 1, "in [0, 1)"),
    "initializer_range": (lambda v: v > 0, "> 0"),
}


def differing_fields(a: AlbertConfig, b: AlbertConfig, ignore=()) -> list[tuple[str, Any, Any]]:
    """(field, value in a, value in b) of every to_dict() field not in `ignore` whose
    values differ (None where one of them lacks it), by field name."""
    a, b = a.to_dict(), b.to_dict()
    return [
        (k, a.get(k), b.get(k))
        for k in sorted(set(a) | set(b))
        if k not in ignore and a.get(k) != b.get(k)
    ]


# --- presets ---------------------------------------------------------------
_ALBERT_SHAPES = {
    # name: (L, H, N, F)
    "base": (12, 768, 12, 3072),
    "large": (24, 1024, 16, 4096),
    "xlarge": (24, 2048, 16, 8192),
    "xxlarge": (12, 4096, 64, 16384),
}


def _albert_preset(size: str, version: str) -> AlbertConfig:
    layers, hidden, heads, ffn = _ALBERT_SHAPES[size]
    # v1 used dropout 0.1 except xxlarge; all v2 models trained without dropout.
    dropout = 0.1 if (version == "v1" and size != "xxlarge") else 0.0
    return AlbertConfig(
        vocab_size=30000,
        embedding_size=128,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_hidden_groups=1,
        num_attention_heads=heads,
        intermediate_size=ffn,
        inner_group_num=1,
        hidden_act="gelu",
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
        max_position_embeddings=512,
        type_vocab_size=2,
        initializer_range=0.02,
    )


def _bert_preset(size: str) -> AlbertConfig:
    layers, hidden, heads = {"base": (12, 768, 12), "large": (24, 1024, 16)}[size]
    # BERT shape in ALBERT code: E = H (no projection), one group per layer.
    return AlbertConfig(
        vocab_size=30000,
        embedding_size=hidden,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_hidden_groups=layers,
        num_attention_heads=heads,
        intermediate_size=4 * hidden,
        inner_group_num=1,
        hidden_act="gelu",
        hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.1,
        max_position_embeddings=512,
        type_vocab_size=2,
        initializer_range=0.02,
    )


def _tiny_preset() -> AlbertConfig:
    # Small enough to pretrain on a CPU in minutes (the README's demo).
    return AlbertConfig(
        vocab_size=2000,
        embedding_size=64,
        hidden_size=128,
        num_hidden_layers=4,
        num_hidden_groups=1,
        num_attention_heads=4,
        intermediate_size=512,
        inner_group_num=1,
        hidden_act="gelu",
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        max_position_embeddings=512,
        type_vocab_size=2,
        initializer_range=0.02,
    )


PRESETS = {
    **{
        f"albert_{s}_{v}": (lambda s=s, v=v: _albert_preset(s, v))
        for s in _ALBERT_SHAPES
        for v in ("v1", "v2")
    },
    "bert_base": lambda: _bert_preset("base"),
    "bert_large": lambda: _bert_preset("large"),
    "albert_tiny": _tiny_preset,
}


def preset(name: str, **overrides) -> AlbertConfig:
    """Returns a named preset, e.g. `albert_base_v2` or `bert_large`.

    Also accepts the short names `base`, `large`, `xlarge`, `xxlarge`
    (meaning the v2 configurations).
    """
    key = name if name in PRESETS else f"albert_{name}_v2"
    if key not in PRESETS:
        raise UserError(f"unknown preset {name!r}; known: {', '.join(sorted(PRESETS))}")
    config = PRESETS[key]()
    return config.replace(**overrides) if overrides else config
