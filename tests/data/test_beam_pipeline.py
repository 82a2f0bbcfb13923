"""The Beam pipeline of the pretraining-data builder (albert_tf/data/beam_pipeline.py) on
Beam's local runners (FnApiRunner; DirectRunner in_memory, multi_threading and
multi_processing): the local builder's records byte for byte, its shard rule, workers that need
nothing of the launcher's paths, the local builder's one-line errors, the command line's flags
and Beam's options, SIGINT/SIGTERM and a kill, and the package without Beam."""

import glob
import io
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

import pytest

import albert_tf.data
from albert_tf import fileio
from albert_tf.data import create_pretraining_data as cpd
from albert_tf.data import pretraining_instances as pi
from albert_tf.data import pretraining_units as pu
from albert_tf.data import tokenization

from repo_paths import REPO_ROOT

ROOT = REPO_ROOT
SPM = os.path.join(ROOT, "data", "demo", "spm.model")
DEMO = os.path.join(ROOT, "data", "demo", "corpus", "part-00000.txt")
# Beam's in-process runner (DirectRunner may first try to download the Prism runner).
RUNNER = ["--runner=FnApiRunner", "--direct_num_workers=1"]
SMALL = ["--max_seq_length=64", "--max_predictions_per_seq=8", "--dupe_factor=1"]

pytestmark = pytest.mark.skipif(not os.path.exists(DEMO), reason="demo corpus not generated")


@pytest.fixture
def beam_pipeline():
    pytest.importorskip("apache_beam", reason="the beam extra is not installed (.[beam])")
    from albert_tf.data import beam_pipeline

    return beam_pipeline


def _split_records(data):
    """TFRecord-framed bytes -> the records, framing and CRCs included."""
    records, pos = [], 0
    while pos < len(data):
        end = pos + 16 + int.from_bytes(data[pos : pos + 8], "little")
        records.append(data[pos:end])
        pos = end
    assert pos == len(data)
    return records


def _framed_records(path):
    with open(path, "rb") as f:
        return _split_records(f.read())


def _main(*args):
    from absl import flags

    flags.FLAGS.unparse_flags()
    return cpd.main(["create_pretraining_data", f"--spm_model_file={SPM}", *SMALL, *args])


def test_demo_corpus_gives_the_local_builders_records(tmp_path, beam_pipeline):
    local = [str(tmp_path / f"local-{i}.tfrecord") for i in range(2)]
    beam = [str(tmp_path / f"beam-{i}.tfrecord") for i in range(2)]
    assert _main(f"--input_file={DEMO}", f"--output_file={','.join(local)}", "--num_workers=1") == 0
    assert _main(f"--input_file={DEMO}", f"--output_file={','.join(beam)}", *RUNNER) == 0
    assert sorted(os.listdir(tmp_path)) == sorted(os.path.basename(p) for p in local + beam)
    local_records = sorted(r for p in local for r in _framed_records(p))
    beam_records = sorted(r for p in beam for r in _framed_records(p))
    assert len(local_records) > 1000 and beam_records == local_records
    # One unit: its record k goes to file k mod 2 in both builders.
    for beam_file, local_file in zip(beam, local):
        assert sorted(_framed_records(beam_file)) == sorted(_framed_records(local_file))


def _unit_groups(units, settings):
    """For each unit, its records grouped by k mod N (the local builder's own function)."""
    worker = pu.unit_worker(settings)
    groups = []
    for unit in units:
        res = pu.process_unit(unit, worker)
        with open(res["path"], "rb") as f:
            data = f.read()
        os.remove(res["path"])
        cut = [0]
        for size in res["sizes"]:
            cut.append(cut[-1] + size)
        groups.append([data[a:b] for a, b in zip(cut, cut[1:])])
    return groups


