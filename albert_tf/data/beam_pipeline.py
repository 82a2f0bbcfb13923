"""The pretraining-data builder as an Apache Beam pipeline, for corpora beyond one machine.

    python -m albert_tf.data.create_pretraining_data --input_file='gs://b/corpus/*.txt' \\
        --output_file=gs://b/data/train-0.tfrecord,... --spm_model_file=... \\
        --runner=DataflowRunner --project=... --region=... --temp_location=gs://b/tmp

Only `create_pretraining_data --runner=...` imports this module (Beam is the optional extra
`pip install -e ".[beam]"`). It runs the local builder's own algorithm
(albert_tf/data/pretraining_units.py, which create_pretraining_data.py drives locally): the
same flag checks, the same units (a file, or a byte range of a large file cut at a document
boundary, per --chunk_size_mb), the same
per-unit seeds from (random_seed, file index, chunk index) and the same per-unit function
(`process_unit`), so the records are byte-identical to the local builder's.

What differs is where records land: unit u (in plan order) sends record k of its shuffled
instances to output file (u + k) mod N, where the local builder continues one round-robin over
all units (record j of the whole output to file j mod N). Either way every file is a mix of all
units, the multiset of records over all files is the same, and each file holds the same records
on every run; within a file, Beam decides the order of the pieces of different units.

Files go through Beam's filesystems (apache_beam.io.filesystems): the corpus globs, the unit
reads (on the workers) and the outputs, so `gs://` works with Beam's GCP extra; the
SentencePiece model (or vocabulary) is read where the command runs and sent with the step, so
the workers need not reach its path; a worker spills into its own temp folder. Each output
file is written by Beam's file sink: into a `beam-temp-<name>-<host>-<pid>-<id>` folder next
to it, then renamed into place once every piece is written, so each file appears complete or
not at all. While the pipeline runs, the launcher's temp folder is a folder of the run's,
removed at the end. If the pipeline fails or a signal stops it, the launcher removes the
temporary folders that the run created (a signal also ends the local runner's worker
processes); the next run removes those of a run that was killed outright.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid
from typing import Sequence

import apache_beam as beam
from apache_beam.io import filebasedsink
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.io.localfilesystem import LocalFileSystem
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineState, create_runner

from albert_tf import fileio, interrupts
from albert_tf.data import pretraining_instances as pi
from albert_tf.data import pretraining_units as pu
from albert_tf.data import tokenization
from albert_tf.errors import RunInterrupted, UserError

logger = logging.getLogger(__name__)

# Largest element the unit step emits: records of one (unit, output file) pair are grouped into
# pieces of about this many bytes (a runner moves them whole; 64 MiB keeps shuffles efficient).
PIECE_BYTES = 64 << 20
# Counters of the unit step, summed by the runner (the local builder's stats).
_COUNTERS = ("documents", "instances", "tokens", "masked", "long_lines", "long_tokens")
_METRICS_NAMESPACE = "albert_tf.create_pretraining_data"
# Temporaries, named with fileio.owner_tag() so that a later run removes those of a killed
# one: a worker's spill folder (in the worker's own temp folder), and Beam's folder of the
# pieces of each output (next to it; Beam's own prefix).
_SPILL_PREFIX = "albert_tf-beam-"
_SPILL_PATTERN = re.escape(_SPILL_PREFIX) + r"{owner}-\w+"
_TEMP_PREFIX = "beam-temp-"


def _is_local(path: str) -> bool:
    return isinstance(FileSystems.get_filesystem(path), LocalFileSystem)


class BeamInputs:
    """`pu.LocalInputs` on Beam's filesystems. Local paths keep the local builder's glob
    (so its errors, e.g. for a folder, are the same); other schemes use Beam's match."""

    @staticmethod
    def glob(pattern: str) -> list[str]:
        if _is_local(pattern):
            return pu.LocalInputs.glob(pattern)
        return [m.path for r in FileSystems.match([pattern]) for m in r.metadata_list]

    @staticmethod
    def isdir(path: str) -> bool:
        return _is_local(path) and os.path.isdir(path)  # Beam's match lists only files

    @staticmethod
    def size(path: str) -> int:
        return FileSystems.match([path])[0].metadata_list[0].size_in_bytes

    @staticmethod
    def open(path: str):
        """A seekable binary file, read as stored (no decompression by file name)."""
        return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)


