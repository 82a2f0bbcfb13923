"""Runs data/make_demo_data.py (small size) and checks every output format."""

import csv
import json
import os
import subprocess
import sys

import pytest
import sentencepiece as spm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "data", "make_demo_data.py")


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo")
    subprocess.run(
        [sys.executable, SCRIPT, "--output_dir", str(out), "--small"],
        check=True,
        capture_output=True,
    )
    return out


def test_deterministic(demo, tmp_path):
    subprocess.run(
        [sys.executable, SCRIPT, "--output_dir", str(tmp_path), "--small"],
        check=True,
        capture_output=True,
    )
    for rel in (
        "spm.model",
        "spm.vocab",
        "corpus/part-00002.txt",
        "glue/MNLI/train.tsv",
        "squad/dev-v2.0.json",
        "RACE/test/high/all.txt",
    ):
        assert (demo / rel).read_bytes() == (tmp_path / rel).read_bytes(), rel
    assert not list(tmp_path.rglob("*.tmp"))


def test_corpus_format(demo):
    for i in range(4):
        text = (demo / "corpus" / f"part-{i:05d}.txt").read_text(encoding="utf-8")
        docs = text.strip("\n").split("\n\n")
        assert docs
        for d in docs:
            lines = d.split("\n")
            assert 4 <= len(lines) <= 12
            assert all(line.strip() == line and line for line in lines)


def test_spm_special_ids(demo):
    sp = spm.SentencePieceProcessor(model_file=str(demo / "spm.model"))
    pieces = [sp.IdToPiece(i) for i in range(13)]
    assert pieces == [
        "<pad>",
        "<unk>",
        "[CLS]",
        "[SEP]",
        "[MASK]",
        "(",
        ")",
        '"',
        "-",
        ".",
        "–",
        "£",
        "€",
    ]
    assert sp.IsControl(2) and sp.IsUnknown(1)
    vocab = (demo / "spm.vocab").read_text(encoding="utf-8").splitlines()
    assert len(vocab) == sp.GetPieceSize()
    assert [v.split("\t")[0] for v in vocab[:13]] == pieces


# (folder, file, header or None, columns)
GLUE = [
    ("CoLA", "train.tsv", None, 4),
    ("CoLA", "test.tsv", ["index", "sentence"], 2),
    ("SST-2", "train.tsv", ["sentence", "label"], 2),
    ("SST-2", "test.tsv", ["index", "sentence"], 2),
    ("MRPC", "dev.tsv", ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"], 5),
    ("STS-B", "train.tsv", None, 10),
    ("STS-B", "test.tsv", None, 9),
    ("QQP", "train.tsv", ["id", "qid1", "qid2", "question1", "question2", "is_duplicate"], 6),
    ("QQP", "test.tsv", ["id", "question1", "question2"], 3),
    ("MNLI", "train.tsv", None, 12),
    ("MNLI", "dev_matched.tsv", None, 16),
    ("MNLI", "dev_mismatched.tsv", None, 16),
    ("MNLI", "test_matched.tsv", None, 10),
    ("MNLI", "test_mismatched.tsv", None, 10),
    ("QNLI", "train.tsv", ["index", "question", "sentence", "label"], 4),
    ("RTE", "dev.tsv", ["index", "sentence1", "sentence2", "label"], 4),
    ("WNLI", "test.tsv", ["index", "sentence1", "sentence2"], 3),
    ("diagnostic", "diagnostic.tsv", ["index", "sentence1", "sentence2"], 3),
]


@pytest.mark.parametrize("folder,name,header,ncols", GLUE)
def test_glue_layout(demo, folder, name, header, ncols):
    with open(demo / "glue" / folder / name, encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t", quotechar=None))
    assert all(len(r) == ncols for r in rows)
    if header:
        assert rows[0] == header
    if folder == "CoLA" and name == "train.tsv":
        assert {r[1] for r in rows} == {"0", "1"}
    if folder == "STS-B" and name == "train.tsv":
        assert all(0.0 <= float(r[-1]) <= 5.0 for r in rows[1:])
    if folder == "MNLI" and name == "train.tsv":
        assert {r[-1] for r in rows[1:]} == {"contradiction", "entailment", "neutral"}


@pytest.mark.parametrize(
    "name", ["train-v1.1.json", "dev-v1.1.json", "train-v2.0.json", "dev-v2.0.json"]
)
def test_squad(demo, name):
    doc = json.loads((demo / "squad" / name).read_text(encoding="utf-8"))
    v2 = "v2.0" in name
    assert doc["version"] == ("v2.0" if v2 else "1.1")
    n_q = n_imp = 0
    for art in doc["data"]:
        for par in art["paragraphs"]:
            ctx = par["context"]
            for qa in par["qas"]:
                n_q += 1
                if qa.get("is_impossible", False):
                    n_imp += 1
                    assert qa["answers"] == []
                    continue
                assert qa["answers"]
                for ans in qa["answers"]:
                    s = ans["answer_start"]
                    assert ctx[s : s + len(ans["text"])] == ans["text"]
    assert n_q > 10
    assert (n_imp > 0) == v2


def test_race(demo):
    for split in ("train", "dev", "test"):
        for level in ("middle", "high"):
            lines = (
                (demo / "RACE" / split / level / "all.txt").read_text(encoding="utf-8").splitlines()
            )
            assert lines
            for line in lines:
                item = json.loads(line)
                assert set(item) == {"id", "article", "questions", "options", "answers"}
                assert len(item["questions"]) == len(item["options"]) == len(item["answers"])
                assert all(len(o) == 4 for o in item["options"])
                assert all(a in "ABCD" for a in item["answers"])
    blanks = sum(
        "_" in q
        for line in (demo / "RACE/train/middle/all.txt").read_text().splitlines()
        for q in json.loads(line)["questions"]
    )
    assert blanks > 0
