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
The work on one unit (planning, reading, tokenizing, `process_unit`) lives in
albert_tf/data/pretraining_units.py; this module drives it with a pool of worker processes.
With `--runner=<Beam runner>` (the arguments that are not our flags: Beam's pipeline options),
albert_tf/data/beam_pipeline.py runs the same units, seeds and `process_unit` as an Apache Beam
pipeline instead.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import multiprocessing
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
import typing
from typing import Sequence

from albert_tf import cli, fileio, interrupts, options
from albert_tf.data import pretraining_instances as pi
from albert_tf.data import pretraining_units as pu
from albert_tf.data import tokenization
from albert_tf.options import Options, check, option

logger = logging.getLogger(__name__)

# Names of the temporaries (a folder next to the first output, one file next to each output);
# they carry fileio.owner_tag(), so a later run removes those of a killed run.
_TMP_DIR_PREFIX = ".create_pretraining_data-"
_TMP_OUTPUT_INFIX = "create_pretraining_data-"


# ---------------------------------------------------------------------------------------------
# The local worker pool
# ---------------------------------------------------------------------------------------------

# The pool worker's own UnitWorker, built by its initialiser (one per worker process).
_POOL_WORKER: pu.UnitWorker | None = None


def _init_pool_worker(settings: pu.Settings) -> None:
    """Initialiser of the pool's worker processes (never run in the CLI's own process)."""
    global _POOL_WORKER
    # The parent handles Ctrl-C (the whole process group gets it) and stops the pool;
    # SIGTERM ends a worker quietly. Without this a worker forked from the CLI would
    # inherit its handlers and print a traceback of its own.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    logging.basicConfig(level=logging.WARNING)
    _POOL_WORKER = pu.unit_worker(settings)


def _process_in_pool(unit: pu.Unit) -> dict:
    """A pool worker's task: one unit into a machine-local unit file."""
    interrupts.hold_for_test("data_unit")  # a test hook; see albert_tf/interrupts.py
    return pu.process_unit(unit, _POOL_WORKER)


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
    ctx.set_forkserver_preload([__name__, pu.__name__, "albert_tf.data.tokenization"])
    return ctx


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
    chunk_size_mb: float = pu.DEFAULT_CHUNK_SIZE_MB,
    log_every_s: float = 30.0,
) -> dict:
    """Library entry point of the CLI. Returns stats: documents, instances, tokens, masked,
    units, seconds, and long_lines, long_tokens, longest_line (lines longer than
    max_seq_length - 3 tokens, which every instance cuts; a warning reports them). Raises
    InputDataError on bad input or when no instance can be made; then no output file exists.
    Temporaries of killed earlier runs next to the outputs are removed first.
    `digit_comma`: the SentencePiece digit-comma rule (`albert_tf.data.tokenization`)."""
    outputs, files, units = pu.plan(
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
    settings = pu.Settings(
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
            worker = pu.unit_worker(settings)
        else:
            pool = _pool_context().Pool(num_workers, _init_pool_worker, (settings,))
            # ordered: the output does not depend on the number of workers
            results = pool.imap(_process_in_pool, units)
        w = 0  # shard of the next record
        done_bytes = 0
        last_log = t0
        for unit in units:
            if results is None:
                own = [shards[(w + r) % num_shards] for r in range(num_shards)]
                res = pu.process_unit(unit, worker, own)
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
        pu.check_totals(stats, input_file, len(files), config, longest_in)
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
    pu.log_summary(stats, len(outputs), logger)
    return stats


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
        pu.DEFAULT_CHUNK_SIZE_MB,
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
        "FlinkRunner, ...) instead of local worker processes; the arguments that are not "
        "flags of this script go to Beam as its pipeline options (docs/pretraining.md).",
    )


def split_pipeline_args(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """[prog, args...] -> ([prog, our flags], Beam's pipeline options), as Beam's examples
    split a command line with parse_known_args: a flag of ours is taken wherever it stands
    (`--flag=value`, `--flag value`, `--bool`, `--nobool`, one dash or two), every other
    argument goes to Beam in its order. Without --runner among our flags nothing goes to
    Beam: (argv, []), and the flags parser reports what is not ours."""
    hints = typing.get_type_hints(CreatePretrainingDataOptions)
    is_bool = {n: hints[n] is bool for n in options.flag_names(CreatePretrainingDataOptions)}
    argv = list(argv)
    ours, beam, i = argv[:1], [], 1
    while i < len(argv):
        arg = argv[i]
        i += 1
        name, has_value, _ = arg.lstrip("-").partition("=")
        negated = name.startswith("no") and is_bool.get(name[2:])
        if not arg.startswith("-") or (name not in is_bool and not negated):
            if arg in cli.HELP_FLAGS:
                ours.append(arg)
            else:
                beam.append(arg)
            continue
        ours.append(arg)
        if not has_value and not negated and not is_bool[name] and i < len(argv):
            ours.append(argv[i])  # --flag value
            i += 1
    if not any(a.lstrip("-").partition("=")[0] == "runner" for a in ours[1:]):
        return argv, []
    return ours, beam


def run(opts: CreatePretrainingDataOptions, pipeline_args: Sequence[str] = ()) -> None:
    """Checks the options and writes the TFRecords they ask for (UserError naming the
    flag, file or line otherwise). With --runner, a Beam pipeline does (`pipeline_args`:
    Beam's pipeline options)."""
    check(opts)
    missing = [n for n in ("input_file", "output_file") if not getattr(opts, n)]
    if missing:
        raise pu.InputDataError("missing required flag(s): " + ", ".join("--" + m for m in missing))
    if opts.do_permutation:
        raise pu.InputDataError(
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
        raise pu.InputDataError(
            f"--runner={opts.runner}: Apache Beam is not installed (pip install -e '.[beam]')"
        ) from None
    pipeline_args = [f"--runner={opts.runner}", *pipeline_args]
    beam_pipeline.check_pipeline_args(pipeline_args)
    beam_pipeline.create_pretraining_data_beam(
        opts.input_file,
        opts.output_file,
        config,
        pipeline_args=pipeline_args,
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
    status = main()
    if status > 128 and threading.active_count() > 1:
        # A Beam build stopped by a signal leaves its runner's worker threads running (our
        # temporaries are gone by now): the interpreter's exit would wait for them or abort
        # in their native code. Leave at once, as the signal would have.
        sys.stdout.flush()
        sys.stderr.flush()
        logging.shutdown()
        os._exit(status)
    sys.exit(status)