def _read_model_file(path: str | None) -> bytes | None:
    """The bytes of the SentencePiece model or vocabulary, read where the command runs and sent
    to the workers with the step (so the path need not be reachable from them)."""
    if not path:
        return None
    with BeamInputs.open(path) as f:
        return f.read()


def _pieces(f, size: int, limit: int):
    """Reads `size` bytes of TFRecord-framed records from `f` and yields them in pieces of
    whole records, each of about `limit` bytes at most (one record if it is longer)."""
    parts, part_bytes, left = [], 0, size
    while left:
        header = f.read(12)  # uint64 length, uint32 masked CRC of the length
        record = header + f.read(int.from_bytes(header[:8], "little") + 4)  # data + its CRC
        left -= len(record)
        if part_bytes and part_bytes + len(record) > limit:
            yield b"".join(parts)
            parts, part_bytes = [], 0
        parts.append(record)
        part_bytes += len(record)
    if parts:
        yield b"".join(parts)


class _BuildUnit(beam.DoFn):
    """Unit -> (output index, piece of TFRecord-framed records), by the local builder's
    `process_unit`; the unit's records k go to output (unit.index + k) mod N.

    Everything a worker needs travels with the step: the settings and the bytes of the
    SentencePiece model (or vocabulary), read where the command runs. A worker may run on
    another machine, in a thread or a process of Beam's: `setup` makes its tokenizer and a
    spill folder in the worker's own temp folder and touches no process-wide state (signal
    handlers, logging configuration, globals)."""

    def __init__(self, settings: pu.Settings, piece_bytes: int):
        # No path of the launching machine reaches a worker: `setup` names its own copies.
        self._settings = dataclasses.replace(
            settings, tmp_dir="", spm_model_file=None, vocab_file=None
        )
        self._piece_bytes = piece_bytes
        self._spm_model = _read_model_file(settings.spm_model_file)
        self._vocab = None if settings.spm_model_file else _read_model_file(settings.vocab_file)
        self._counters = {k: beam.metrics.Metrics.counter(_METRICS_NAMESPACE, k) for k in _COUNTERS}
        self._longest = beam.metrics.Metrics.distribution(_METRICS_NAMESPACE, "longest_line")

    def setup(self):
        # The worker's own temp folder, as its machine and environment name it (not the
        # launcher's); spill folders of killed workers of this host are removed first.
        _remove_stale_spills(tempfile.gettempdir())
        self._tmp = tempfile.mkdtemp(prefix=f"{_SPILL_PREFIX}{fileio.owner_tag()}-")
        local = {}
        for name, data in (("spm_model_file", self._spm_model), ("vocab_file", self._vocab)):
            if data is not None:
                local[name] = os.path.join(self._tmp, name)
                with open(local[name], "wb") as f:  # machine-local spill
                    f.write(data)
        settings = dataclasses.replace(self._settings, tmp_dir=self._tmp, **local)
        self._worker = pu.unit_worker(settings)  # tokenizer and vocabulary, once per instance

    def process(self, unit):
        logger.info("unit %d: %s bytes %d-%d started", unit.index, unit.path, unit.start, unit.end)
        res = pu.process_unit(unit, self._worker)
        if res["path"] is not None:
            n = len(res["sizes"])
            try:
                with open(res["path"], "rb", buffering=1 << 20) as f:  # machine-local spill
                    for r, size in enumerate(res["sizes"]):
                        for piece in _pieces(f, size, self._piece_bytes):
                            yield (unit.index + r) % n, piece
            finally:
                os.remove(res["path"])  # machine-local spill
        for k in _COUNTERS:
            self._counters[k].inc(res[k])
        self._longest.update(res["longest_line"])

    def teardown(self):
        shutil.rmtree(self._tmp, ignore_errors=True)  # machine-local temporary folder


