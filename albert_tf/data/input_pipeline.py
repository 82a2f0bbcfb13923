"""tf.data input pipeline for ALBERT pretraining TFRecords (spec §6.1, §6.5).

Reads files written by the original `create_pretraining_data.py` or by
`albert_tf.data.create_pretraining_data` (same schema). Imports nothing from the model.

Static masking (default) uses the masks stored in the files. `dynamic_masking=True` ignores them
(restoring the original tokens from `masked_lm_ids`) or reads `--write_unmasked` files, and draws
fresh n-gram masks in the graph for every epoch with the static builder's distribution
(`albert_tf.data.pretraining_instances`): p(n) ∝ 1/n over n = 1..ngram (reversed if not
favor_shorter_ngram), whole words from `token_boundary`, num_to_predict =
min(max_predictions_per_seq, max(1, round_half_even(len * masked_lm_prob))), greedy over a random
order of word starts with the builder's shorter-n-gram fallback and overlap skip, then 80% [MASK],
10% kept, 10% a uniformly random id of the whole vocabulary. Only pure TF ops (no py_function),
with stateless RNG keyed by (seed, element counter), so iterators can be saved with
`tf.train.Checkpoint(iterator=...)` and restored to the exact same stream when a seed is given.

`check_tfrecords` checks any TFRecord input (pretraining, GLUE/RACE, SQuAD) against the
feature spec its reader will parse, before a run starts.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import struct
from typing import Sequence

import numpy as np
import tensorflow as tf
from google.protobuf.message import DecodeError

from albert_tf.errors import UserError

_logger = logging.getLogger(__name__)

PRETRAINING_FEATURE_NAMES = (
    "input_ids",
    "input_mask",
    "segment_ids",
    "masked_lm_positions",
    "masked_lm_ids",
    "masked_lm_weights",
    "next_sentence_labels",
)


@dataclasses.dataclass(frozen=True)
class MaskingOptions:
    """Dynamic-masking parameters (vocab_size and mask_id are required for dynamic masking)."""

    vocab_size: int = 0
    mask_id: int = -1
    cls_id: int = 2
    sep_id: int = 3
    masked_lm_prob: float = 0.15
    ngram: int = 3
    favor_shorter_ngram: bool = True
    do_whole_word_mask: bool = True


def pretraining_feature_spec(
    max_seq_length: int, max_predictions_per_seq: int, dynamic_masking: bool = False
) -> dict:
    """tf.io feature spec of the pretraining TFRecords (all int64 except masked_lm_weights).

    Static: input_ids/input_mask/segment_ids [S], masked_lm_positions/ids/weights [P],
    next_sentence_labels [1]. Dynamic: adds token_boundary [S] and gives the masked features
    zero defaults so that files without static masks parse too.
    """
    S, P = max_seq_length, max_predictions_per_seq
    spec = {
        "input_ids": tf.io.FixedLenFeature([S], tf.int64),
        "input_mask": tf.io.FixedLenFeature([S], tf.int64),
        "segment_ids": tf.io.FixedLenFeature([S], tf.int64),
        "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64),
    }
    if dynamic_masking:
        spec["token_boundary"] = tf.io.FixedLenFeature([S], tf.int64)
        spec["masked_lm_positions"] = tf.io.FixedLenFeature([P], tf.int64, default_value=[0] * P)
        spec["masked_lm_ids"] = tf.io.FixedLenFeature([P], tf.int64, default_value=[0] * P)
        spec["masked_lm_weights"] = tf.io.FixedLenFeature([P], tf.float32, default_value=[0.0] * P)
    else:
        spec["masked_lm_positions"] = tf.io.FixedLenFeature([P], tf.int64)
        spec["masked_lm_ids"] = tf.io.FixedLenFeature([P], tf.int64)
        spec["masked_lm_weights"] = tf.io.FixedLenFeature([P], tf.float32)
    return spec


def _expand_patterns(input_patterns) -> list[str]:
    if isinstance(input_patterns, str):
        input_patterns = input_patterns.split(",")
    files = []
    for p in input_patterns:
        p = p.strip()
        if not p:
            continue
        matches = sorted(tf.io.gfile.glob(p))
        if not matches:
            raise UserError(f"input pattern {p!r} matches no file")
        files.extend(m for m in matches if m not in files)
    if not files:
        raise UserError("no input files given")
    return files


# tf.io dtype of a FixedLenFeature -> the tf.train.Feature list that holds it.
_FEATURE_KINDS = {tf.int64: "int64_list", tf.float32: "float_list", tf.string: "bytes_list"}
_KIND_NAMES = {"int64_list": "int64", "float_list": "float32", "bytes_list": "bytes"}


def check_tfrecords(
    input_patterns: str | Sequence[str], spec: dict, what: str, value_below: dict | None = None
) -> list[str]:
    """Checks TFRecord inputs against the spec their reader parses them with; returns the files.

    Reads only the first record of every file, so it is cheap on any corpus, and turns what
    would otherwise fail deep inside tf.data ("corrupted record at 0", "Can't parse
    serialized Example") or, for empty files, train forever on nothing, into one line
    naming the file and the feature.

    Args:
      input_patterns: comma-separated globs or a list of them (as `pretraining_dataset`).
      spec: {name: tf.io.FixedLenFeature} of the reader: `pretraining_feature_spec(...)`,
        `classifier_data.feature_spec(...)` (RACE: with `race_data.record_length(S)`) or
        `squad_data.feature_spec(...)`. A feature with a default value may be absent.
      what: how the user named the input in messages, e.g. "--input_file".
      value_below: {feature name: (bound, what the bound is)}: the first record's values of
        these features must be below the bound (token ids below the config's vocab_size).
    Raises:
      UserError: a pattern matches no file; a file is not a readable TFRecord file or its
        first record is not a tf.train.Example; a feature of the spec is absent or has
        another type or length or a value not below its bound; no file holds a record.
        Some empty files among others only log a warning.
    """
    try:
        files = _expand_patterns(input_patterns)
    except UserError as err:
        raise UserError(f"{what}: {err}") from None
    empty = []
    for path in files:
        record = _first_record(path, what)
        if record is None:
            empty.append(path)
        else:
            _check_example(record, spec, f"{what} {path}", value_below or {})
    if len(files) == 1 and empty:
        raise UserError(f"{what} {files[0]}: the file holds no record")
    if len(empty) == len(files):
        raise UserError(f"{what}: none of the {len(files)} files holds a record ({files[0]}, ...)")
    if empty:
        _logger.warning(
            "%s: %d of %d files hold no record, e.g. %s", what, len(empty), len(files), empty[0]
        )
    return files


def _crc32c_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
        table.append(crc)
    return table


_CRC32C_TABLE = _crc32c_table()


def _masked_crc32c(data: bytes) -> int:
    """The checksum TFRecord files store: CRC-32C (Castagnoli), rotated and offset."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC32C_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _first_record(path: str, what: str) -> bytes | None:
    """The first record of a TFRecord file (None for an empty file), read and checksummed
    in Python: no TensorFlow op runs, so checking inputs starts no runtime (a TPU
    connection, the host allocator and the devices are set up afterwards)."""
    try:
        size = tf.io.gfile.stat(path).length
        with tf.io.gfile.GFile(path, "rb") as f:
            header = f.read(12)
            if not header:
                return None
            if len(header) < 12:
                problem = "truncated record at 0"
            elif _masked_crc32c(header[:8]) != struct.unpack("<I", header[8:])[0]:
                problem = "corrupted record at 0 (Is this even a TFRecord file?)"
            else:
                (length,) = struct.unpack("<Q", header[:8])
                if 12 + length + 4 > size:
                    problem = "truncated record at 0"
                else:
                    body = f.read(length + 4)
                    record, crc = body[:length], struct.unpack("<I", body[length:])[0]
                    if _masked_crc32c(record) == crc:
                        return record
                    problem = "corrupted record at 0"
    except (tf.errors.OpError, OSError) as err:
        problem = getattr(err, "message", None) or str(err) or type(err).__name__
    raise UserError(f"{what} {path}: not a readable TFRecord file ({problem})")


def _check_example(record: bytes, spec: dict, where: str, value_below: dict) -> None:
    try:
        features = tf.train.Example.FromString(record).features.feature
    except DecodeError:
        raise UserError(f"{where}: the first record is not a tf.train.Example") from None
    for name, fixed in spec.items():
        length = int(np.prod(fixed.shape, dtype=np.int64))
        expected = f"{length} {fixed.dtype.name} value{'s' * (length != 1)}"
        if name not in features:
            if fixed.default_value is not None:
                continue
            present = ", ".join(sorted(features)) or "none"
            raise UserError(
                f"{where}: the first record has no feature {name!r} (expected "
                f"{expected}; it has {present})"
            )
        kind = features[name].WhichOneof("kind")
        count = len(getattr(features[name], kind).value) if kind else 0
        if kind != _FEATURE_KINDS[fixed.dtype] or count != length:
            got = f"{count} {_KIND_NAMES[kind]} value{'s' * (count != 1)}" if kind else "no values"
            raise UserError(
                f"{where}: feature {name!r} of the first record has {got}, expected {expected}"
            )
        if name in value_below and count:
            bound, meaning = value_below[name]
            largest = max(getattr(features[name], kind).value)
            if largest >= bound:
                raise UserError(
                    f"{where}: feature {name!r} of the first record holds {largest}, expected "
                    f"values below {bound} ({meaning})"
                )


def dynamic_mask(
    features: dict, seed: tf.Tensor, max_predictions_per_seq: int, options: MaskingOptions
) -> dict:
    """Draws an n-gram mask for one example (unbatched), pure TF.

    Args:
      features: dict with int64/int32 input_ids [S] (original tokens), input_mask [S],
        token_boundary [S].
      seed: int64 [2] stateless seed for this example.
    Returns:
      dict: input_ids [S] (masked) and masked_lm_positions/masked_lm_ids int32 [P],
      masked_lm_weights float32 [P].
    """
    o = options
    P = max_predictions_per_seq
    ids = tf.cast(features["input_ids"], tf.int32)
    S = tf.shape(ids)[0]
    n = tf.reduce_sum(tf.cast(features["input_mask"], tf.int32))
    pos = tf.range(S)
    special = tf.logical_or(tf.equal(ids, o.cls_id), tf.equal(ids, o.sep_id))
    cand = tf.logical_and(pos < n, tf.logical_not(special))
    nsp = tf.cast(tf.where(cand)[:, 0], tf.int32)  # candidate positions, sorted
    num_cand = tf.shape(nsp)[0]
    if o.do_whole_word_mask:
        new_word = tf.gather(tf.cast(features["token_boundary"], tf.int32), nsp) > 0
        new_word = tf.logical_or(new_word, tf.range(num_cand) == 0)  # first candidate opens a word
    else:
        new_word = tf.ones([num_cand], tf.bool)
    word_starts = tf.concat([tf.cast(tf.where(new_word)[:, 0], tf.int32), [num_cand]], 0)
    num_words = tf.shape(word_starts)[0] - 1

    # float64 + half-to-even rounding, as Python's round() in the builder.
    ntp = tf.cast(tf.round(tf.cast(n, tf.float64) * o.masked_lm_prob), tf.int32)
    ntp = tf.minimum(P, tf.maximum(1, ntp))

    seeds = tf.random.experimental.stateless_split(seed, num=5)
    order = tf.argsort(tf.random.stateless_uniform([num_words], seeds[0]))
    probs = [1.0 / k for k in range(1, o.ngram + 1)]
    if not o.favor_shorter_ngram:
        probs = probs[::-1]
    logits = tf.math.log(tf.constant([probs], tf.float32))
    glens = (
        tf.random.stateless_categorical(logits, tf.maximum(num_words, 1), seeds[1], dtype=tf.int32)[
            0
        ]
        + 1
    )
    gs = tf.range(1, o.ngram + 1)
    cidx = tf.range(num_cand)

    def body(i, count, covered):
        j = order[i]
        g = glens[i]
        ends = tf.gather(word_starts, tf.minimum(j + gs, num_words))
        sizes = ends - word_starts[j]
        fits = tf.logical_and(gs <= g, count + sizes <= ntp)
        # The builder tries g, g-1, ..., 1 and takes the first that fits (sizes grow with g).
        size = tf.reduce_max(tf.where(fits, sizes, 0))
        span = tf.logical_and(cidx >= word_starts[j], cidx < word_starts[j] + size)
        ok = tf.logical_and(size > 0, tf.logical_not(tf.reduce_any(tf.logical_and(span, covered))))
        covered = tf.where(ok, tf.logical_or(covered, span), covered)
        count = tf.where(ok, count + size, count)
        return i + 1, count, covered

    def cond(i, count, covered):
        return tf.logical_and(i < num_words, count < ntp)

    _, _, covered = tf.while_loop(cond, body, (0, 0, tf.zeros([num_cand], tf.bool)))
    chosen = tf.boolean_mask(nsp, covered)  # sorted positions, <= P
    m = tf.shape(chosen)[0]
    labels = tf.gather(ids, chosen)
    u1 = tf.random.stateless_uniform([m], seeds[2])
    u2 = tf.random.stateless_uniform([m], seeds[3])
    rand_ids = tf.random.stateless_uniform(
        [m], seeds[4], minval=0, maxval=o.vocab_size, dtype=tf.int32
    )
    new_vals = tf.where(u1 < 0.8, o.mask_id, tf.where(u2 < 0.5, labels, rand_ids))
    masked_ids = tf.tensor_scatter_nd_update(ids, chosen[:, None], new_vals)
    pad = P - m
    return {
        "input_ids": masked_ids,
        "masked_lm_positions": tf.pad(chosen, [[0, pad]]),
        "masked_lm_ids": tf.pad(labels, [[0, pad]]),
        "masked_lm_weights": tf.pad(tf.ones([m], tf.float32), [[0, pad]]),
    }


def pretraining_dataset(
    input_patterns: str | Sequence[str],
    batch_size: int,
    max_seq_length: int,
    max_predictions_per_seq: int,
    is_training: bool,
    input_context: tf.distribute.InputContext | None = None,
    seed: int | None = None,
    dynamic_masking: bool = False,
    masking_options: MaskingOptions | None = None,
    shuffle_buffer_size: int = 100,
    repeat: bool = True,
    num_parallel_calls: int = tf.data.AUTOTUNE,
) -> tf.data.Dataset:
    """Batched pretraining features.

    Training: files shuffled and repeated, interleaved (cycle length min(4, #files)), records
    shuffled (buffer `shuffle_buffer_size`, the original's 100). Eval: files in order. Batches
    drop the remainder. With `seed` set, everything (file order, interleave, shuffles, dynamic
    masks) is deterministic and the iterator is checkpointable with tf.train.Checkpoint; with
    `seed=None` training reads are non-deterministic ("sloppy") like the original.

    Args:
      input_patterns: comma-separated string or list of globs.
      batch_size: per-replica batch size (use input_context.get_per_replica_batch_size).
      input_context: shards files (or records, if fewer files than pipelines) by
        input_pipeline_id / num_input_pipelines.
      dynamic_masking: draw masks on the fly (needs masking_options.vocab_size and mask_id).
    Returns:
      Dataset of dicts: input_ids, input_mask, segment_ids int32 [B, S];
      masked_lm_positions, masked_lm_ids int32 [B, P]; masked_lm_weights float32 [B, P];
      next_sentence_labels int32 [B].
    """
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size}: must be >= 1")
    if dynamic_masking:
        masking_options = masking_options or MaskingOptions()
        if masking_options.vocab_size < 1 or masking_options.mask_id < 0:
            raise ValueError(
                "dynamic_masking needs masking_options with vocab_size >= 1 and "
                f"mask_id >= 0, got {masking_options}"
            )
    files = _expand_patterns(input_patterns)
    deterministic = seed is not None or not is_training
    op_seed = seed if seed is not None else random.randrange(1 << 31)

    d = tf.data.Dataset.from_tensor_slices(files)
    shard_records = False
    if input_context is not None and input_context.num_input_pipelines > 1:
        if len(files) >= input_context.num_input_pipelines:
            d = d.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        else:
            shard_records = True
    n_files = len(files)
    if is_training:
        d = d.shuffle(n_files, seed=op_seed, reshuffle_each_iteration=True)
        if repeat:
            d = d.repeat()
        d = d.interleave(
            tf.data.TFRecordDataset,
            cycle_length=min(4, n_files),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=deterministic,
        )
    else:
        d = d.flat_map(tf.data.TFRecordDataset)  # files in order
    if shard_records:
        d = d.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    if is_training:
        d = d.shuffle(shuffle_buffer_size, seed=op_seed + 1, reshuffle_each_iteration=True)
    elif repeat:
        d = d.repeat()

    spec = pretraining_feature_spec(max_seq_length, max_predictions_per_seq, dynamic_masking)
    P = max_predictions_per_seq

    def parse(index, record):
        ex = tf.io.parse_single_example(record, spec)
        out = {
            k: tf.cast(ex[k], tf.int32)
            for k in (
                "input_ids",
                "input_mask",
                "segment_ids",
                "masked_lm_positions",
                "masked_lm_ids",
            )
        }
        out["masked_lm_weights"] = ex["masked_lm_weights"]
        out["next_sentence_labels"] = tf.cast(ex["next_sentence_labels"][0], tf.int32)
        if dynamic_masking:
            # Undo static masks (no-op for unmasked files: their weights default to 0).
            real = out["masked_lm_weights"] > 0
            pos = tf.boolean_mask(out["masked_lm_positions"], real)
            orig = tf.tensor_scatter_nd_update(
                out["input_ids"], pos[:, None], tf.boolean_mask(out["masked_lm_ids"], real)
            )
            ex_seed = tf.stack([tf.constant(op_seed, tf.int64), index])
            out.update(
                dynamic_mask(
                    {
                        "input_ids": orig,
                        "input_mask": out["input_mask"],
                        "token_boundary": ex["token_boundary"],
                    },
                    ex_seed,
                    P,
                    masking_options,
                )
            )
            for k, s in (
                ("input_ids", max_seq_length),
                ("masked_lm_positions", P),
                ("masked_lm_ids", P),
                ("masked_lm_weights", P),
            ):
                out[k] = tf.ensure_shape(out[k], [s])
        return out

    # The element counter keys the stateless masking RNG: new masks every epoch, and it is part
    # of the (checkpointable) iterator state.
    d = d.enumerate()
    d = d.map(parse, num_parallel_calls=num_parallel_calls, deterministic=deterministic)
    d = d.batch(batch_size, drop_remainder=True)
    return d.prefetch(tf.data.AUTOTUNE)