def test_units_of_a_large_file_give_the_local_builders_records_in_mixed_shards(
    tmp_path, beam_pipeline
):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    shutil.copy(DEMO, corpus / "a.txt")  # 270 kB: five units of 0.06 MiB or more
    with open(DEMO, "rb") as src, open(corpus / "b.txt", "wb") as dst:
        dst.write(src.read(30_000).rsplit(b"\n\n", 1)[0] + b"\n")  # one unit
    config = pi.MaskingConfig(max_seq_length=64, max_predictions_per_seq=8)
    flags = dict(spm_model_file=SPM, dupe_factor=1, random_seed=7, chunk_size_mb=0.06)
    pattern = str(corpus / "*.txt")
    local = [str(tmp_path / f"local-{i}.tfrecord") for i in range(3)]
    beam = [str(tmp_path / f"beam-{i}.tfrecord") for i in range(3)]
    local_stats = cpd.create_pretraining_data(pattern, local, config, num_workers=1, **flags)
    beam_stats = beam_pipeline.create_pretraining_data_beam(
        pattern, beam, config, pipeline_args=RUNNER, piece_bytes=20_000, **flags
    )
    assert local_stats["units"] == beam_stats["units"] == 6
    for k in ("documents", "instances", "tokens", "masked"):
        assert beam_stats[k] == local_stats[k], k
    local_records = sorted(r for p in local for r in _framed_records(p))
    assert sorted(r for p in beam for r in _framed_records(p)) == local_records
    # Unit u sends its records k to file (u + k) mod 3: each file mixes all units.
    files = pu.resolve_input_files(pattern)
    units = pu.plan_units(files, int(0.06 * (1 << 20)))
    settings = pu.Settings(  # the flags above
        None, SPM, True, tokenization.DEFAULT_DIGIT_COMMA, config, 1, 7, str(tmp_path), 3
    )
    expected = [[] for _ in range(3)]
    for unit, groups in zip(units, _unit_groups(units, settings)):
        for r, group in enumerate(groups):
            assert group
            expected[(unit.index + r) % 3] += _split_records(group)
    for i in range(3):
        assert sorted(_framed_records(beam[i])) == sorted(expected[i])
    assert sorted(os.listdir(tmp_path)) == sorted(
        ["corpus"] + [os.path.basename(p) for p in local + beam]
    )


@pytest.mark.parametrize(
    "case", ["empty glob", "undecodable file", "no documents", "no instance in any unit"]
)
def test_bad_input_gives_the_local_builders_error_and_no_output(
    tmp_path, case, capsys, beam_pipeline, monkeypatch
):
    (tmp_path / "bad.txt").write_bytes(b"one sentence.\nbad \xff byte.\n\nnext document.\n")
    (tmp_path / "blank.txt").write_bytes(b"\n\n\n")
    # Lines of characters that SentencePiece drops, in several units: no document anywhere.
    (tmp_path / "dropped.txt").write_text("\u200b\n\u200b\n\n" * 4000)
    inputs, *extra = {
        "empty glob": [str(tmp_path / "none-*.txt")],
        "undecodable file": [str(tmp_path / "bad.txt")],
        "no documents": [str(tmp_path / "blank.txt")],
        "no instance in any unit": [str(tmp_path / "dropped.txt"), "--chunk_size_mb=0.004"],
    }[case]
    out = str(tmp_path / "out.tfrecord")
    args = [f"--input_file={inputs}", f"--output_file={out}", *extra]
    assert _main(*args, "--num_workers=1") == 1
    local_error = capsys.readouterr().err.strip().splitlines()[-1]
    if case == "empty glob":  # known up front: no pipeline is built
        monkeypatch.setattr(beam_pipeline, "build_pipeline", None)
    assert _main(*args, *RUNNER) == 1
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [local_error] and "Traceback" not in err
    # No output, nor Beam's temporary folders.
    assert sorted(os.listdir(tmp_path)) == ["bad.txt", "blank.txt", "dropped.txt"]


