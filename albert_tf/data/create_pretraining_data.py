"""Creates ALBERT pretraining TFRecords from raw text (the original `create_pretraining_data.py`).

    python -m albert_tf.data.create_pretraining_data \
        --input_file='corpus/part-*.txt' --output_file=out/train-0.tfrecord,out/train-1.tfrecord \
        --spm_model_file=spm.model --vocab_file=unused --max_seq_length=512 --dupe_factor=40

Input: one sentence per line, a blank line between documents (spec §8.2). Output: the original
TFRecord schema (§8.7), readable by the original `run_pretraining.py` and by
`albert_tf.data.input_pipeline`.

Scaling design and deviations from the original (which reads *all* files into memory, builds
*all* instances of all dupe passes in memory, and shuffles documents and instances globally):

* The corpus is split into *units*: one input file, or for large files byte ranges of about
  `--chunk_size_mb` cut at a blank line (document boundary). Each unit is processed
  independently by a worker process, exactly like the original processes its whole corpus:
  shuffle the unit's documents, `dupe_factor` passes creating instances, shuffle all of the
  unit's instances -- with its own `random.Random` / numpy Generator seeded from
  (random_seed, file index, chunk index). Memory is bounded by one unit (its token ids plus the
  offsets of its serialized instances; the instances themselves are spilled to a temp file).
  Workers write finished TFRecord bytes (framing and CRC included) in the final order, so the
  parent process only appends files (in-kernel copies) and never imports TensorFlow.
* Consequently documents are shuffled, random-document negatives (§8.3) are drawn, and instances
  are shuffled *within a unit*, not across the corpus; and documents never continue across file
  boundaries (the original glued a file without a leading blank line onto the previous file's
  last document). Units are written in order, round-robin over the output shards, so every shard
  mixes all units; the training input pipeline shuffles records again. Rationale: a global
  shuffle of a 16 GB corpus x 40 dupes needs hundreds of GB of RAM; per-unit shuffling keeps the
  statistics of every instance identical and only changes which documents co-occur nearby.
* The n-gram length is drawn from a seeded numpy Generator (§15 item 14, fix), so the output is
  a deterministic function of (flags, random_seed). It does not depend on --num_workers (units
  and their seeds depend only on the inputs and --chunk_size_mb).
* With a single unit and the same seeds, instances are identical to the original algorithm's
  (the Python RNG is consumed in the original's order).
* `--do_permutation` is rejected (§15 item 21: the original's output then has masked arrays of
  twice the length that its own reader cannot parse).
* `--write_unmasked` writes input_ids/input_mask/segment_ids/token_boundary/next_sentence_labels
  only (no static masks), for `input_pipeline.pretraining_dataset(dynamic_masking=True)`.
* `--input_file_mode` is accepted for compatibility; files are always read as bytes and decoded
  as strict UTF-8 (an invalid byte is an error naming the file and line).

Output files are first written under temporary names and renamed at the end; on any error none
of them remain, and the temporaries of a killed run are removed by the next run.
With `--runner=<Beam runner>` (Beam's pipeline options after it), albert_tf/data/beam_pipeline.py
runs the same units, seeds and `process_unit` as an Apache Beam pipeline instead.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import glob
import itertools
import logging
import mmap
import multiprocessing
import operator
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
from typing import Sequence

import numpy as np

from albert_tf import cli, fileio, output_paths
from albert_tf.data import example_serialization as es
from albert_tf.data import pretraining_instances as pi
from albert_tf.data import tokenization
from albert_tf.errors import UserError
from albert_tf.options import Options, check, option

logger = logging.getLogger(__name__)

DEFAULT_CHUNK_SIZE_MB = 64
# Names of the temporaries (a folder next to the first output, one file next to each output);
# they carry fileio.owner_tag(), so a later run removes those of a killed run.
_TMP_DIR_PREFIX = ".create_pretraining_data-"
_TMP_OUTPUT_INFIX = "create_pretraining_data-"
# Features every record written here holds (masked or not): an existing --output_file
# without them is not ours to replace (albert_tf/output_paths.py).
OUTPUT_FEATURES = ("input_ids", "segment_ids", "next_sentence_labels")


class InputDataError(UserError):
    """Bad input or flags; the message names the file/line/field and what was expected."""


# ---------------------------------------------------------------------------------------------
# Planning
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Unit:
    """A byte range [start, end) of one input file, processed independently."""

    index: int
    file_index: int
    chunk_index: int
    path: str
    start: int
    end: int


class LocalInputs:
    """How the builder reaches its input files: any TensorFlow filesystem, a plain local
    path through the OS so that the worker processes need no TensorFlow
    (albert_tf/fileio.py). The Beam pipeline (albert_tf/data/beam_pipeline.py) passes the
    same four functions on Beam's filesystems."""

    @staticmethod
    def glob(pattern: str) -> list[str]:
        return fileio.local_glob(pattern)

    @staticmethod
    def isdir(path: str) -> bool:
        return fileio.isdir(path)

    @staticmethod
    def size(path: str) -> int:
        return fileio.size(path)

    @staticmethod
    def open(path: str):
        """A seekable binary file."""
        return fileio.open_binary(path)


