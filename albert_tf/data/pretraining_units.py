"""The pretraining-data builder's work on one unit, shared by its two drivers: the local
worker pool (albert_tf/data/create_pretraining_data.py) and the Apache Beam pipeline
(albert_tf/data/beam_pipeline.py).

A *unit* is one input file, or a byte range of a large file cut at a blank line (a document
boundary) every `--chunk_size_mb`. `plan` checks the flags and files and lists the units;
`process_unit` turns one unit into TFRecord-framed records in their final order with RNGs
seeded from (random_seed, file index, chunk index), so the records depend only on the flags and
inputs, never on which driver, worker, thread or process ran the unit.

Nothing here touches process-wide state (signal handlers, logging configuration, module
globals): a `UnitWorker` holds the tokenizer a worker builds once, and one may be shared by
threads that run different units at once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import itertools
import logging
import mmap
import operator
import os
import random
from typing import Sequence

import numpy as np

from albert_tf import fileio, output_paths
from albert_tf.data import example_serialization as es
from albert_tf.data import pretraining_instances as pi
from albert_tf.data import tokenization
from albert_tf.errors import UserError

logger = logging.getLogger(__name__)

DEFAULT_CHUNK_SIZE_MB = 64
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
    """Everything a worker needs (picklable): the flags that shape the records, where spill
    files go, the number of output files, and how input files are reached."""

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


@dataclasses.dataclass(frozen=True)
class UnitWorker:
    """What `process_unit` needs besides the unit: the settings and what a worker builds from
    them once (the tokenizer, the vocabulary tables). Read-only while units run, so threads may
    share one."""

    settings: Settings
    fast: FastTokenizer
    vocab: pi.Vocab


def unit_worker(settings: Settings) -> UnitWorker:
    """Builds a worker's tokenizer and vocabulary tables from `settings` (its model or
    vocabulary file must be readable here); touches no process-wide state."""
    tok = tokenization.FullTokenizer(
        vocab_file=settings.vocab_file,
        do_lower_case=settings.do_lower_case,
        spm_model_file=settings.spm_model_file,
        digit_comma=settings.digit_comma,
    )
    return UnitWorker(settings, FastTokenizer(tok), pi.Vocab.from_tokenizer(tok))


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


def process_unit(unit: Unit, worker: UnitWorker, sinks: Sequence | None = None) -> dict:
    """Unit -> TFRecord-framed examples in their final order (`worker`: its settings and
    tokenizer; the spill files go to `worker.settings.tmp_dir`, named by the unit).

    The order is the original's final instance shuffle. Record j of the whole output goes to
    shard j % num_shards, so the records are grouped by j % num_shards here: group r goes whole
    to one shard. Group r is written to sinks[r] (binary files) if given, else all groups one
    after the other to a temp file. Returns a dict with path (the temp file or None), sizes
    (list of num_shards ints: bytes of each group), documents, instances, tokens, masked.
    """
    s = worker.settings
    cfg = s.config
    corpus = read_unit(unit, worker.fast, s.inputs)
    if corpus.num_documents == 0:
        if unit.chunk_index == 0 and unit.end == s.inputs.size(unit.path):
            raise InputDataError(
                f"input file {unit.path!r} contains no documents "
                "(expected one sentence per line, blank lines between documents)"
            )
        return _empty_result(unit, s.num_shards)
    rng, np_rng = unit_rngs(s.random_seed, unit)
    builder = pi.InstanceBuilder(cfg, worker.vocab, rng, np_rng)
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


# ---------------------------------------------------------------------------------------------
# Checks and the plan
# ---------------------------------------------------------------------------------------------


def check_outputs(output_files: Sequence[str]) -> None:
    """The local builder's checks of the output list (InputDataError naming --output_file)."""
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
        if path and not fileio.exists(path):
            raise InputDataError(f"{flag}: file {path!r} does not exist")
        if path:
            fileio.check_input_file(path, f"{flag}={path}")
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
    check_outputs=check_outputs,
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