def _memory_filesystem():
    """A Beam filesystem for `memtest://` paths, held in this process (a stand-in for gs://:
    no folders, objects named by their full path)."""
    from apache_beam.io.filesystem import FileMetadata, FileSystem

    class MemoryFileSystem(FileSystem):
        files: dict = {}

        @classmethod
        def scheme(cls):
            return "memtest"

        def join(self, basepath, *paths):
            return "/".join([basepath.rstrip("/"), *paths])

        def split(self, path):
            head, _, tail = path.rstrip("/").rpartition("/")
            return head, tail

        def mkdirs(self, path):
            pass

        def has_dirs(self):
            return False

        def _list(self, dir_or_prefix):
            for path, data in list(self.files.items()):
                if path.startswith(dir_or_prefix):
                    yield FileMetadata(path, len(data), 0.0)

        def create(self, path, mime_type=None, compression_type=None):
            files = self.files

            class Writer(io.BytesIO):
                def close(self):
                    files[path] = self.getvalue()
                    super().close()

            return Writer()

        def open(self, path, mime_type=None, compression_type=None):
            return io.BytesIO(self.files[path])

        def copy(self, source_file_names, destination_file_names):
            for src, dst in zip(source_file_names, destination_file_names):
                self.files[dst] = self.files[src]

        def rename(self, source_file_names, destination_file_names):
            for src, dst in zip(source_file_names, destination_file_names):
                self.files[dst] = self.files.pop(src)

        def exists(self, path):
            return path in self.files or any(
                p.startswith(path.rstrip("/") + "/") for p in self.files
            )

        def size(self, path):
            return len(self.files[path])

        def last_updated(self, path):
            return 0.0

        def checksum(self, path):
            return str(len(self.files[path]))

        def metadata(self, path):
            return FileMetadata(path, len(self.files[path]), 0.0)

        def delete(self, paths):
            for path in paths:
                for p in list(self.files):
                    if p == path or p.startswith(path.rstrip("/") + "/"):
                        del self.files[p]

    return MemoryFileSystem


def test_corpus_and_outputs_on_another_beam_filesystem(tmp_path, beam_pipeline):
    memory = _memory_filesystem()
    with open(DEMO, "rb") as f:
        text = f.read()
    (tmp_path / "a.txt").write_bytes(text)
    memory.files = {"memtest://bucket/corpus/a.txt": text}
    config = pi.MaskingConfig(max_seq_length=64, max_predictions_per_seq=8)
    flags = dict(spm_model_file=SPM, dupe_factor=1, chunk_size_mb=0.06)
    local = [str(tmp_path / f"local-{i}.tfrecord") for i in range(2)]
    remote = [f"memtest://bucket/out/train-{i}.tfrecord" for i in range(2)]
    cpd.create_pretraining_data(str(tmp_path / "*.txt"), local, config, num_workers=1, **flags)
    stats = beam_pipeline.create_pretraining_data_beam(
        "memtest://bucket/corpus/*.txt", remote, config, pipeline_args=RUNNER, **flags
    )
    assert stats["units"] == 5
    assert sorted(memory.files) == ["memtest://bucket/corpus/a.txt", *remote]  # no temporaries
    local_records = sorted(r for p in local for r in _framed_records(p))
    assert sorted(r for p in remote for r in _split_records(memory.files[p])) == local_records
    # A bad unit: the local builder's error with this path and line, no output, no temporaries.
    memory.files = {
        "memtest://bucket/corpus/a.txt": text,
        "memtest://bucket/corpus/b.txt": b"x\n\xff\n",
    }
    with pytest.raises(pu.InputDataError) as err:
        beam_pipeline.create_pretraining_data_beam(
            "memtest://bucket/corpus/*.txt", remote, config, pipeline_args=RUNNER, **flags
        )
    assert str(err.value).startswith("memtest://bucket/corpus/b.txt:2: invalid UTF-8 byte b'\\xff'")
    assert sorted(memory.files) == [
        "memtest://bucket/corpus/a.txt",
        "memtest://bucket/corpus/b.txt",
    ]


def test_runner_without_beam_is_a_one_line_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "apache_beam", None)  # import fails as if not installed
    monkeypatch.delitem(sys.modules, "albert_tf.data.beam_pipeline", raising=False)
    monkeypatch.delattr(albert_tf.data, "beam_pipeline", raising=False)
    out = tmp_path / "out.tfrecord"
    assert _main(f"--input_file={DEMO}", f"--output_file={out}", "--runner=DirectRunner") == 1
    assert capsys.readouterr().err == (
        "create_pretraining_data: error: --runner=DirectRunner: Apache Beam is not installed "
        "(pip install -e '.[beam]')\n"
    )
    assert os.listdir(tmp_path) == []