class _FramedRecordsSink(filebasedsink.FileBasedSink):
    """Beam's file sink for one output file whose elements are already TFRecord-framed
    records (length, CRCs): written unchanged into a temporary folder next to the output,
    then renamed into place by Beam. The folder's name carries the launcher's
    fileio.owner_tag() (`owner`), so that a later run removes the folder of a killed one."""

    def __init__(self, path: str, owner: str):
        super().__init__(
            path,
            coder=beam.coders.BytesCoder(),
            num_shards=1,
            shard_name_template="",
            compression_type=CompressionTypes.UNCOMPRESSED,
        )
        self._owner = owner

    def _create_temp_dir(self, file_path_prefix):
        # Beam's own name ends in a random id alone, which cannot tell a killed run's folder.
        folder, name = FileSystems.split(file_path_prefix)
        return FileSystems.join(folder, f"{_TEMP_PREFIX}{name}-{self._owner}-{uuid.uuid4().hex}")

    def write_encoded_record(self, file_handle, encoded_value):
        file_handle.write(encoded_value)


def _check_outputs(outputs: Sequence[str]) -> None:
    """The local builder's output checks for local paths; for other filesystems the same
    checks that need no folder (Beam creates what a remote path needs)."""
    local = [o for o in outputs if _is_local(o)]
    if len(local) < len(outputs) and len(set(outputs)) != len(outputs):
        raise pu.InputDataError(f"--output_file lists a file twice: {list(outputs)}")
    if local or not outputs:
        pu.check_outputs(local)  # also: "--output_file is empty"


def _temp_folders(outputs: Sequence[str], *, stale: bool) -> list[str]:
    """Beam's temporary folders of `outputs` (named by `_FramedRecordsSink`) that this
    process made (stale=False), or that killed runs of this host left (stale=True). On
    local disk the folders themselves; a remote filesystem lists only files, so there:
    the folders that hold one."""
    owner = "{owner}" if stale else re.escape(fileio.owner_tag())
    found = []
    for out in outputs:
        folder, name = FileSystems.split(out)
        pattern = FileSystems.join(folder, f"{_TEMP_PREFIX}{name}-*")
        if _is_local(out):
            paths = pu.LocalInputs.glob(pattern)
        else:
            matches = FileSystems.match([FileSystems.join(pattern, "*")])
            paths = [FileSystems.split(m.path)[0] for r in matches for m in r.metadata_list]
        by_name = {FileSystems.split(p)[1]: p for p in paths}
        regex = re.escape(f"{_TEMP_PREFIX}{name}-") + owner + r"-[0-9a-f]{32}"
        if stale:
            found += [by_name[n] for n in fileio.stale_names(by_name, regex)]
        else:
            found += [p for n, p in by_name.items() if re.fullmatch(regex, n)]
    return sorted(set(found))


def _remove_stale_spills(folder: str) -> None:
    """Removes the spill folders that killed runs and workers of this host left in
    `folder` (machine-local)."""
    for name in fileio.stale_names(os.listdir(folder), _SPILL_PATTERN):
        shutil.rmtree(os.path.join(folder, name), ignore_errors=True)  # machine-local


# What the worker processes of Beam's local runners run (multi_processing mode).
_SDK_WORKER_MODULE = b"apache_beam.runners.worker.sdk_worker_main"
_WORKER_PID = "worker-pid-"  # + pid: a file a worker process leaves in the run's folder

# Run at start-up by every Python process that a local runner starts while the pipeline
# runs (the run's folder comes first on their PYTHONPATH). A Ctrl-C in a terminal reaches the
# whole process group: the workers leave it to the launcher, which ends them itself, instead
# of each printing Python's KeyboardInterrupt report. A worker leaves its pid in the folder,
# since the shell that starts it dies of the Ctrl-C and the worker leaves the launcher's tree.
# Then the sitecustomize it stands in front of, if any, runs as it would have.
_WORKER_STARTUP = f"""\
import importlib.machinery, importlib.util, os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
_folder = os.path.dirname(os.path.abspath(__file__))
open(os.path.join(_folder, "{_WORKER_PID}%d" % os.getpid()), "w").close()
_path = [p for p in sys.path if os.path.abspath(p or ".") != _folder]
_spec = importlib.machinery.PathFinder.find_spec("sitecustomize", _path)
if _spec is not None:
    _spec.loader.exec_module(importlib.util.module_from_spec(_spec))
"""