def resolve_input_files(input_file: str, inputs=LocalInputs) -> list[str]:
    """Comma-separated globs -> sorted, de-duplicated file list; errors name the bad pattern."""
    files: list[str] = []
    seen = set()
    for pattern in [p.strip() for p in input_file.split(",") if p.strip()]:
        matches = sorted(inputs.glob(pattern))
        if not matches:
            if glob.has_magic(pattern):
                raise InputDataError(f"--input_file: pattern {pattern!r} matches no file")
            raise InputDataError(f"--input_file: file {pattern!r} does not exist")
        for m in matches:
            if inputs.isdir(m):
                raise InputDataError(f"--input_file: {m!r} is a directory, expected a text file")
            if m not in seen:
                seen.add(m)
                files.append(m)
    if not files:
        raise InputDataError("--input_file is empty")
    return files


def plan_units(files: Sequence[str], chunk_bytes: int, inputs=LocalInputs) -> list[Unit]:
    """Splits files into units of about `chunk_bytes`, cutting after a blank line if one is found
    within 1 MiB of the nominal cut (else after a line end). Depends only on the files and
    `chunk_bytes`, so outputs do not depend on the number of workers."""
    units = []
    for fi, path in enumerate(files):
        size = inputs.size(path)
        cuts = [0]
        if chunk_bytes > 0 and size > chunk_bytes:
            with inputs.open(path) as f:
                pos = chunk_bytes
                while pos < size:
                    f.seek(pos)
                    window = f.read(1 << 20)
                    k = window.find(b"\n\n")
                    cut = pos + k + 2 if k >= 0 else -1
                    if cut < 0:
                        k = window.find(b"\n")
                        cut = pos + k + 1 if k >= 0 else size
                    if cut >= size:
                        break
                    cuts.append(cut)
                    pos = cut + chunk_bytes
        cuts.append(size)
        for ci in range(len(cuts) - 1):
            units.append(Unit(len(units), fi, ci, path, cuts[ci], cuts[ci + 1]))
    return units


def unit_rngs(random_seed: int, unit: Unit) -> tuple[random.Random, np.random.Generator]:
    """Per-unit RNGs derived deterministically from (random_seed, file index, chunk index)."""
    ss = np.random.SeedSequence(
        [random_seed & 0xFFFFFFFFFFFFFFFF, unit.file_index, unit.chunk_index]
    )
    py_seed = int.from_bytes(ss.generate_state(4, np.uint32).tobytes(), "little")
    return random.Random(py_seed), np.random.default_rng(ss.spawn(1)[0])


# ---------------------------------------------------------------------------------------------
# Reading + tokenization
# ---------------------------------------------------------------------------------------------


