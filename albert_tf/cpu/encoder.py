"""The encoder's stack of blocks on the CPU speed paths, and the check that the model is
the plain code they replace.

`run_encoder` is what the switch (albert_tf.cpu.speed_paths) runs in place of
`AlbertModel.run_blocks`: the blocks applied layer by layer with their pieces replaced
(albert_tf.cpu.block, albert_tf.cpu.shared_kernels). It replaces code, so it runs only
where `plain_code_changes(model)` finds the model to be exactly the plain code the speed
paths were checked against (tests/cpu/test_block.py): the plain block, dense and
layer-norm classes with their own methods, the functions and constants of
albert_tf/model/layers.py they use, and AlbertModel's way of stacking blocks. An edit of
any of them (in the file or at run time), a subclass, or a method set on one object makes
the plain model run, with one log line naming what differs.

PLAIN_CODE holds a short hash of the source of each of them as checked. When the plain
code changes on purpose, check the speed paths against it (tests/cpu/) and put
the hashes `plain_code_hashes()` returns into PLAIN_CODE
(tests/cpu/test_encoder.py prints them).
"""

from __future__ import annotations

import hashlib
import inspect
import types

import keras

from albert_tf.cpu.block import apply_block
from albert_tf.cpu.paths import SpeedPaths
from albert_tf.cpu.shared_kernels import EncoderKernels
from albert_tf.model import layers, modeling

# Module-level names of albert_tf/model/layers.py that the speed paths reimplement.
_LAYERS_FUNCTIONS = ("gelu_tanh", "get_activation", "layer_norm")
_LAYERS_CONSTANTS = (
    "LAYER_NORM_EPSILON",
    "MASK_ADDER",
    "GELU_C",
    "GELU_A",
    "SUBLAYERS",
    "DENSE_SUBLAYERS",
)
_LAYERS_CLASSES = ("LayerNorm", "Dense2D", "AlbertTransformerBlock")
# AlbertModel's methods that say which block runs at which layer (run_blocks is what
# the speed paths replace).
_MODEL_METHODS = ("run_blocks", "blocks", "blocks_of")
_LAYER_NORMS = ("attention_layer_norm", "ffn_layer_norm")
_DROPOUTS = ("attention_dropout", "hidden_dropout")
_FORWARD_METHODS = frozenset({"call", "_attention"})

# The hashes of the plain code as the speed paths were checked against it.
PLAIN_CODE = {
    "layers.gelu_tanh": "3ddd814487cd0027",
    "layers.get_activation": "639053a60dce19ed",
    "layers.layer_norm": "e0272c68f9d064a0",
    "layers.LAYER_NORM_EPSILON": "20bbf3cd4b6f9a94",
    "layers.MASK_ADDER": "e3991e9ac69e1067",
    "layers.GELU_C": "57f08c777edffed9",
    "layers.GELU_A": "4c4e10fe9e14016a",
    "layers.SUBLAYERS": "fc181e3cc2492ff5",
    "layers.DENSE_SUBLAYERS": "2f72d5cb6e25a828",
    "layers.LayerNorm": "a84181e0750c978a",
    "layers.Dense2D": "47bf733033f2e543",
    "layers.AlbertTransformerBlock": "c7485e1be3e12497",
    "modeling.AlbertModel.run_blocks": "c33b04ec898476cb",
    "modeling.AlbertModel.blocks": "d3a6db3536dcd193",
    "modeling.AlbertModel.blocks_of": "dcacae636cde9c41",
}


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _source(value) -> str:
    """The source text of a function (or of what a descriptor wraps); "" where Python
    has none (made at run time), which matches no recorded hash."""
    value = getattr(value, "__func__", value)  # staticmethod, classmethod
    if isinstance(value, property):
        value = value.fget
    try:
        return inspect.getsource(value)
    except (OSError, TypeError):
        return ""


def _class_source(cls) -> str:
    """Every attribute the class defines itself, by name: functions by their source as
    they are now (a method replaced at run time shows), values by their repr."""
    parts = []
    for name, value in sorted(vars(cls).items()):
        if name in ("__dict__", "__weakref__", "__module__", "__doc__", "__qualname__"):
            continue
        func = getattr(value, "__func__", value)
        if isinstance(func, (types.FunctionType, property)):
            parts.append(f"{name}:{_source(value)}")
        elif isinstance(value, (int, float, str, tuple, frozenset, type(None))):
            parts.append(f"{name}={value!r}")
    return "\n".join(parts)