def _is_worker(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:  # machine-local /proc
            return _SDK_WORKER_MODULE in f.read()
    except OSError:
        return False  # ended meanwhile


def _end_worker_processes(run_folder: str) -> None:
    """Kills the SDK worker processes that a local runner started under this process (when
    a signal stops the pipeline): its descendants, and the workers that left their pid in
    `run_folder`. Reads the machine-local /proc (Linux); elsewhere does nothing."""
    registered = [
        int(name[len(_WORKER_PID) :])
        for name in os.listdir(run_folder)  # machine-local temporary folder
        if name.startswith(_WORKER_PID) and name[len(_WORKER_PID) :].isdigit()
    ]
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:  # machine-local /proc
                    ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue  # ended meanwhile
            children.setdefault(ppid, []).append(int(entry))
    todo, found = list(children.get(os.getpid(), [])), set(registered)
    while todo:  # descendants: the runner starts each worker through a shell
        pid = todo.pop()
        todo += children.get(pid, [])
        found.add(pid)
    for pid in found:
        if _is_worker(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def _run_temp_folder():
    """While the pipeline runs: the temp folder of this process (tempfile) and of the worker
    processes it starts (TMPDIR) is a folder of this run's in the system temp folder,
    removed afterwards, whatever the outcome. So what Beam leaves there (DirectRunner's
    staging for its Prism attempt) and what local workers stopped by a signal leave (their
    spill folders) goes with it. Its name carries the owner tag: a later run removes the
    folder of a killed one. In the main thread (where the launcher handles signals) the
    Python processes started meanwhile also run _WORKER_STARTUP from it. Yields the folder."""
    base = tempfile.gettempdir()
    _remove_stale_spills(base)
    folder = tempfile.mkdtemp(prefix=f"{_SPILL_PREFIX}{fileio.owner_tag()}-")
    saved = {name: os.environ.get(name) for name in ("TMPDIR", "PYTHONPATH")}
    saved_tempdir = tempfile.tempdir
    tempfile.tempdir = os.environ["TMPDIR"] = folder
    if threading.current_thread() is threading.main_thread():
        with open(os.path.join(folder, "sitecustomize.py"), "w") as f:  # machine-local
            f.write(_WORKER_STARTUP)
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, (folder, saved["PYTHONPATH"])))
    stopped = False
    try:
        yield folder
    except (RunInterrupted, KeyboardInterrupt):
        stopped = True
        raise
    finally:
        # After a signal the process is ending, but the runner's threads may still be setting
        # up a worker: the temp folder stays pointed at this run's folder (removed below), so
        # a late worker fails there instead of leaving its spill folder in the system temp
        # folder. Otherwise the caller's temp folder comes back.
        if not stopped:
            tempfile.tempdir = saved_tempdir
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
        # A file may still appear in the folder as a stopped worker goes, or a spill folder
        # of this process (its owner tag) in the system temp folder.
        mine = re.compile(re.escape(f"{_SPILL_PREFIX}{fileio.owner_tag()}-") + r"\w+")
        for _ in range(3):
            shutil.rmtree(folder, ignore_errors=True)  # machine-local temporary folder
            for name in filter(mine.fullmatch, os.listdir(base) if os.path.isdir(base) else ()):
                shutil.rmtree(os.path.join(base, name), ignore_errors=True)  # machine-local
            if not os.path.exists(folder):
                break


