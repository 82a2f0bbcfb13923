"""How much each layer changes the hidden states: the paper's Figure 1.

For every layer application l of an encoder (L x I of them, the entries of
`encoder_outputs`), over the real (not padding) tokens of held-out text:

    L2 distance        ||y - x||_2
    cosine similarity  <x, y> / (||x|| ||y||), and its angle arccos(.) in degrees

where x [H] is the token's hidden state entering layer l (for layer 0: the embedding
after the E -> H projection) and y [H] the state leaving it. Each number is a mean over
all real tokens of all sequences (every token weighs the same); the angle is the mean of
the tokens' angles (the paper's right panel shows the angle, in degrees).

The held-out text (default: the demo corpus part that pretraining holds out) is cut into
single-segment sequences `[CLS] tokens [SEP]` of the model's own vocabulary, so one text
serves any model: ours, a released ALBERT folder, or a Google BERT checkpoint (its
`bert/encoder/layer_<l>/...` names map onto a not-shared, E = H encoder by the name table
`BERT_NAMES`, albert_tf/weights/name_table.py's mechanism).
"""

from __future__ import annotations

import itertools
import json
import logging
import os

import numpy as np

from albert_tf import fileio
from albert_tf.errors import UserError
from albert_tf.weights.name_table import BLOCK, NameTable

_logger = logging.getLogger(__name__)

BERT_CONFIG_NAME = "bert_config.json"
BERT_VOCAB_NAME = "vocab.txt"
# (our original-format name, Google BERT's) of a not-shared, E = H encoder: group l's one
# block is BERT's layer l; embeddings and pooler have the same names.
_OUR_BLOCK = BLOCK.replace("{i}", "0")
_BERT_LAYER = "bert/encoder/layer_{g}/"
BERT_NAMES = NameTable(
    [
        *[
            (f"bert/embeddings/{name}", f"bert/embeddings/{name}")
            for name in (
                "word_embeddings",
                "token_type_embeddings",
                "position_embeddings",
                "LayerNorm/beta",
                "LayerNorm/gamma",
            )
        ],
        *[
            (f"{_OUR_BLOCK}{ours}/{kind}", f"{_BERT_LAYER}{theirs}/{kind}")
            for ours, theirs, kinds in (
                ("attention_1/self/query", "attention/self/query", ("kernel", "bias")),
                ("attention_1/self/key", "attention/self/key", ("kernel", "bias")),
                ("attention_1/self/value", "attention/self/value", ("kernel", "bias")),
                ("attention_1/output/dense", "attention/output/dense", ("kernel", "bias")),
                ("LayerNorm", "attention/output/LayerNorm", ("beta", "gamma")),
                ("ffn_1/intermediate/dense", "intermediate/dense", ("kernel", "bias")),
                ("ffn_1/intermediate/output/dense", "output/dense", ("kernel", "bias")),
                ("LayerNorm_1", "output/LayerNorm", ("beta", "gamma")),
            )
            for kind in kinds
        ],
        ("bert/pooler/dense/kernel", "bert/pooler/dense/kernel"),
        ("bert/pooler/dense/bias", "bert/pooler/dense/bias"),
    ]
)


# --------------------------------------------------------------------------------------
# The measure
# --------------------------------------------------------------------------------------
def transition_sums(states: list[np.ndarray], mask: np.ndarray) -> dict[str, np.ndarray]:
    """Sums over the real tokens of one batch.

    states: L + 1 arrays [B, S, H] (the input of layer 0, then each layer's output);
    mask: [B, S], 1 for real tokens. Returns {"l2_distance", "cosine_similarity",
    "angle_degrees": [L] sums, "tokens": count}.
    """
    real = np.asarray(mask).astype(bool)
    sums = {"l2_distance": [], "cosine_similarity": [], "angle_degrees": []}
    for before, after in itertools.pairwise(states):
        x = np.asarray(before, np.float64)[real]  # [T, H]
        y = np.asarray(after, np.float64)[real]
        cosine = np.sum(x * y, -1) / (np.linalg.norm(x, axis=-1) * np.linalg.norm(y, axis=-1))
        sums["l2_distance"].append(np.linalg.norm(y - x, axis=-1).sum())
        sums["cosine_similarity"].append(cosine.sum())
        sums["angle_degrees"].append(np.degrees(np.arccos(np.clip(cosine, -1.0, 1.0))).sum())
    out = {k: np.array(v) for k, v in sums.items()}
    out["tokens"] = int(real.sum())
    return out


def layer_states(encoder, features) -> list[np.ndarray]:
    """[input of layer 0 (embeddings after the E -> H projection), output of each of the
    L x I layer applications], each [B, S, H] float32, of an AlbertModel."""
    import tensorflow as tf

    outputs = encoder(features, training=False)
    first = outputs["embedding_output"]
    if encoder.embedding_projection is not None:
        first = encoder.embedding_projection(first)
    return [tf.cast(t, tf.float32).numpy() for t in [first, *outputs["encoder_outputs"]]]