def test_split_pipeline_args_takes_our_flags_wherever_they_stand():
    argv = ["prog", "--input_file=a", "--runner", "DataflowRunner", "--project=p", "--region=r"]
    assert cpd.split_pipeline_args(argv) == (argv[:4], ["--project=p", "--region=r"])
    argv = [
        "prog",
        "--runner=FlinkRunner",
        "--flink_master",
        "h:8081",
        "--output_file",
        "o.tfrecord",
        "--save_main_session",
        "--nodo_lower_case",
        "-dupe_factor=2",
        "--write_unmasked",
        "--max_seq_length=64",
    ]
    assert cpd.split_pipeline_args(argv) == (
        [
            "prog",
            "--runner=FlinkRunner",
            "--output_file",
            "o.tfrecord",
            "--nodo_lower_case",
            "-dupe_factor=2",
            "--write_unmasked",
            "--max_seq_length=64",
        ],
        ["--flink_master", "h:8081", "--save_main_session"],
    )
    # Without --runner every argument is ours: the flags parser names what is not.
    argv = ["prog", "--input_file=a", "--project=p"]
    assert cpd.split_pipeline_args(argv) == (argv, [])


def test_only_the_beam_module_imports_beam():
    sources = glob.glob(os.path.join(ROOT, "albert_tf", "**", "*.py"), recursive=True)
    importing = sorted(
        os.path.relpath(p, ROOT)
        for p in sources
        if re.search(r"^\s*(import|from) apache_beam", open(p).read(), re.M)
    )
    assert importing == [os.path.join("albert_tf", "data", "beam_pipeline.py")]
    code = (
        "import sys; import albert_tf.data.create_pretraining_data; "
        "print(sorted(m for m in sys.modules if m.startswith('apache_beam')))"
    )
    env = dict(os.environ, PYTHONPATH=ROOT)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stderr


def test_an_output_that_is_the_corpus_is_refused_before_any_pipeline(
    tmp_path, capsys, beam_pipeline, monkeypatch
):
    corpus = tmp_path / "c.txt"
    corpus.write_text("one sentence.\nanother one.\n\nnext document.\n")
    monkeypatch.setattr(beam_pipeline, "build_pipeline", None)
    assert _main(f"--input_file={corpus}", f"--output_file={corpus}", *RUNNER) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0]
    assert f"error: --output_file={corpus} is an input of this run (--input_file=" in err[0]
    assert corpus.read_text() == "one sentence.\nanother one.\n\nnext document.\n"
    assert os.listdir(tmp_path) == ["c.txt"]


# ---------------------------------------------------------------------------------------------
# Every local runner mode; workers that need nothing of the launching machine's temp folder
# ---------------------------------------------------------------------------------------------

# Beam's local runners and modes, each with two workers where the mode has workers.
MODES = {
    "FnApiRunner": ["--runner=FnApiRunner"],
    **{
        mode: [
            "--runner=DirectRunner",
            f"--direct_running_mode={mode}",
            "--direct_num_workers=2",
        ]
        for mode in ("in_memory", "multi_threading", "multi_processing")
    },
}
CONFIG = pi.MaskingConfig(max_seq_length=64, max_predictions_per_seq=8)
# Environment of a launcher run as a command here: no network (see `offline_direct_runner`).
# Its download of Prism goes to a closed port of 127.0.0.1; gRPC between the runner and its
# workers stays direct.
OFFLINE = {
    **dict.fromkeys(["https_proxy", "HTTPS_PROXY"], "http://127.0.0.1:9"),
    **dict.fromkeys(["no_proxy", "NO_PROXY"], "localhost,127.0.0.1"),
}


@pytest.fixture
def offline_direct_runner(monkeypatch, beam_pipeline):
    """DirectRunner first tries Beam's Prism runner, which it downloads from GitHub, and runs
    the pipeline itself when that fails. Tests talk only to 127.0.0.1: the attempt fails at
    once, as on a machine without network."""
    from apache_beam.runners.portability import prism_runner

    def no_prism(self, pipeline, options):
        raise RuntimeError("Prism cannot be downloaded here")

    monkeypatch.setattr(prism_runner.PrismRunner, "run_pipeline", no_prism)