class _MainThreadWrites:
    """A text stream that passes on the writes of the main thread alone (some of Beam's
    workers print the errors of a stopped bundle to sys.stderr themselves)."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        if threading.current_thread() is threading.main_thread():
            return self._stream.write(text)
        return len(text)

    def __getattr__(self, name):
        return getattr(self._stream, name)


@contextlib.contextmanager
def _quiet_once_stopped(run_folder: str):
    """While the pipeline runs: once SIGINT or SIGTERM arrives, the local SDK worker processes
    are ended (`_end_worker_processes(run_folder)`) and the log records of Beam and of the
    unit step are dropped (the errors of workers that the runner stops are a consequence of
    the stop, not news), then the handler in place acts (the scripts': RunInterrupted and
    one line, albert_tf/interrupts.py). The errors of the runner's threads
    (threading.excepthook) and what they print to sys.stderr are dropped likewise. Only in
    the main thread, and only over handlers of Python's; restored afterwards unless a signal
    came (then the runner's threads may report the stopped workers until the process
    leaves)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    stopped = threading.Event()
    previous = {s: signal.getsignal(s) for s in interrupts.SIGNALS}
    wrapped = {s: h for s, h in previous.items() if callable(h)}

    def on_signal(signum, frame):
        if not stopped.is_set():
            sys.stderr = _MainThreadWrites(sys.stderr)
        stopped.set()
        # Before the runner unwinds: it would let them finish their bundles, into folders
        # about to be removed.
        _end_worker_processes(run_folder)
        wrapped[signum](signum, frame)

    def keep(record: logging.LogRecord) -> bool:
        return not (stopped.is_set() and record.name.startswith(("apache_beam", __name__)))

    def report_thread_error(args) -> None:
        if not stopped.is_set():
            thread_error_hook(args)

    handlers = logging.getLogger().handlers
    for h in handlers:
        h.addFilter(keep)
    thread_error_hook, threading.excepthook = threading.excepthook, report_thread_error
    for s in wrapped:
        signal.signal(s, on_signal)
    try:
        yield
    finally:
        for s, h in wrapped.items():
            signal.signal(s, h)
        if not stopped.is_set():  # after a stop, the runner's threads report on until exit
            threading.excepthook = thread_error_hook
            for h in handlers:
                h.removeFilter(keep)


class _DropUserErrors(logging.Filter):
    """Drops the traceback that a runner logs for a step that raised our one-line bad-input
    error (the launcher reports it as one line); every other error keeps its log."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], UserError))


# The logger with which Beam's in-process runners log an exception raised in a step.
_STEP_ERROR_LOGGER = "apache_beam.runners.common"


def _user_error(err: UserError) -> pu.InputDataError:
    """The message of a bad-input error raised in a step, without the runner's
    " [while running '<step>']" suffixes."""
    return pu.InputDataError(re.sub(r" \[while running '[^']*'\]", "", str(err)))


def check_pipeline_args(pipeline_args: Sequence[str]) -> None:
    """Refuses (InputDataError, one line) what Beam would meet only once the pipeline runs,
    or drop with a warning: a value that Beam's option parser refuses, an unknown --runner,
    and an option that no options class of Beam's knows."""
    parser_said = io.StringIO()
    try:
        with contextlib.redirect_stderr(parser_said):  # Beam's argparse prints its usage
            given = PipelineOptions(list(pipeline_args)).get_all_options(
                retain_unknown_options=True
            )
    except SystemExit:
        lines = parser_said.getvalue().strip().splitlines() or ["not accepted"]
        reason = lines[-1].split("error: ", 1)[-1]
        raise pu.InputDataError(f"Beam pipeline options: {reason}") from None
    runner = given.get("runner")
    try:
        create_runner(runner)  # also imports the runner's module and its options classes
    except (ValueError, ImportError) as e:
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise pu.InputDataError(f"--runner={runner}: {reason}") from None
    unknown = sorted(set(given) - set(PipelineOptions([]).get_all_options()))
    if unknown:
        names = ", ".join(f"--{u}" for u in unknown)
        raise pu.InputDataError(
            f"{names}: neither a flag of create_pretraining_data (--help) nor an option of "
            "Apache Beam's pipeline options"
        )


def build_pipeline(
    pipeline: beam.Pipeline,
    units: Sequence[pu.Unit],
    settings: pu.Settings,
    outputs: Sequence[str],
    piece_bytes: int = PIECE_BYTES,
) -> None:
    """Adds the steps: units -> (output index, piece) -> one file sink per output."""
    pieces = (
        pipeline
        | "Units" >> beam.Create(list(units))
        | "Spread units" >> beam.Reshuffle()  # not fused with Create: units spread over workers
        | "Build units" >> beam.ParDo(_BuildUnit(settings, piece_bytes))
    )
    per_output = pieces | "By output" >> beam.Partition(lambda kv, n: kv[0], len(outputs))
    for i, out in enumerate(outputs):
        (
            per_output[i]
            | f"Pieces {i}" >> beam.Values()
            | f"Write {i}" >> beam.io.Write(_FramedRecordsSink(out, fileio.owner_tag()))
        )


