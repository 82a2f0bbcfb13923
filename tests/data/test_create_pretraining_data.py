"""End-to-end tests of the create_pretraining_data CLI: parsed output invariants, determinism
across worker counts, and every bad-input path (non-zero exit, no output files left)."""

import os
import random

import numpy as np
import pytest

from albert_tf.data import create_pretraining_data as cpd
from albert_tf.data import example_serialization as es
from albert_tf.data import pretraining_instances as pi
from albert_tf.errors import UserError

from instance_fixtures import write_documents
from repo_paths import REPO_ROOT

ROOT = REPO_ROOT
SPM = os.path.join(ROOT, "data", "demo", "spm.model")

pytestmark = pytest.mark.skipif(not os.path.exists(SPM), reason="demo spm.model not generated")


def _write_corpus(d, files=2, docs=60, seed=0):
    r = random.Random(seed)
    paths = []
    for k in range(files):
        p = d / f"part-{k}.txt"
        with open(p, "w", encoding="utf-8") as f:
            write_documents(f, r, docs, max_sentences=9, max_words=30)
        paths.append(p)
    return paths


def _run(tmp, *extra, out="out.tfrecord", inp=None):
    args = [
        "prog",
        f"--input_file={inp or str(tmp / 'part-*.txt')}",
        f"--output_file={','.join(str(tmp / o) for o in out.split(','))}",
        f"--spm_model_file={SPM}",
        "--max_seq_length=64",
        "--max_predictions_per_seq=8",
        "--dupe_factor=2",
        "--num_workers=1",
        *extra,
    ]
    from absl import flags

    flags.FLAGS.unparse_flags()
    return cpd.main(args)


def _records(path):
    import tensorflow as tf

    return [
        tf.train.Example.FromString(r)
        for r in tf.data.TFRecordDataset(str(path)).as_numpy_iterator()
    ]


def _leftovers(tmp):
    return sorted(p.name for p in tmp.iterdir() if p.suffix != ".txt")


def test_output_invariants(tmp_path):
    from albert_tf.data import tokenization

    _write_corpus(tmp_path)
    assert _run(tmp_path, out="a.tfrecord,b.tfrecord") == 0
    assert _leftovers(tmp_path) == ["a.tfrecord", "b.tfrecord"]  # temp files/dirs removed
    recs = _records(tmp_path / "a.tfrecord") + _records(tmp_path / "b.tfrecord")
    assert abs(len(_records(tmp_path / "a.tfrecord")) - len(_records(tmp_path / "b.tfrecord"))) <= 1
    tok = tokenization.FullTokenizer(spm_model_file=SPM)
    sp = tok.special_ids()
    labels = []
    for ex in recs:
        f = {
            k: np.array(v.int64_list.value or v.float_list.value)
            for k, v in ex.features.feature.items()
        }
        assert set(f) == set(es.FEATURE_NAMES_MASKED)
        assert f["input_ids"].shape == (64,) and f["masked_lm_ids"].shape == (8,)
        n = int(f["input_mask"].sum())
        assert (f["input_mask"][:n] == 1).all() and (f["input_mask"][n:] == 0).all()
        ids = f["input_ids"].astype(np.int64)
        assert (ids[n:] == 0).all() and ids[0] == sp["cls"] and ids[n - 1] == sp["sep"]
        seps = np.flatnonzero(ids[:n] == sp["sep"])
        assert len(seps) == 2
        la = seps[0] - 1
        seg = f["segment_ids"]
        assert (seg[: la + 2] == 0).all() and (seg[la + 2 : n] == 1).all() and (seg[n:] == 0).all()
        w = f["masked_lm_weights"]
        m = int(w.sum())
        assert (
            1 <= m <= min(8, max(1, round(n * 0.15))) and (w[:m] == 1).all() and (w[m:] == 0).all()
        )
        pos = f["masked_lm_positions"][:m].astype(np.int64)
        assert (
            (np.diff(pos) > 0).all() and pos.min() > 0 and pos.max() < n - 1 and la + 1 not in pos
        )
        assert (f["masked_lm_positions"][m:] == 0).all() and (f["masked_lm_ids"][m:] == 0).all()
        orig = ids.copy()
        orig[pos] = f["masked_lm_ids"][:m]
        pieces = tok.convert_ids_to_tokens(orig[:n])
        exp = [
            1 if i in (0, la + 1, n - 1) else int(pi.is_start_piece_sp(p))
            for i, p in enumerate(pieces)
        ]
        assert list(f["token_boundary"][:n]) == exp and (f["token_boundary"][n:] == 0).all()
        labels.append(int(f["next_sentence_labels"][0]))
    assert 0.35 < np.mean(labels) < 0.9