class FastTokenizer:
    """Line -> ids, equal to `tokenizer.tokenize(preprocess_text(line))` + ids, but batched.

    SentencePiece mode encodes many lines per call (C++) and maps ASCII lines through a cheap
    equivalent of `preprocess_text` (NFKD and accent stripping are identities on ASCII). The
    `encode_pieces` post-rule replaces every "<digit>," piece on its own, so it is applied per
    id (cached); only lines with an unknown piece and a comma (the piece's text is unknown) go
    through the exact per-line tokenizer.
    """

    def __init__(self, tokenizer):
        self.tok = tokenizer
        self.lower = bool(tokenizer.do_lower_case)
        self._preprocess_text = tokenization.preprocess_text
        self._split_piece = tokenization.split_digit_comma_piece
        self._split_cache: dict[int, tuple[int, ...]] = {}
        self.spm = bool(tokenizer.spm_mode)
        if self.spm:
            size = len(tokenizer.vocab)
            inv = tokenizer.inv_vocab
            self._slow_lut = np.fromiter(
                (
                    len(inv[i]) > 1 and inv[i][-1] == "," and inv[i][-2].isdigit()
                    for i in range(size)
                ),
                dtype=bool,
                count=size,
            )
            self._slow_ids = frozenset(np.flatnonzero(self._slow_lut).tolist())
            self._unk = tokenizer.sp_model.unk_id()

    def _split(self, piece_id: int) -> tuple[int, ...]:
        """Ids that replace the "<digit>," piece `piece_id`."""
        out = self._split_cache.get(piece_id)
        if out is None:
            tok = self.tok
            pieces = self._split_piece(tok.sp_model, tok.inv_vocab[piece_id], tok.digit_comma)
            out = self._split_cache[piece_id] = tuple(tok.convert_tokens_to_ids(pieces))
        return out

    def preprocess_lines(self, text: str) -> list[str]:
        """`preprocess_text` of every line of `text` (lines end at "\\n" only, as with GFile)."""
        lines = text.split("\n")
        if not self.spm:
            return [line.strip() for line in lines]
        pp, lower = self._preprocess_text, self.lower
        # On ASCII, preprocess_text is " ".join(line.split()) (+ lower): NFKD and accent
        # stripping are identities.
        if lower:
            return [
                " ".join(line.split()).lower() if line.isascii() else pp(line, lower=True)
                for line in lines
            ]
        return [
            " ".join(line.split()) if line.isascii() else pp(line, lower=False) for line in lines
        ]

    def encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Non-empty preprocessed lines -> (flat int32 ids [T], int64 lengths [len(texts)])."""
        if not texts:
            return np.zeros(0, np.int32), np.zeros(0, np.int64)
        if not self.spm:
            lists = [self.tok.convert_tokens_to_ids(self.tok.tokenize(t)) for t in texts]
        else:
            lists = []
            sp = self.tok.sp_model
            for b in range(0, len(texts), 8192):
                lists.extend(sp.encode(texts[b : b + 8192], out_type=int, num_threads=1))
            lens = np.fromiter((len(x) for x in lists), dtype=np.int64, count=len(lists))
            flat = np.fromiter(
                itertools.chain.from_iterable(lists), dtype=np.int32, count=int(lens.sum())
            )
            offs = np.concatenate([[0], np.cumsum(lens)])
            slow = self._slow_lut[flat]
            unk = flat == self._unk
            hits = np.flatnonzero(slow | unk)
            if hits.size:
                lines = np.unique(np.searchsorted(offs, hits, side="right") - 1)
                fixed = 0
                slow_ids, split = self._slow_ids, self._split
                for li in lines.tolist():
                    a, b = offs[li], offs[li + 1]
                    if unk[a:b].any() and "," in texts[li]:
                        lists[li] = self.tok.convert_tokens_to_ids(self.tok.tokenize(texts[li]))
                    elif slow[a:b].any():
                        lists[li] = [
                            x for i in lists[li] for x in (split(i) if i in slow_ids else (i,))
                        ]
                    else:
                        continue  # unknown pieces alone are encoded identically
                    fixed += 1
                if not fixed:
                    return flat, lens
        lens = np.fromiter((len(x) for x in lists), dtype=np.int64, count=len(lists))
        flat = np.fromiter(
            itertools.chain.from_iterable(lists), dtype=np.int32, count=int(lens.sum())
        )
        return flat, lens


def _line_number(path: str, start: int, rel: int, inputs=LocalInputs) -> int:
    """1-based line number of byte `start + rel` of `path`."""
    with inputs.open(path) as f:
        return f.read(start + rel).count(b"\n") + 1


def read_unit(unit: Unit, fast: FastTokenizer, inputs=LocalInputs) -> pi.Corpus:
    """Reads and tokenizes one unit into a `Corpus` (documents split at blank lines, §8.2)."""
    try:
        with inputs.open(unit.path) as f:
            f.seek(unit.start)
            data = f.read(unit.end - unit.start)
    except OSError as e:
        raise InputDataError(f"cannot read input file {unit.path!r}: {e}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = _line_number(unit.path, unit.start, e.start, inputs)
        raise InputDataError(
            f"{unit.path}:{line}: invalid UTF-8 byte {data[e.start : e.start + 1]!r} "
            f"(byte offset {unit.start + e.start}); input files must be UTF-8 text"
        ) from None
    del data
    lines = fast.preprocess_lines(text)
    del text
    empty = np.fromiter(map(operator.not_, lines), dtype=bool, count=len(lines))
    line_doc = np.cumsum(empty)[~empty]  # an empty line starts a new document
    flat, lens = fast.encode([line for line in lines if line])
    keep = lens > 0
    seg_len = lens[keep]
    docs = line_doc[keep]
    seg_offsets = np.zeros(seg_len.shape[0] + 1, dtype=np.int64)
    np.cumsum(seg_len, out=seg_offsets[1:])
    starts = np.flatnonzero(np.diff(docs)) + 1 if docs.size else np.zeros(0, np.int64)
    doc_offsets = np.concatenate([[0], starts, [seg_len.shape[0]]]).astype(np.int64)
    if seg_len.shape[0] == 0:
        doc_offsets = np.zeros(1, np.int64)
    return pi.Corpus(flat, seg_offsets, doc_offsets)


# ---------------------------------------------------------------------------------------------
# Workers
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Settings:
    """Everything a worker needs (picklable)."""

    vocab_file: str | None
    spm_model_file: str | None
    do_lower_case: bool
    digit_comma: str
    config: pi.MaskingConfig
    dupe_factor: int
    random_seed: int
    tmp_dir: str
    num_shards: int
    inputs: type = LocalInputs


_WORKER: dict = {}


def _init_worker(settings: Settings) -> None:
    # The parent handles Ctrl-C (the whole process group gets it) and stops the pool;
    # SIGTERM ends a worker quietly. Without this a worker forked from the CLI would
    # inherit its handlers and print a traceback of its own.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    logging.basicConfig(level=logging.WARNING)
    tok = tokenization.FullTokenizer(
        vocab_file=settings.vocab_file,
        do_lower_case=settings.do_lower_case,
        spm_model_file=settings.spm_model_file,
        digit_comma=settings.digit_comma,
    )
    _WORKER["settings"] = settings
    _WORKER["fast"] = FastTokenizer(tok)
    _WORKER["vocab"] = pi.Vocab.from_tokenizer(tok)


def _empty_result(unit: Unit, num_shards: int) -> dict:
    return dict(
        unit=unit.index,
        path=None,
        sizes=[0] * num_shards,
        documents=0,
        instances=0,
        tokens=0,
        masked=0,
        long_lines=0,
        long_tokens=0,
        longest_line=0,
    )


def _long_lines(corpus: pi.Corpus, max_num_tokens: int) -> dict:
    """Lines (segments) longer than a whole sequence: every instance cuts them (§8.3 step 5)."""
    lengths = np.diff(corpus.seg_offsets)
    long = lengths[lengths > max_num_tokens]
    return dict(
        long_lines=int(long.size),
        long_tokens=int((long - max_num_tokens).sum()),
        longest_line=int(long.max()) if long.size else 0,
    )


def process_unit(unit: Unit, sinks: Sequence | None = None) -> dict:
    """Worker: unit -> TFRecord-framed examples in their final order.

    The order is the original's final instance shuffle. Record j of the whole output goes to
    shard j % num_shards, so the records are grouped by j % num_shards here: group r goes whole
    to one shard. Group r is written to sinks[r] (binary files) if given, else all groups one
    after the other to a temp file. Returns a dict with path (the temp file or None), sizes
    (list of num_shards ints: bytes of each group), documents, instances, tokens, masked.
    """
    s: Settings = _WORKER["settings"]
    cfg = s.config
    corpus = read_unit(unit, _WORKER["fast"], s.inputs)
    if corpus.num_documents == 0:
        if unit.chunk_index == 0 and unit.end == s.inputs.size(unit.path):
            raise InputDataError(
                f"input file {unit.path!r} contains no documents "
                "(expected one sentence per line, blank lines between documents)"
            )
        return _empty_result(unit, s.num_shards)
    rng, np_rng = unit_rngs(s.random_seed, unit)
    builder = pi.InstanceBuilder(cfg, _WORKER["vocab"], rng, np_rng)
    order = builder.document_order(corpus)
    # Records in creation order go to a spill file (memory stays bounded by one batch).
    spill = os.path.join(s.tmp_dir, f"unit-{unit.index:06d}.spill")
    ends = []
    tokens = masked = pos = 0
    with open(spill, "wb") as f:  # machine-local temporary (tmp_dir)
        for batch in builder.iter_batches(corpus, order, s.dupe_factor):
            buf, offs = es.serialize_batch(
                batch,
                cfg.max_seq_length,
                cfg.max_predictions_per_seq,
                with_masks=cfg.do_masking,
                tfrecord=True,
            )
            f.write(buf)
            ends.append(offs[1:] + pos)
            pos += int(offs[-1])
            tokens += int(batch.input_ids.shape[0])
            masked += int(batch.masked_lm_positions.shape[0])
    offsets = [0] + np.concatenate(ends).tolist()
    n = len(offsets) - 1
    # The original's final `rng.shuffle(instances)`: same draws as shuffling any list of length n.
    perm = list(range(n))
    pi.shuffle_like_random(perm, rng)
    path = None
    with contextlib.ExitStack() as stack:
        if sinks is None:
            path = os.path.join(s.tmp_dir, f"unit-{unit.index:06d}.tfrecord")
            sink = open(path, "wb", buffering=1 << 20)  # machine-local temporary (tmp_dir)
            sinks = [stack.enter_context(sink)] * s.num_shards
        src = stack.enter_context(open(spill, "rb"))  # machine-local spill
        mm = stack.enter_context(mmap.mmap(src.fileno(), 0, access=mmap.ACCESS_READ))
        view = stack.enter_context(memoryview(mm))
        sizes = []
        for r in range(s.num_shards):
            write, size = sinks[r].write, 0
            for i in perm[r :: s.num_shards]:
                a, b = offsets[i], offsets[i + 1]
                write(view[a:b])
                size += b - a
            sizes.append(size)
    os.remove(spill)  # machine-local temporary
    return dict(
        unit=unit.index,
        path=path,
        sizes=sizes,
        documents=corpus.num_documents,
        instances=n,
        tokens=tokens,
        masked=masked,
        **_long_lines(corpus, cfg.max_seq_length - 3),
    )


def _append_range(src_fd: int, offset: int, count: int, dst_fd: int) -> None:
    """Appends bytes [offset, offset + count) of src at dst's file position (in-kernel copy
    where the platform has one)."""
    while count > 0:
        try:
            done = os.copy_file_range(src_fd, dst_fd, count, offset)
        except (AttributeError, OSError):  # not Linux, or not supported between these files
            done = os.write(dst_fd, os.pread(src_fd, min(count, 1 << 24), offset))
        if done <= 0:
            raise OSError(f"copying a temporary unit file: {count} bytes missing")
        offset += done
        count -= done


def _pool_context():
    """Start method of the worker processes: fork where it is safe (no other threads, e.g. the
    CLI), else forkserver (TensorFlow's threads make fork unsafe; the server is started once and
    reused by later pools)."""
    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and threading.active_count() == 1 and "tensorflow" not in sys.modules:
        return multiprocessing.get_context("fork")
    if "forkserver" not in methods:
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    # Workers fork from a server that has imported the worker code (numpy, SentencePiece), so
    # they start in milliseconds; applies when this call starts the server.
    ctx.set_forkserver_preload([__name__, "albert_tf.data.tokenization"])
    return ctx


# ---------------------------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------------------------


def _check_outputs(output_files: Sequence[str]) -> None:
    if not output_files:
        raise InputDataError("--output_file is empty")
    if len(set(output_files)) != len(output_files):
        raise InputDataError(f"--output_file lists a file twice: {list(output_files)}")
    for out in output_files:
        d = fileio.parent(out if fileio.is_remote(out) else os.path.abspath(out))
        # An object store (gs://) has no folders to check: its writes make them.
        if fileio.is_local(out) and not fileio.isdir(d):
            raise InputDataError(f"--output_file: directory {d!r} of {out!r} does not exist")
        if fileio.isdir(out):
            raise InputDataError(f"--output_file: {out!r} is a directory")
        fileio.check_writable_folder("output_file", out, d)  # read-only, no permission


def check_flags(
    config: pi.MaskingConfig,
    *,
    vocab_file: str | None,
    spm_model_file: str | None,
    digit_comma: str,
    dupe_factor: int,
) -> None:
    """The checks of the flags that need no input file (InputDataError naming the flag)."""
    if digit_comma not in tokenization.DIGIT_COMMA_MODES:
        raise InputDataError(
            f"--digit_comma={digit_comma!r}: expected one of "
            f"{', '.join(tokenization.DIGIT_COMMA_MODES)}"
        )
    try:
        config.validate()
    except ValueError as e:
        raise InputDataError(f"--{e}") from None  # its messages start "<flag>=<value>: "
    if dupe_factor < 1:
        raise InputDataError(f"--dupe_factor={dupe_factor}: must be >= 1")
    if not spm_model_file and not vocab_file:
        raise InputDataError("need --spm_model_file (SentencePiece) or --vocab_file (WordPiece)")
    for flag, path in (
        ("--spm_model_file", spm_model_file),
        ("--vocab_file", None if spm_model_file else vocab_file),
    ):
        if path and not fileio.isfile(path):
            raise InputDataError(f"{flag}: file {path!r} does not exist")
    if spm_model_file:
        tokenization.load_spm_model(spm_model_file, flag="spm_model_file")


def output_files(output_file: str | Sequence[str]) -> list[str]:
    """--output_file (comma-separated, or a list) -> the output files, in order."""
    if isinstance(output_file, str):
        return [o.strip() for o in output_file.split(",") if o.strip()]
    return list(output_file)


def check_totals(
    stats: dict, input_file: str, num_files: int, config: pi.MaskingConfig, longest_in
) -> None:
    """After all units: InputDataError when no instance was made; a warning about lines longer
    than a whole sequence (`longest_in`: the file of the longest, or None where unknown)."""
    if stats["instances"] == 0:
        raise InputDataError(
            f"--input_file={input_file}: no instance could be made from "
            f"{num_files} file(s) ({stats['documents']} documents)"
        )
    if stats["long_lines"]:
        logger.warning(
            "%d input line(s) are longer than a whole sequence (max_seq_length - 3 = %d "
            "tokens); every instance cuts them: %d tokens beyond %d (longest line: %d "
            "tokens%s). Split such lines into sentences.",
            stats["long_lines"],
            config.max_seq_length - 3,
            stats["long_tokens"],
            config.max_seq_length - 3,
            stats["longest_line"],
            f", in {longest_in}" if longest_in else "",
        )


def check_outputs_apart_from_inputs(outputs: Sequence[str], files: Sequence[str], inputs) -> None:
    """Never replace an input, or a file this script did not write (UserError naming the
    output; albert_tf/output_paths.py). `inputs`: how files are reached (LocalInputs)."""
    for out in outputs:
        output_paths.check_not_an_input({"--output_file": out}, {"--input_file": files})
        output_paths.check_replaceable("output_file", out, OUTPUT_FEATURES, inputs)


def plan(
    input_file: str,
    output_file: str | Sequence[str],
    config: pi.MaskingConfig,
    *,
    vocab_file: str | None,
    spm_model_file: str | None,
    digit_comma: str,
    dupe_factor: int,
    chunk_size_mb: float,
    inputs=LocalInputs,
    check_outputs=_check_outputs,
) -> tuple[list[str], list[str], list[Unit]]:
    """Every check that needs no unit read (InputDataError naming the flag or file), then
    the plan: (output files, input files, units). `inputs`: how input files are reached;
    `check_outputs`: the checks of the output list for this way of writing."""
    check_flags(
        config,
        vocab_file=vocab_file,
        spm_model_file=spm_model_file,
        digit_comma=digit_comma,
        dupe_factor=dupe_factor,
    )
    outputs = output_files(output_file)
    check_outputs(outputs)
    files = resolve_input_files(input_file, inputs)
    check_outputs_apart_from_inputs(outputs, files, inputs)
    return outputs, files, plan_units(files, int(chunk_size_mb * (1 << 20)), inputs)


def create_pretraining_data(
    input_file: str,
    output_file: str | Sequence[str],
    config: pi.MaskingConfig,
    *,
    vocab_file: str | None = None,
    spm_model_file: str | None = None,
    do_lower_case: bool = True,
    digit_comma: str = tokenization.DEFAULT_DIGIT_COMMA,
    dupe_factor: int = 40,
    random_seed: int = 12345,
    num_workers: int | None = None,
    chunk_size_mb: float = DEFAULT_CHUNK_SIZE_MB,
    log_every_s: float = 30.0,
) -> dict:
    """Library entry point of the CLI. Returns stats: documents, instances, tokens, masked,
    units, seconds, and long_lines, long_tokens, longest_line (lines longer than
    max_seq_length - 3 tokens, which every instance cuts; a warning reports them). Raises
    InputDataError on bad input or when no instance can be made; then no output file exists.
    Temporaries of killed earlier runs next to the outputs are removed first.
    `digit_comma`: the SentencePiece digit-comma rule (`albert_tf.data.tokenization`)."""
    outputs, files, units = plan(
        input_file,
        output_file,
        config,
        vocab_file=vocab_file,
        spm_model_file=spm_model_file,
        digit_comma=digit_comma,
        dupe_factor=dupe_factor,
        chunk_size_mb=chunk_size_mb,
    )
    total_bytes = sum(u.end - u.start for u in units) or 1
    num_workers = max(1, min(num_workers or os.cpu_count() or 1, len(units)))
    logger.info(
        "%d input file(s) -> %d unit(s), %d worker(s), %d output shard(s)",
        len(files),
        len(units),
        num_workers,
        len(outputs),
    )

    # Plain local outputs are written next to their final names (the parent appends the
    # workers' files with in-kernel copies); outputs on another filesystem (gs://, file://)
    # are built in a machine-local folder, then copied into place through tf.io.gfile.
    staged = any(fileio.is_remote(o) for o in outputs)
    out_dir = None if staged else os.path.dirname(os.path.abspath(outputs[0]))
    for folder in sorted({fileio.parent(o) for o in outputs if fileio.is_local(o)}):
        fileio.remove_stale(folder, re.escape(_TMP_DIR_PREFIX) + r"{owner}-\w+")
        fileio.remove_stale(folder, r"\..+\." + re.escape(_TMP_OUTPUT_INFIX) + r"{owner}\.tmp")
    tag = fileio.owner_tag()
    tmp_dir = tempfile.mkdtemp(prefix=f"{_TMP_DIR_PREFIX}{tag}-", dir=out_dir)
    tmp_outputs = [
        os.path.join(
            tmp_dir if staged else os.path.dirname(o),
            f".{i}-{os.path.basename(o)}.{_TMP_OUTPUT_INFIX}{tag}.tmp"
            if staged
            else f".{os.path.basename(o)}.{_TMP_OUTPUT_INFIX}{tag}.tmp",
        )
        for i, o in enumerate(outputs)
    ]
    settings = Settings(
        vocab_file,
        spm_model_file,
        do_lower_case,
        digit_comma,
        config,
        dupe_factor,
        random_seed,
        tmp_dir,
        len(outputs),
    )
    stats = dict(
        documents=0,
        instances=0,
        tokens=0,
        masked=0,
        units=len(units),
        long_lines=0,
        long_tokens=0,
        longest_line=0,
    )
    longest_in = None  # the file of the longest line beyond max_seq_length - 3
    t0 = time.time()
    pool = None
    shards = []
    ok = False
    try:
        # machine-local (tmp_dir) or next to a plain local output: see `staged`
        shards = [open(t, "wb", buffering=1 << 20) for t in tmp_outputs]  # local
        num_shards = len(shards)
        results = None
        if num_workers == 1:  # in this process, writing straight into the shards
            _init_worker(settings)
        else:
            pool = _pool_context().Pool(num_workers, _init_worker, (settings,))
            results = pool.imap(process_unit, units)  # ordered: output independent of worker count
        w = 0  # shard of the next record
        done_bytes = 0
        last_log = t0
        for unit in units:
            if results is None:
                res = process_unit(unit, [shards[(w + r) % num_shards] for r in range(num_shards)])
            else:
                res = next(results)
            if res["path"] is not None:  # a worker's unit file: appended by in-kernel copies
                src = os.open(res["path"], os.O_RDONLY)
                try:
                    pos = 0
                    for r, size in enumerate(res["sizes"]):
                        _append_range(src, pos, size, shards[(w + r) % num_shards].fileno())
                        pos += size
                finally:
                    os.close(src)
                os.remove(res["path"])  # a worker's machine-local unit file
            w = (w + res["instances"]) % num_shards
            for k in ("documents", "instances", "tokens", "masked", "long_lines", "long_tokens"):
                stats[k] += res[k]
            if res["longest_line"] > stats["longest_line"]:
                stats["longest_line"], longest_in = res["longest_line"], unit.path
            done_bytes += unit.end - unit.start
            now = time.time()
            if now - last_log >= log_every_s or unit.index == len(units) - 1:
                last_log = now
                el = now - t0
                eta = el * (total_bytes - done_bytes) / max(done_bytes, 1)
                logger.info(
                    "unit %d/%d: %d documents, %d instances (%.0f instances/s), ETA %.0f s",
                    unit.index + 1,
                    len(units),
                    stats["documents"],
                    stats["instances"],
                    stats["instances"] / max(el, 1e-9),
                    eta,
                )
        check_totals(stats, input_file, len(files), config, longest_in)
        while shards:
            shards.pop().close()
        for t, o in zip(tmp_outputs, outputs):
            if staged:
                with fileio.atomic_path(o) as tmp:
                    fileio.copy_from_local(t, tmp)
            else:
                os.replace(t, o)  # plain local output, same folder: atomic
        ok = True
    finally:
        if pool is not None:
            if ok:
                pool.close()
            else:
                pool.terminate()
            pool.join()
        for f in shards:  # only after an error: their contents are discarded
            with contextlib.suppress(OSError):
                f.close()
        if not ok:
            for t in tmp_outputs:
                if os.path.exists(t):  # plain local or machine-local: see `staged`
                    os.remove(t)  # machine-local temporary
        shutil.rmtree(tmp_dir, ignore_errors=True)  # machine-local temporaries
    stats["seconds"] = time.time() - t0
    log_summary(stats, len(outputs))
    return stats


def log_summary(stats: dict, num_outputs: int, log: logging.Logger = logger) -> None:
    """The closing line of a finished build, from its stats."""
    log.info(
        "wrote %d instances from %d documents to %d file(s) in %.1f s (%.0f instances/s);"
        " masked %.2f%% of tokens",
        stats["instances"],
        stats["documents"],
        num_outputs,
        stats["seconds"],
        stats["instances"] / max(stats["seconds"], 1e-9),
        100.0 * stats["masked"] / max(stats["tokens"], 1),
    )


# ---------------------------------------------------------------------------------------------
# CLI (absl flags; names and defaults of the original, §8.1)
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(kw_only=True)
class CreatePretrainingDataOptions(Options):
    """The CLI's flags: the original's names and defaults (§8.1) plus ours."""

    input_file: str | None = option(None, "Input raw text file(s): comma-separated globs.")
    output_file: str | None = option(None, "Output TFRecord file(s), comma-separated (= shards).")
    vocab_file: str | None = option(None, "WordPiece vocabulary (unused in SentencePiece mode).")
    spm_model_file: str | None = option(
        None, "SentencePiece model; switches to SentencePiece mode."
    )
    input_file_mode: str = option(
        "r",
        "Accepted for compatibility ('r' or 'rb'); input is always decoded as strict UTF-8.",
        choices=("r", "rb"),
    )
    do_lower_case: bool = option(True, "Lower-case the input (SentencePiece: in preprocess_text).")
    do_whole_word_mask: bool = option(True, "Mask whole words rather than single pieces.")
    do_permutation: bool = option(
        False, "Not supported (rejected); see docs/original.md, quirk 21."
    )
    favor_shorter_ngram: bool = option(True, "p(n) ∝ 1/n (reversed if False).")
    random_next_sentence: bool = option(False, "NSP (random other document) instead of SOP.")
    max_seq_length: int = option(512, "Maximum sequence length.", minimum=2)
    ngram: int = option(3, "Maximum n-gram length to mask.", minimum=1)
    max_predictions_per_seq: int = option(20, "Maximum masked positions per sequence.", minimum=1)
    random_seed: int = option(12345, "Seed of all random choices (fully reproducible).")
    dupe_factor: int = option(
        40, "Passes over the data, each with fresh random choices.", minimum=1
    )
    masked_lm_prob: float = option(0.15, "Masked LM probability.", minimum=0.0, maximum=1.0)
    short_seq_prob: float = option(
        0.1, "Probability of a shorter target length.", minimum=0.0, maximum=1.0
    )
    num_workers: int | None = option(None, "Worker processes (default: all cores).", minimum=1)
    chunk_size_mb: float = option(
        DEFAULT_CHUNK_SIZE_MB,
        "Files larger than this are split into independent units (0 = never).",
        minimum=0.0,
    )
    write_unmasked: bool = option(
        False,
        "Write tokens + token_boundary without static masks "
        "(for dynamic masking in the input pipeline).",
    )
    digit_comma: str = tokenization.digit_comma_option()
    runner: str | None = option(
        None,
        "Build with Apache Beam on this runner (FnApiRunner, DirectRunner, DataflowRunner, "
        "FlinkRunner, ...) instead of local worker processes; Beam's pipeline options follow "
        "this flag (docs/pretraining.md).",
    )


def split_pipeline_args(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """[prog, our flags, --runner=R, Beam's pipeline options] -> (everything up to and
    including --runner, Beam's options). Without --runner: (argv, [])."""
    argv = list(argv)
    for i, arg in enumerate(argv[1:], 1):
        if arg.startswith("--runner="):
            return argv[: i + 1], argv[i + 1 :]
        if arg == "--runner":
            return argv[: i + 2], argv[i + 2 :]
    return argv, []


def run(opts: CreatePretrainingDataOptions, pipeline_args: Sequence[str] = ()) -> None:
    """Checks the options and writes the TFRecords they ask for (UserError naming the
    flag, file or line otherwise). With --runner, a Beam pipeline does (`pipeline_args`:
    Beam's pipeline options)."""
    check(opts)
    missing = [n for n in ("input_file", "output_file") if not getattr(opts, n)]
    if missing:
        raise InputDataError("missing required flag(s): " + ", ".join("--" + m for m in missing))
    if opts.do_permutation:
        raise InputDataError(
            "--do_permutation is not supported: the original writes masked arrays of twice "
            "--max_predictions_per_seq that its own reader cannot parse (docs/original.md, "
            "quirk 21); it was not used in the paper"
        )
    config = pi.MaskingConfig(
        max_seq_length=opts.max_seq_length,
        short_seq_prob=opts.short_seq_prob,
        masked_lm_prob=opts.masked_lm_prob,
        max_predictions_per_seq=opts.max_predictions_per_seq,
        ngram=opts.ngram,
        favor_shorter_ngram=opts.favor_shorter_ngram,
        do_whole_word_mask=opts.do_whole_word_mask,
        random_next_sentence=opts.random_next_sentence,
        do_masking=not opts.write_unmasked,
    )
    common = dict(
        vocab_file=opts.vocab_file,
        spm_model_file=opts.spm_model_file,
        do_lower_case=opts.do_lower_case,
        digit_comma=opts.digit_comma,
        dupe_factor=opts.dupe_factor,
        random_seed=opts.random_seed,
        chunk_size_mb=opts.chunk_size_mb,
    )
    if opts.runner and opts.num_workers:
        logger.warning(
            "--num_workers applies to the local builder; with --runner, Beam's pipeline options "
            "set the parallelism (e.g. --direct_num_workers, --max_num_workers)"
        )
    if not opts.runner:
        create_pretraining_data(
            opts.input_file, opts.output_file, config, num_workers=opts.num_workers, **common
        )
        return
    try:  # Beam is an optional extra: only this path imports it
        from albert_tf.data import beam_pipeline
    except ModuleNotFoundError as e:
        if not (e.name or "").startswith("apache_beam"):
            raise
        raise InputDataError(
            f"--runner={opts.runner}: Apache Beam is not installed (pip install -e '.[beam]')"
        ) from None
    beam_pipeline.create_pretraining_data_beam(
        opts.input_file,
        opts.output_file,
        config,
        pipeline_args=[f"--runner={opts.runner}", *pipeline_args],
        **common,
    )


def main(argv=None) -> int:
    """CLI entry: returns the exit status (0 ok or --help, 1 bad input/flags, reported as
    the other scripts do: albert_tf/cli.py). The flags live in their own FlagValues, so
    main() can run in a process that has other absl flags (a test session, a notebook)."""
    argv = list(argv if argv is not None else sys.argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    argv, pipeline_args = split_pipeline_args(argv)
    return cli.execute(
        CreatePretrainingDataOptions,
        functools.partial(run, pipeline_args=pipeline_args),
        argv,
        description="Create masked SOP pretraining TFRecords (docs/pretraining.md).",
    )


if __name__ == "__main__":
    sys.exit(main())