@pytest.fixture
def own_temp_folder(tmp_path, monkeypatch):
    """This process's temp folder (tempfile and TMPDIR): an empty folder of the test's."""
    folder = tmp_path / "system-tmp"
    folder.mkdir()
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setattr(tempfile, "tempdir", None)
    return folder


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    """name -> (input pattern, builder flags, number of outputs, the local builder's records):
    the demo corpus (one unit) and a corpus of six units in two files."""
    root = tmp_path_factory.mktemp("corpora")
    multi = root / "multi-unit"
    multi.mkdir()
    shutil.copy(DEMO, multi / "a.txt")  # 270 kB: five units of 0.06 MiB or more
    with open(DEMO, "rb") as src, open(multi / "b.txt", "wb") as dst:
        dst.write(src.read(30_000).rsplit(b"\n\n", 1)[0] + b"\n")  # one unit
    found = {}
    for name, pattern, flags, n in (
        ("demo", DEMO, dict(spm_model_file=SPM, dupe_factor=1), 2),
        ("multi-unit", str(multi / "*.txt"), dict(spm_model_file=SPM, chunk_size_mb=0.06), 3),
    ):
        flags = dict(flags, dupe_factor=1, random_seed=7)
        local = [str(root / f"{name}-local-{i}.tfrecord") for i in range(n)]
        stats = cpd.create_pretraining_data(pattern, local, CONFIG, num_workers=1, **flags)
        assert stats["units"] == (1 if name == "demo" else 6)
        records = sorted(r for p in local for r in _framed_records(p))
        found[name] = (pattern, flags, n, records)
    return found


@pytest.mark.parametrize("corpus", ["demo", "multi-unit"])
@pytest.mark.parametrize("mode", list(MODES))
def test_every_local_runner_mode_gives_the_local_builders_records(
    mode, corpus, corpora, tmp_path, beam_pipeline, offline_direct_runner, own_temp_folder
):
    pattern, flags, n, local_records = corpora[corpus]
    outputs = [str(tmp_path / f"beam-{i}.tfrecord") for i in range(n)]
    beam_pipeline.create_pretraining_data_beam(
        pattern, outputs, CONFIG, pipeline_args=MODES[mode], piece_bytes=20_000, **flags
    )
    assert sorted(r for p in outputs for r in _framed_records(p)) == local_records
    assert sorted(os.listdir(tmp_path)) == sorted(["system-tmp", *map(os.path.basename, outputs)])
    assert os.listdir(own_temp_folder) == []  # the workers' spills, Beam's staging: all gone