def test_deterministic_and_independent_of_workers(tmp_path):
    _write_corpus(tmp_path, files=3, docs=20)
    assert _run(tmp_path, out="w1.tfrecord") == 0
    assert _run(tmp_path, "--num_workers=2", out="w2.tfrecord") == 0
    assert _run(tmp_path, "--random_seed=7", out="s7.tfrecord") == 0
    a, b, c = ((tmp_path / n).read_bytes() for n in ("w1.tfrecord", "w2.tfrecord", "s7.tfrecord"))
    assert a == b and a != c


def test_chunked_units_are_deterministic(tmp_path):
    _write_corpus(tmp_path, files=1, docs=200)
    assert _run(tmp_path, "--chunk_size_mb=0.01", out="c1.tfrecord") == 0
    assert _run(tmp_path, "--chunk_size_mb=0.01", "--num_workers=2", out="c2.tfrecord") == 0
    assert (tmp_path / "c1.tfrecord").read_bytes() == (tmp_path / "c2.tfrecord").read_bytes()


def test_write_unmasked(tmp_path):
    _write_corpus(tmp_path, files=1, docs=20)
    assert _run(tmp_path, "--write_unmasked", out="u.tfrecord") == 0
    for ex in _records(tmp_path / "u.tfrecord"):
        assert set(ex.features.feature) == set(es.FEATURE_NAMES_UNMASKED)