def measure(encoder, sequences: dict[str, np.ndarray], batch_size: int = 32) -> dict:
    """Per-layer means over the real tokens of `sequences` (input_ids, input_mask,
    segment_ids: int32 [N, S]). Returns {"l2_distance", "cosine_similarity",
    "angle_degrees": lists of L x I floats, "tokens": int}."""
    total = None
    for start in range(0, len(sequences["input_ids"]), batch_size):
        batch = {k: v[start : start + batch_size] for k, v in sequences.items()}
        sums = transition_sums(layer_states(encoder, batch), batch["input_mask"])
        total = sums if total is None else {k: total[k] + sums[k] for k in total}
    if total is None or total["tokens"] == 0:
        raise UserError("the held-out text gave no tokens to measure the layers on")
    return {
        **{
            k: [float(v) / total["tokens"] for v in total[k]]
            for k in ("l2_distance", "cosine_similarity", "angle_degrees")
        },
        "tokens": total["tokens"],
    }


# --------------------------------------------------------------------------------------
# Held-out text
# --------------------------------------------------------------------------------------
def text_sequences(
    path, tokenizer, max_seq_length: int = 128, max_sequences: int = 256
) -> dict[str, np.ndarray]:
    """The first `max_sequences` sequences of a text file in the pretraining input format
    (one sentence per line, a blank line between documents): each document's tokens are
    cut into chunks of max_seq_length - 2, each chunk becomes `[CLS] chunk [SEP]` (one
    segment), padded. Returns int32 [N, max_seq_length] input_ids, input_mask,
    segment_ids."""
    if max_seq_length < 3:
        raise UserError(
            f"max_seq_length={max_seq_length}: expected at least 3 ([CLS], a token, [SEP])"
        )
    text = fileio.read_text(path) if fileio.isfile(path) else None
    if text is None:
        raise UserError(f"{path}: no such held-out text file")
    special = tokenizer.special_ids()
    documents, current = [], []
    for line in text.splitlines() + [""]:
        if line.strip():
            current.extend(tokenizer.encode(line))
        elif current:
            documents.append(current)
            current = []
    width = max_seq_length - 2
    ids, masks = [], []
    for tokens in documents:
        for start in range(0, len(tokens), width):
            chunk = [special["cls"], *tokens[start : start + width], special["sep"]]
            padding = max_seq_length - len(chunk)
            ids.append(chunk + [special["pad"]] * padding)
            masks.append([1] * len(chunk) + [0] * padding)
            if len(ids) == max_sequences:
                break
        if len(ids) == max_sequences:
            break
    if not ids:
        raise UserError(f"{path}: no text to measure the layers on")
    ids = np.array(ids, np.int32)
    return {
        "input_ids": ids,
        "input_mask": np.array(masks, np.int32),
        "segment_ids": np.zeros_like(ids),
    }


# --------------------------------------------------------------------------------------
# Models given by path: ours, a released ALBERT folder, a Google BERT checkpoint
# --------------------------------------------------------------------------------------
def bert_variable_name(name: str) -> str | None:
    """The Google BERT checkpoint name of one of our original-format names of a
    not-shared, E = H encoder (`bert/encoder/transformer/group_<l>/inner_group_0/...` ->
    `bert/encoder/layer_<l>/...`; embeddings and pooler keep their names), by
    `BERT_NAMES`; None for a name BERT has no counterpart of."""
    found = BERT_NAMES.foreign(name)
    return found and found[0]


def _load_bert_checkpoint(encoder, prefix) -> None:
    """Fills a not-shared, E = H AlbertModel from a Google BERT checkpoint, by name."""
    import tensorflow as tf

    from albert_tf.weights import checkpoints

    reader = tf.train.load_checkpoint(prefix)
    shapes = reader.get_variable_to_shape_map()
    plan, problems = [], []
    for name, variable in checkpoints.original_variable_map(encoder).items():
        theirs = bert_variable_name(name)
        if theirs not in shapes:
            problems.append(f"{theirs or name} missing")
        elif tuple(shapes[theirs]) != tuple(variable.shape):
            problems.append(f"{theirs}: checkpoint {shapes[theirs]}, model {list(variable.shape)}")
        else:
            plan.append((theirs, variable))
    if problems:
        raise UserError(
            f"{prefix}: does not fit its {BERT_CONFIG_NAME}: "
            + "; ".join(problems[:5])
            + (f" (and {len(problems) - 5} more)" if len(problems) > 5 else "")
        )
    for theirs, variable in plan:
        variable.assign(reader.get_tensor(theirs).astype(variable.dtype))