@pytest.mark.parametrize("mode", ["FnApiRunner", "multi_processing"])
def test_workers_need_nothing_of_the_launching_machines_temp_folder(
    mode, corpora, tmp_path, monkeypatch, beam_pipeline, offline_direct_runner
):
    """The SentencePiece model is given from the launcher's temp folder, which is removed
    once the pipeline is built, before it runs; from then on the process (and the worker
    processes it starts) has another temp folder, as a worker on another machine would."""
    pattern, flags, n, local_records = corpora["multi-unit"]
    launcher_tmp, worker_tmp = tmp_path / "launcher-tmp", tmp_path / "worker-tmp"
    launcher_tmp.mkdir()
    worker_tmp.mkdir()
    shutil.copy(SPM, launcher_tmp / "spm.model")
    monkeypatch.setenv("TMPDIR", str(launcher_tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)
    build_pipeline = beam_pipeline.build_pipeline

    def build_then_lose_the_temp_folder(*args, **kwargs):
        build_pipeline(*args, **kwargs)
        shutil.rmtree(launcher_tmp)
        os.environ["TMPDIR"] = str(worker_tmp)  # monkeypatch restores it
        tempfile.tempdir = None

    monkeypatch.setattr(beam_pipeline, "build_pipeline", build_then_lose_the_temp_folder)
    outputs = [str(tmp_path / f"beam-{i}.tfrecord") for i in range(n)]
    flags = dict(flags, spm_model_file=str(launcher_tmp / "spm.model"))
    beam_pipeline.create_pretraining_data_beam(
        pattern, outputs, CONFIG, pipeline_args=MODES[mode], **flags
    )
    assert not launcher_tmp.exists()
    assert sorted(r for p in outputs for r in _framed_records(p)) == local_records
    assert os.listdir(worker_tmp) == []


def test_portable_runner_against_beams_job_server_on_this_machine(
    tmp_path, corpora, beam_pipeline, own_temp_folder
):
    """PortableRunner submits the pipeline to a job server: Beam's own (Python, no download),
    serving on this machine; it runs the workers through the launcher (LOOPBACK)."""
    import time

    port_file = tmp_path / "server" / "port"
    server = subprocess.Popen(
        [sys.executable, "-m", "apache_beam.runners.portability.local_job_service_main"]
        + [f"--port_file={port_file}"],
        env=dict(os.environ, TMPDIR=str(tmp_path / "server"), **OFFLINE),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not port_file.exists():  # the server writes it (by a rename) once it serves
            assert server.poll() is None and time.monotonic() < deadline, "no job server"
            time.sleep(0.05)
        port = int(port_file.read_text())
        pattern, flags, n, local_records = corpora["multi-unit"]
        outputs = [str(tmp_path / f"beam-{i}.tfrecord") for i in range(n)]
        args = [
            "--runner=PortableRunner",
            f"--job_endpoint=localhost:{port}",
            "--environment_type=LOOPBACK",
        ]
        beam_pipeline.create_pretraining_data_beam(
            pattern, outputs, CONFIG, pipeline_args=args, **flags
        )
    finally:
        server.terminate()
        server.wait()
    assert sorted(r for p in outputs for r in _framed_records(p)) == local_records
    assert os.listdir(own_temp_folder) == []


# ---------------------------------------------------------------------------------------------
# The command line: flags, runners and Beam's options
# ---------------------------------------------------------------------------------------------


def test_our_flags_after_the_runner_are_ours(
    tmp_path, corpora, beam_pipeline, offline_direct_runner, own_temp_folder
):
    out = tmp_path / "out.tfrecord"
    assert (
        _main(
            "--runner=DirectRunner",
            f"--output_file={out}",
            "--direct_running_mode=multi_threading",
            f"--input_file={DEMO}",
            "--direct_num_workers=2",
            "--random_seed=7",
        )
        == 0
    )
    assert sorted(_framed_records(out)) == corpora["demo"][3]
    assert os.listdir(own_temp_folder) == []


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--runner=BogusRunner"],
            "--runner=BogusRunner: Unexpected pipeline runner: BogusRunner. Valid values are ",
        ),
        (
            ["--runner=FnApiRunner", "--direct_num_workrs=2", "--project", "p"],
            "--direct_num_workrs: neither a flag of create_pretraining_data (--help) nor an "
            "option of Apache Beam's pipeline options",
        ),
        (
            ["--direct_num_workers=two", "--runner=DirectRunner"],
            "Beam pipeline options: argument --direct_num_workers: invalid int value: 'two'",
        ),
        (
            ["--runner=DirectRunner", "--direct_running_mode=threads"],
            "Beam pipeline options: argument --direct_running_mode: invalid choice: 'threads'",
        ),
    ],
)
def test_a_bad_runner_or_beam_option_is_one_line_before_any_work(
    tmp_path, args, message, capsys, beam_pipeline, monkeypatch
):
    monkeypatch.setattr(beam_pipeline, "create_pretraining_data_beam", None)
    out = tmp_path / "out.tfrecord"
    assert _main(f"--input_file={DEMO}", f"--output_file={out}", *args) == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert err.startswith(f"create_pretraining_data: error: {message}")
    assert os.listdir(tmp_path) == []


# ---------------------------------------------------------------------------------------------
# SIGINT, SIGTERM and a kill during a Beam build
# ---------------------------------------------------------------------------------------------