@pytest.mark.parametrize(
    "case",
    [
        "missing_file",
        "glob_nothing",
        "empty_file",
        "bad_utf8",
        "short_seq",
        "max_pred",
        "prob",
        "permutation",
        "no_spm",
        "not_spm",
    ],
)
def test_errors_leave_no_outputs(tmp_path, case, capsys):
    _write_corpus(tmp_path, files=1, docs=5)
    extra, inp, expect = [], None, ""
    if case == "missing_file":
        inp, expect = str(tmp_path / "nope.txt"), "nope.txt"
    elif case == "glob_nothing":
        inp, expect = str(tmp_path / "zzz-*.txt"), "matches no file"
    elif case == "empty_file":
        (tmp_path / "part-9.txt").write_text("\n\n  \n")
        expect = "part-9.txt"
    elif case == "bad_utf8":
        with open(tmp_path / "part-5.txt", "wb") as f:
            f.write(b"good line\nsecond line\n\nbad \xff byte\n")
        expect = "part-5.txt:4"
    elif case == "short_seq":
        extra, expect = ["--max_seq_length=4"], "max_seq_length"
    elif case == "max_pred":
        extra = ["--max_predictions_per_seq=0"]
        expect = "error: --max_predictions_per_seq=0: expected an integer >= 1\n"
    elif case == "prob":
        extra, expect = ["--masked_lm_prob=1.5"], "masked_lm_prob"
    elif case == "permutation":
        extra, expect = ["--do_permutation"], "do_permutation"
    elif case == "no_spm":
        extra, expect = [f"--spm_model_file={tmp_path / 'missing.model'}"], "missing.model"
    elif case == "not_spm":
        (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\n")
        extra = [f"--spm_model_file={tmp_path / 'vocab.txt'}"]
        expect = f"error: --spm_model_file={tmp_path / 'vocab.txt'}: not a SentencePiece model"
    assert _run(tmp_path, *extra, inp=inp, out="x.tfrecord,y.tfrecord") == 1
    assert expect in capsys.readouterr().err
    assert _leftovers(tmp_path) == []


def test_an_output_file_in_a_read_only_folder_is_refused_before_any_work(
    tmp_path, read_only_folder
):
    # The library entry point too (the ablation studies call it without the CLI): the
    # second of two shards cannot be written, so nothing is read or written.
    _write_corpus(tmp_path, files=1, docs=5)
    bad = os.path.join(read_only_folder, "b.tfrecord")
    config = pi.MaskingConfig(max_seq_length=32, max_predictions_per_seq=5)
    expect = f"^--output_file={bad}: cannot write in {read_only_folder}: "
    with pytest.raises(UserError, match=expect):
        cpd.create_pretraining_data(
            str(tmp_path / "part-0.txt"),
            f"{tmp_path}/a.tfrecord, {bad}",
            config,
            spm_model_file=SPM,
            dupe_factor=1,
            num_workers=1,
        )
    assert _leftovers(tmp_path) == ["read_only"] and os.listdir(read_only_folder) == []


def test_cli_subprocess_exit_code(tmp_path):
    import subprocess
    import sys

    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "albert_tf.data.create_pretraining_data",
            f"--input_file={tmp_path / 'none.txt'}",
            f"--output_file={tmp_path / 'o'}",
            f"--spm_model_file={SPM}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 1 and "none.txt" in r.stderr and not os.path.exists(tmp_path / "o")


def test_digit_comma_flag(tmp_path):
    """Default: the pieces of the original under Python 3 ("50", "▁", "0", ","); --digit_comma=
    intended: the rule as written ("50", "0", ",")."""
    with open(tmp_path / "part-0.txt", "w", encoding="utf-8") as f:
        for d in range(12):
            f.write(f"sales were 3,500, in {1990 + d}.\nprices rose 4,5,6, then fell.\n\n")
    python3 = ["▁", "0", ","]
    for flag, expected in (((), True), (("--digit_comma=intended",), False)):
        assert _run(tmp_path, "--write_unmasked", *flag, out="u.tfrecord") == 0
        from albert_tf.data import tokenization

        tok = tokenization.FullTokenizer(spm_model_file=SPM)
        found = False
        for ex in _records(tmp_path / "u.tfrecord"):
            pieces = tok.convert_ids_to_tokens(ex.features.feature["input_ids"].int64_list.value)
            found |= any(pieces[i : i + 3] == python3 for i in range(len(pieces)))
        assert found == expected
    assert _run(tmp_path, "--digit_comma=py2", out="x.tfrecord") == 1


def _cli(tmp, out):
    import sys

    return [
        sys.executable,
        "-m",
        "albert_tf.data.create_pretraining_data",
        f"--input_file={tmp / 'part-*.txt'}",
        f"--output_file={out}",
        f"--spm_model_file={SPM}",
        "--max_seq_length=64",
        "--max_predictions_per_seq=8",
        "--dupe_factor=20",
        "--num_workers=1",
    ]


def test_killed_run_leaves_nothing_after_the_next_run(tmp_path):
    """SIGKILL mid-way leaves the temporary folder and shard; the next run removes them and
    writes the same bytes as a clean run."""
    import signal
    import subprocess
    import time

    _write_corpus(tmp_path, files=1, docs=300)
    clean, killed = tmp_path / "clean", tmp_path / "killed"
    clean.mkdir(), killed.mkdir()
    assert (
        subprocess.run(
            _cli(tmp_path, clean / "out.tfrecord"), capture_output=True, timeout=300
        ).returncode
        == 0
    )
    proc = subprocess.Popen(
        _cli(tmp_path, killed / "out.tfrecord"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.time() + 120
        while time.time() < deadline:  # until instances are being spilled: mid-way
            spills = list(killed.glob(".create_pretraining_data-*/*.spill"))
            if spills and spills[0].stat().st_size > 0:
                break
            time.sleep(0.01)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    leftovers = sorted(p.name for p in killed.iterdir())
    assert len(leftovers) == 2 and "out.tfrecord" not in leftovers
    assert leftovers[0].startswith(".create_pretraining_data-")
    assert leftovers[1].startswith(".out.tfrecord.create_pretraining_data-")
    assert _run(tmp_path, "--dupe_factor=20", out="killed/out.tfrecord") == 0
    assert os.listdir(killed) == ["out.tfrecord"]
    assert (killed / "out.tfrecord").read_bytes() == (clean / "out.tfrecord").read_bytes()


def test_temporaries_of_running_processes_or_other_programs_are_kept(tmp_path):
    from albert_tf import fileio

    _write_corpus(tmp_path, files=1, docs=5)
    host = fileio.owner_tag().rsplit("-", 1)[0]
    keep = [
        f".create_pretraining_data-{host}-{os.getppid()}-abc",  # a running process
        ".out.tfrecord.create_pretraining_data-otherhost-1.tmp",  # another machine
        ".create_pretraining_data-x",
        "out.tfrecord.tmp-1",
    ]  # not our names
    for name in keep:
        (tmp_path / name).write_text("")
    assert _run(tmp_path, out="out.tfrecord") == 0
    assert sorted(_leftovers(tmp_path)) == sorted(keep + ["out.tfrecord"])


def test_long_lines_warn_with_the_dropped_tokens(tmp_path, caplog):
    from albert_tf.data import tokenization

    _write_corpus(tmp_path, files=1, docs=20)
    long_line = " ".join(["the cat sat on the mat"] * 100)
    with open(tmp_path / "part-0.txt", "a", encoding="utf-8") as f:
        f.write(f"\n\n{long_line}\n{long_line}\n")
    n = len(tokenization.FullTokenizer(spm_model_file=SPM).encode(long_line))
    assert n > 509
    with caplog.at_level("WARNING"):
        assert _run(tmp_path, "--max_seq_length=512", out="o.tfrecord") == 0
    assert (
        f"2 input line(s) are longer than a whole sequence (max_seq_length - 3 = 509 "
        f"tokens); every instance cuts them: {2 * (n - 509)} tokens beyond 509 (longest "
        f"line: {n} tokens, in {tmp_path / 'part-0.txt'})"
    ) in caplog.text


def test_input_without_any_instance_is_an_error(tmp_path, capsys):
    # Lines of characters that SentencePiece drops: no document, in any unit of the file.
    (tmp_path / "part-0.txt").write_text("\u200b\n\u200b\n\n" * 4000)
    assert _run(tmp_path, "--chunk_size_mb=0.004", out="o.tfrecord") == 1
    assert "no instance could be made from 1 file(s) (0 documents)" in capsys.readouterr().err
    assert _leftovers(tmp_path) == []
