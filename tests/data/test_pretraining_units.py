"""Tests of the work on one unit shared by the local builder and the Beam pipeline: the plan
of units, the fast tokenizer, and `process_unit` (records by a test's own run of the same
units, compared byte for byte)."""

import os
import random

import numpy as np
import pytest

from albert_tf.data import pretraining_units as pu

from instance_fixtures import write_documents
from repo_paths import REPO_ROOT

SPM = os.path.join(REPO_ROOT, "data", "demo", "spm.model")

pytestmark = pytest.mark.skipif(not os.path.exists(SPM), reason="demo spm.model not generated")


def test_plan_units_cuts_large_files_after_blank_lines(tmp_path):
    path = tmp_path / "part-0.txt"
    with open(path, "w", encoding="utf-8") as f:
        write_documents(f, random.Random(0), 200, max_sentences=9, max_words=30)
    data = path.read_bytes()
    units = pu.plan_units([str(path)], 8192)
    assert len(units) > 3 and units[0].start == 0 and units[-1].end == len(data)
    assert all(u.end == v.start for u, v in zip(units, units[1:]))
    assert [(u.index, u.file_index, u.chunk_index) for u in units] == [
        (i, 0, i) for i in range(len(units))
    ]
    for u in units[:-1]:  # cut after a blank line (a document's end), past the nominal size
        assert data[u.end - 2 : u.end] == b"\n\n" and u.end - u.start >= 8192
    assert pu.plan_units([str(path)], 0) == [pu.Unit(0, 0, 0, str(path), 0, len(data))]


# Lines whose pieces end in "<digit>,": "0," and "4," pieces without "▁" (the two modes differ),
# "▁1990," and "▁2," (they agree), and a line with an unknown piece and a comma (exact path).
DIGIT_COMMA_LINES = [
    "In 1990, sales were 3,500, not 2,000, units.",
    "Prices rose 4,5,6, then fell; x1234, ok",
    "A 1,000,000, tax and 1990s, 80s, then 7,",
    "\u0416\u0416 rose 3,500, again",
]


@pytest.mark.parametrize("digit_comma", ["python3", "intended"])
def test_fast_tokenizer_equals_full_and_in_graph_tokenizers(digit_comma):
    """All three tokenizers agree in both digit-comma modes."""
    from albert_tf.data import tokenization
    from albert_tf.data.tf_tokenization import InGraphTokenizer

    tok = tokenization.FullTokenizer(spm_model_file=SPM, digit_comma=digit_comma)
    fast = pu.FastTokenizer(tok)
    flat, lens = fast.encode(fast.preprocess_lines("\n".join(DIGIT_COMMA_LINES)))
    got = np.split(flat, np.cumsum(lens)[:-1])
    want = [tok.encode(line) for line in DIGIT_COMMA_LINES]
    assert [list(g) for g in got] == want
    in_graph = InGraphTokenizer(SPM, digit_comma=digit_comma)
    assert in_graph(np.array(DIGIT_COMMA_LINES, object)).to_list() == want
    other = tokenization.FullTokenizer(
        spm_model_file=SPM, digit_comma=("intended" if digit_comma == "python3" else "python3")
    )
    assert [other.encode(line) != w for line, w in zip(DIGIT_COMMA_LINES, want)] == [
        True,
        True,
        False,
        True,
    ]


def test_process_unit_in_two_threads_at_once_equals_a_sequential_run(tmp_path):
    """One UnitWorker shared by two threads that run different units at the same time (as
    Beam's threaded workers do) gives each unit the bytes of a run one after the other."""
    import dataclasses
    import threading

    from albert_tf.data import pretraining_instances as pi
    from albert_tf.data import tokenization

    path = tmp_path / "corpus.txt"
    with open(path, "w", encoding="utf-8") as f:
        write_documents(f, random.Random(1), 300, max_sentences=9, max_words=30)
    units = pu.plan_units([str(path)], 20_000)
    units = units[: len(units) // 2 * 2]  # pairs: one unit of each pair per thread
    assert len(units) >= 4
    config = pi.MaskingConfig(max_seq_length=64, max_predictions_per_seq=8)
    settings = pu.Settings(
        None, SPM, True, tokenization.DEFAULT_DIGIT_COMMA, config, 2, 5, str(tmp_path), 3
    )
    worker = pu.unit_worker(settings)

    def run(unit, worker):
        res = pu.process_unit(unit, worker)
        with open(res["path"], "rb") as f:
            data = f.read()
        os.remove(res["path"])
        return data, res["sizes"], res["instances"]

    sequential = [run(u, worker) for u in units]

    # Both threads enter the tokenizer of their unit before either goes on: the two units
    # are in process_unit at the same time, sharing the worker's tokenizer and vocabulary.
    both_inside = threading.Barrier(2, timeout=60)

    class MeetingTokenizer:
        def __init__(self, fast):
            self.fast = fast

        def preprocess_lines(self, text):
            return self.fast.preprocess_lines(text)

        def encode(self, texts):
            both_inside.wait()
            return self.fast.encode(texts)

    shared = dataclasses.replace(worker, fast=MeetingTokenizer(worker.fast))
    threaded = [None] * len(units)

    def thread_body(which):
        for i in range(which, len(units), 2):
            threaded[i] = run(units[i], shared)

    threads = [threading.Thread(target=thread_body, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not both_inside.broken
    assert threaded == sequential
    assert all(data and instances > 0 for data, _, instances in sequential)
    assert sorted(os.listdir(tmp_path)) == ["corpus.txt"]