def plain_code_hashes() -> dict:
    """{name: hash} of the plain code the speed paths replace, as it is now."""
    hashes = {}
    for name in _LAYERS_FUNCTIONS:
        hashes[f"layers.{name}"] = _digest(_source(getattr(layers, name)))
    for name in _LAYERS_CONSTANTS:
        hashes[f"layers.{name}"] = _digest(repr(getattr(layers, name)))
    for name in _LAYERS_CLASSES:
        hashes[f"layers.{name}"] = _digest(_class_source(getattr(layers, name)))
    for name in _MODEL_METHODS:
        hashes[f"modeling.AlbertModel.{name}"] = _digest(
            _source(getattr(modeling.AlbertModel, name))
        )
    return hashes


def plain_code_changes(model) -> str | None:
    """None where `model` (an AlbertModel) runs exactly the plain code the speed paths
    replace; else what differs, in words."""
    changed = [
        name for name, digest in plain_code_hashes().items() if PLAIN_CODE.get(name) != digest
    ]
    if changed:
        shown = ", ".join(f"albert_tf.model.{name}" for name in changed[:3])
        more = f" and {len(changed) - 3} more" if len(changed) > 3 else ""
        return f"{shown}{more} differ from the code the CPU speed paths were checked against"
    if type(model) is not modeling.AlbertModel:
        overridden = [
            name
            for name in _MODEL_METHODS
            if getattr(type(model), name) is not getattr(modeling.AlbertModel, name)
        ]
        if overridden:
            return f"{type(model).__name__} overrides AlbertModel.{overridden[0]}"
    if set(vars(model)) & set(_MODEL_METHODS):
        return "the model has its own " + ", ".join(sorted(set(vars(model)) & set(_MODEL_METHODS)))
    for block in model.blocks():
        problem = _block_problem(block)
        if problem:
            return problem
    return None


def _block_problem(block) -> str | None:
    """What makes `block` other than the plain block with the plain sublayers, or None."""
    expected = {
        "": (block, layers.AlbertTransformerBlock),
        **{name: (getattr(block, name, None), layers.Dense2D) for name in layers.DENSE_SUBLAYERS},
        **{name: (getattr(block, name, None), layers.LayerNorm) for name in _LAYER_NORMS},
        **{name: (getattr(block, name, None), keras.layers.Dropout) for name in _DROPOUTS},
    }
    for name, (obj, cls) in expected.items():
        subject = f"block {block.name!r}" + (f": its {name}" if name else "")
        if type(obj) is not cls:
            return f"{subject} is a {type(obj).__name__}, not the plain {cls.__name__}"
        # Keras sets some methods on each object itself (build, quantize); these are the
        # forward pass the speed paths replace.
        own = sorted(_FORWARD_METHODS & set(vars(obj)))
        if own:
            return f"{subject} has its own {own[0]}"
    return None


def run_encoder(model, paths: SpeedPaths, x, attention_adder, training, output_rows):
    """What `model.run_blocks(x, attention_adder, training, output_rows)` returns
    (model an albert_tf.model.modeling.AlbertModel), computed on the speed paths `paths`."""
    config = model.config
    kernels = EncoderKernels(model.blocks(), paths, training, output_rows, config.shares_weights)

    def layers_of_stack(x, weights, last_weights, last_rows):
        outputs = []
        for layer in range(config.num_hidden_layers):
            blocks = model.blocks_of(layer)
            for block in blocks:
                last = layer == config.num_hidden_layers - 1 and block is blocks[-1]
                x = apply_block(
                    block,
                    x,
                    attention_adder,
                    (last_weights if last else weights)[block],
                    training=training,
                    query_positions=last_rows if last else None,
                )
                outputs.append(x)
        return outputs

    return kernels.run(layers_of_stack, x)


__all__ = ["PLAIN_CODE", "plain_code_hashes", "plain_code_changes", "run_encoder"]
