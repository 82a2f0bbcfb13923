"""The Beam pipeline of the pretraining-data builder (albert_tf/data/beam_pipeline.py) on Beam's
in-process runner: the local builder's records byte for byte, its shard rule, the local
builder's one-line errors, and the package without Beam."""

import glob
import io
import os
import re
import shutil
import subprocess
import sys

import pytest

import albert_tf.data
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


def test_split_pipeline_args():
    argv = ["prog", "--input_file=a", "--runner", "DataflowRunner", "--project=p", "--region=r"]
    assert cpd.split_pipeline_args(argv) == (argv[:4], ["--project=p", "--region=r"])
    argv = ["prog", "--input_file=a", "--runner=FlinkRunner", "--flink_master=h:8081"]
    assert cpd.split_pipeline_args(argv) == (argv[:3], ["--flink_master=h:8081"])
    assert cpd.split_pipeline_args(["prog", "--input_file=a"]) == (["prog", "--input_file=a"], [])


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