def create_pretraining_data_beam(
    input_file: str,
    output_file: str | Sequence[str],
    config: pi.MaskingConfig,
    *,
    pipeline_args: Sequence[str],
    vocab_file: str | None = None,
    spm_model_file: str | None = None,
    do_lower_case: bool = True,
    digit_comma: str = tokenization.DEFAULT_DIGIT_COMMA,
    dupe_factor: int = 40,
    random_seed: int = 12345,
    chunk_size_mb: float = pu.DEFAULT_CHUNK_SIZE_MB,
    piece_bytes: int = PIECE_BYTES,
) -> dict:
    """The local builder (`create_pretraining_data.create_pretraining_data`) as a Beam
    pipeline (`pipeline_args`: Beam's pipeline options, --runner among them); runs it to the
    end and returns the same stats (longest line without its file). Bad flags and inputs
    that can be known up front (flags, globs, folders, the plan of units) raise
    InputDataError before the pipeline starts; a bad unit (invalid UTF-8, a file without
    documents) raises the local builder's error once the runner reports it. Then no output
    file exists (on runners in this process; a remote job that fails is reported by the
    runner)."""
    outputs, files, units = pu.plan(
        input_file,
        output_file,
        config,
        vocab_file=vocab_file,
        spm_model_file=spm_model_file,
        digit_comma=digit_comma,
        dupe_factor=dupe_factor,
        chunk_size_mb=chunk_size_mb,
        inputs=BeamInputs,
        check_outputs=_check_outputs,
    )
    logger.info(
        "%d input file(s) -> %d unit(s), %d output file(s), Beam pipeline options %s",
        len(files),
        len(units),
        len(outputs),
        list(pipeline_args),
    )
    settings = pu.Settings(
        vocab_file,
        spm_model_file,
        do_lower_case,
        digit_comma,
        config,
        dupe_factor,
        random_seed,
        tmp_dir="",  # each worker makes its own
        num_shards=len(outputs),
        inputs=BeamInputs,
    )
    stale = _temp_folders(outputs, stale=True)
    if stale:
        FileSystems.delete(stale)
        logger.info("removed %d temporary folder(s) of killed runs: %s", len(stale), stale)
    t0 = time.time()
    ok = False
    result = None
    drop_user_errors = _DropUserErrors()
    logging.getLogger(_STEP_ERROR_LOGGER).addFilter(drop_user_errors)
    try:
        with _run_temp_folder() as run_folder, _quiet_once_stopped(run_folder):
            pipeline = beam.Pipeline(options=PipelineOptions(list(pipeline_args)))
            build_pipeline(pipeline, units, settings, outputs, piece_bytes)
            result = pipeline.run()
            result.wait_until_finish()
        stats = _stats(result, len(units))
        try:
            pu.check_totals(stats, input_file, len(files), config, None)
        except pu.InputDataError:
            FileSystems.delete([o for o in outputs if FileSystems.exists(o)])
            raise
        ok = True
    except UserError as e:
        raise _user_error(e) from None
    finally:
        logging.getLogger(_STEP_ERROR_LOGGER).removeFilter(drop_user_errors)
        if not ok:
            if result is not None and not PipelineState.is_terminal(result.state):
                result.cancel()  # a job on a remote engine that outlived its launcher's wait
            own = _temp_folders(outputs, stale=False)
            if own:
                FileSystems.delete(own)
    stats["seconds"] = time.time() - t0
    pu.log_summary(stats, len(outputs), logger)
    return stats


def _stats(result, num_units: int) -> dict:
    """The local builder's stats from the runner's committed metrics."""
    metrics = result.metrics().query(MetricsFilter().with_namespace(_METRICS_NAMESPACE))
    stats = dict.fromkeys(_COUNTERS, 0)
    stats["longest_line"] = 0
    for c in metrics["counters"]:
        stats[c.key.metric.name] += c.committed or 0
    for d in metrics["distributions"]:
        if d.committed is not None:
            stats["longest_line"] = max(stats["longest_line"], d.committed.max or 0)
    stats["units"] = num_units
    return stats