def _start_build(tmp_path, mode):
    """The command line building the four demo files (20 units of 0.06 MiB, 40 passes: far
    from done when its first unit starts) on runner `mode`, with its own temp folder.
    Returns (process, its output folder, its temp folder)."""
    out, tmp = tmp_path / "out", tmp_path / "system-tmp"
    out.mkdir(exist_ok=True)
    tmp.mkdir(exist_ok=True)
    corpus = os.path.join(os.path.dirname(DEMO), "part-*.txt")
    outputs = ",".join(str(out / f"train-{i}.tfrecord") for i in range(2))
    env = dict(os.environ, PYTHONPATH=ROOT, TMPDIR=str(tmp), **OFFLINE)
    cmd = [sys.executable, "-m", "albert_tf.data.create_pretraining_data"]
    cmd += [f"--input_file={corpus}", f"--output_file={outputs}", f"--spm_model_file={SPM}"]
    cmd += ["--max_seq_length=64", "--max_predictions_per_seq=8", "--chunk_size_mb=0.06"]
    proc = subprocess.Popen(
        [*cmd, "--dupe_factor=40", *MODES[mode]],
        env=env,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        start_new_session=True,  # a process group of its own, as a terminal gives a command
    )
    return proc, out, tmp


def _wait_for_a_unit(proc) -> list[str]:
    """Reads the build's log until a unit has started (the unit step says so); its lines."""
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if re.search(r"unit \d+: .* started", line):
            return lines
    raise AssertionError("the build ended before a unit started:\n" + "".join(lines))


@pytest.mark.parametrize(
    "mode, signum, whole_group",
    [
        ("in_memory", signal.SIGTERM, False),
        ("multi_threading", signal.SIGINT, False),
        ("multi_processing", signal.SIGINT, False),
        ("multi_processing", signal.SIGTERM, False),
        # Ctrl-C in a terminal: every process of the group, Beam's workers too.
        ("multi_processing", signal.SIGINT, True),
        ("multi_threading", signal.SIGINT, True),
    ],
)
def test_a_signal_stops_a_beam_build_with_one_line_and_leaves_nothing(
    tmp_path, mode, signum, whole_group, beam_pipeline
):
    proc, out, tmp = _start_build(tmp_path, mode)
    try:
        _wait_for_a_unit(proc)
        if whole_group:
            os.killpg(proc.pid, signum)
        else:
            proc.send_signal(signum)
        rest = proc.stderr.read()
        assert proc.wait(timeout=60) == 128 + signum
    finally:
        proc.kill()
        proc.wait()
    assert "Traceback" not in rest and "ERROR" not in rest, rest
    assert rest.splitlines()[-1] == (
        f"create_pretraining_data.py: interrupted by {signal.Signals(signum).name}; no partial "
        "output was left: run the same command again to redo what was cut short"
    )
    assert os.listdir(out) == []  # neither outputs nor Beam's beam-temp-* folders
    assert os.listdir(tmp) == []


def test_a_rerun_removes_what_a_killed_build_left(
    tmp_path, corpora, beam_pipeline, own_temp_folder
):
    """A build killed with SIGKILL (nothing of it can clean up) leaves its temp folder; the
    next build removes it, and Beam's folders of outputs of killed runs of this host, but
    not a folder of the same prefix that no run of ours made."""
    proc, out, tmp = _start_build(tmp_path, "multi_threading")
    try:
        _wait_for_a_unit(proc)
    finally:
        proc.kill()
        proc.wait()
    left = os.listdir(tmp)
    assert left and all(
        n.startswith(f"albert_tf-beam-{fileio.owner_tag().rsplit('-', 1)[0]}-") for n in left
    )
    dead = f"{fileio.owner_tag().rsplit('-', 1)[0]}-{proc.pid}"
    stale = out / f"beam-temp-train-0.tfrecord-{dead}-{'0' * 32}"
    foreign = out / f"beam-temp-train-0.tfrecord-{'1' * 32}"
    for folder in (stale, foreign):
        folder.mkdir(exist_ok=True)
        (folder / "piece").write_bytes(b"x")
    pattern, flags, n, local_records = corpora["demo"]
    outputs = [str(out / f"train-{i}.tfrecord") for i in range(n)]
    beam_pipeline.create_pretraining_data_beam(
        pattern, outputs, CONFIG, pipeline_args=MODES["FnApiRunner"], **flags
    )
    assert sorted(r for p in outputs for r in _framed_records(p)) == local_records
    assert sorted(os.listdir(out)) == sorted([foreign.name, *map(os.path.basename, outputs)])
    assert (foreign / "piece").read_bytes() == b"x"
    assert os.listdir(tmp) == []