def _config(config_file):
    """An AlbertConfig from an albert_config.json, or from a bert_config.json (no
    embedding_size: E = H, one group per layer)."""
    from albert_tf.model.config import AlbertConfig

    try:
        values = json.loads(fileio.read_text(config_file))
    except (OSError, json.JSONDecodeError) as err:
        raise UserError(f"{config_file}: cannot read the model config: {err}") from None
    if "embedding_size" not in values:  # a BERT config
        values = {
            **values,
            "embedding_size": values.get("hidden_size"),
            "num_hidden_groups": values.get("num_hidden_layers"),
            "inner_group_num": 1,
        }
    try:
        return AlbertConfig.from_dict(values, source=config_file)
    except ValueError as err:
        raise UserError(str(err)) from None


def _tokenizer(folder, config, demo_spm_model):
    """The folder's tokenizer (its SentencePiece *.model, else vocab.txt); else the demo's
    SentencePiece model when its size equals the config's vocab_size."""
    from albert_tf.data import tokenization

    models = fileio.glob(os.path.join(folder, "*.model"))
    preferred = [m for m in models if os.path.basename(m) == "30k-clean.model"]
    if preferred or len(models) == 1:
        return tokenization.FullTokenizer(spm_model_file=(preferred or models)[0])
    vocab = os.path.join(folder, BERT_VOCAB_NAME)
    if fileio.isfile(vocab):
        return tokenization.FullTokenizer(vocab_file=vocab)
    demo = tokenization.FullTokenizer(spm_model_file=demo_spm_model)
    if demo.vocab_size == config.vocab_size:
        return demo
    raise UserError(
        f"{folder}: no tokenizer (a SentencePiece *.model or {BERT_VOCAB_NAME}) "
        f"for its vocabulary of {config.vocab_size}"
    )


def load_model(path, demo_spm_model):
    """(AlbertModel filled from the checkpoint, FullTokenizer) of `path`: a folder holding
    albert_config.json or bert_config.json and a checkpoint (a release, a
    run_pretraining.py output, a Google BERT download), or a checkpoint prefix in such a
    folder."""
    from albert_tf.model.modeling import AlbertModel
    from albert_tf.weights import checkpoints, release

    path = os.fspath(path)
    folder = path if fileio.isdir(path) else os.path.dirname(path) or "."
    config_file = next(
        (
            os.path.join(folder, name)
            for name in (release.CONFIG_NAME, BERT_CONFIG_NAME)
            if fileio.isfile(os.path.join(folder, name))
        ),
        None,
    )
    if config_file is None:
        raise UserError(f"{path}: no {release.CONFIG_NAME} or {BERT_CONFIG_NAME} in {folder}")
    config = _config(config_file)
    try:
        if fileio.isdir(path) and os.path.basename(config_file) == release.CONFIG_NAME:
            prefix = release.release_files(folder).checkpoint
        else:
            prefix = checkpoints.resolve_checkpoint_path(path)
    except FileNotFoundError as err:
        raise UserError(f"{path}: {err}") from None
    encoder = AlbertModel(config)
    encoder.build()
    if any(
        n.startswith("bert/encoder/layer_") for n in checkpoints.checkpoint_variable_shapes(prefix)
    ):
        _load_bert_checkpoint(encoder, prefix)
    else:
        try:
            checkpoints.init_from_checkpoint(encoder, prefix)
        except checkpoints.CheckpointMismatchError as err:
            lines = [line.strip() for line in str(err).splitlines()]
            raise UserError(
                f"{config_file} does not fit the checkpoint: " + "; ".join(lines[1:6])
            ) from None
    _logger.info(
        "%s: %d layers, H = %d, E = %d, from %s",
        path,
        config.num_hidden_layers,
        config.hidden_size,
        config.embedding_size,
        prefix,
    )
    return encoder, _tokenizer(folder, config, demo_spm_model)


def parse_model_flags(entries) -> list[tuple[str, str]]:
    """`label=path` entries of --smoothness_checkpoints -> [(label, path)]; each path
    must exist (a folder, or the files of a checkpoint prefix)."""
    import tensorflow as tf

    out = []
    for entry in entries:
        label, sep, path = entry.partition("=")
        if not sep or not label.strip() or not path.strip():
            raise UserError(f"--smoothness_checkpoints: expected label=path, got {entry!r}")
        path = path.strip()
        if not (tf.io.gfile.exists(path) or tf.io.gfile.glob(path + ".*")):
            raise UserError(
                f"--smoothness_checkpoints={entry}: {path} does not exist; expected a release "
                "folder, an output folder or a checkpoint prefix"
            )
        out.append((label.strip(), path))
    labels = [label for label, _ in out]
    if len(set(labels)) != len(labels):
        raise UserError(f"--smoothness_checkpoints: labels must differ, got {labels}")
    return out


__all__ = [
    "transition_sums",
    "layer_states",
    "measure",
    "text_sequences",
    "bert_variable_name",
    "load_model",
    "parse_model_flags",
]
