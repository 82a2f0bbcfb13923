"""albert_tf/research/real_text.py: sentence and chapter splitting on text laid out as the
package stores it, the held-out parts, and data/get_real_text.py's one line when the
package cannot be fetched."""

import dataclasses
import hashlib
import json
import os
import stat
import subprocess
import sys

import pytest

from albert_tf.errors import UserError
from albert_tf.research import real_text

from repo_paths import REPO_ROOT

NOVEL = [
    "PRIDE AND PREJUDICE",
    "",
    "By Jane Austen",
    "",
    "Chapter 1",
    "",
    "It is a truth universally acknowledged, that a single man in possession",
    "of a good fortune, must be in want of a wife.",
    "",
    '"My dear Mr. Bennet," said his lady to him one day, "have you heard that',
    'Netherfield Park is let at last?" Mr. Bennet replied that he had not.',
    "",
    "Chapter 2",
    "",
    "Mr. Bennet was among the earliest. He visited! Did he? Yes.",
    "",
    "THE END",
    "",
    "Chapter 3",
    "Never read.",
]


def test_sentences_keep_titles_and_quotes_together():
    assert real_text.sentences(
        '"Oh! Mr. Darcy, you are too kind." She smiled. St. James was near? No.'
    ) == ['"Oh!', 'Mr. Darcy, you are too kind."', "She smiled.", "St. James was near?", "No."]
    assert real_text.sentences("no end") == ["no end"]


def test_split_novel_drops_front_matter_headings_and_the_end():
    chapters = real_text.split_novel(NOVEL)
    assert chapters == [
        [
            [
                "It is a truth universally acknowledged, that a single man in possession of "
                "a good fortune, must be in want of a wife."
            ],
            [
                '"My dear Mr. Bennet," said his lady to him one day, "have you heard that '
                'Netherfield Park is let at last?"',
                "Mr. Bennet replied that he had not.",
            ],
        ],
        [["Mr. Bennet was among the earliest.", "He visited!", "Did he?", "Yes."]],
    ]


def test_chapter_parts_hold_out_two_in_ten():
    parts = [real_text.chapter_part(i) for i in range(20)]
    assert [i for i, p in enumerate(parts) if p == "task_train"] == [4, 14]
    assert [i for i, p in enumerate(parts) if p == "task_dev"] == [9, 19]
    assert parts.count("pretrain") == 16


def test_parts_and_corpus_format():
    novels = {key: NOVEL for key in real_text.NOVELS}
    parts = real_text.parts(novels)
    assert [len(parts[p]) for p in real_text.PARTS] == [12, 0, 0]  # two chapters a novel
    assert parts["pretrain"][0][:2] == ("Sense and Sensibility", 0)
    text = real_text.corpus_text(parts["pretrain"][:2])
    assert text == (
        "It is a truth universally acknowledged, that a single man in possession of a good "
        "fortune, must be in want of a wife.\n"
        '"My dear Mr. Bennet," said his lady to him one day, "have you heard that '
        'Netherfield Park is let at last?"\n'
        "Mr. Bennet replied that he had not.\n"
        "\n"
        "Mr. Bennet was among the earliest.\nHe visited!\nDid he?\nYes.\n"
    )
    with pytest.raises(ValueError, match="'emma' missing"):
        real_text.parts({k: v for k, v in novels.items() if k != "emma"})


def _fake_tool(folder, name, script):
    path = os.path.join(folder, name)
    with open(path, "w") as f:
        f.write("#!/bin/sh\n" + script)
    os.chmod(path, os.stat(path).st_mode | stat.S_IEXEC)


def test_no_network_is_one_line(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _fake_tool(bin_dir, "apt-get", 'echo "E: Failed to fetch r-cran-janeaustenr" >&2\nexit 100\n')
    _fake_tool(bin_dir, "dpkg-deb", "exit 0\n")
    out = tmp_path / "out"
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "PYTHONPATH": REPO_ROOT,
    }
    result = subprocess.run(
        [
            sys.executable,
            os.path.join(REPO_ROOT, "data", "get_real_text.py"),
            f"--output_dir={out}",
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert result.returncode == 1
    lines = [line for line in result.stderr.splitlines() if line.startswith("get_real_text")]
    assert lines == [
        "get_real_text.py: error: apt-get download r-cran-janeaustenr failed (E: Failed to "
        "fetch r-cran-janeaustenr); it needs Debian's package index (`apt-get update`) and "
        "the network"
    ]
    assert not out.exists() or not any(out.iterdir())


def test_other_package_version_is_refused(monkeypatch):
    source = {"sha256": {real_text.DATABASE + ".rdb": "0" * 64}}
    monkeypatch.setattr(real_text, "obtain", lambda work_dir: ({}, source))
    with pytest.raises(UserError, match="--expected_sha256: the package's .* has sha256 0000"):
        real_text.fetch_novels(real_text.RDB_SHA256)
    assert real_text.fetch_novels("") == ({}, source)


def _own_text(path, documents, sentences=6):
    """A text in the pretraining input format: `documents` documents of `sentences` lines."""
    lines = []
    for d in range(documents):
        lines += [f"the cat {d} sat on mat number {s} today." for s in range(sentences)] + [""]
    path.write_text("\n".join(lines))
    return str(path)


def test_own_text_documents_are_dealt_by_position():
    assert real_text.text_documents("a  b\nc\n\n\n d \n") == [["a b", "c"], ["d"]]


def test_own_text_parts_deal_each_files_documents_and_record_their_bytes(tmp_path):
    first = _own_text(tmp_path / "a.txt", 20)
    second = _own_text(tmp_path / "b.txt", 10)
    split, source = real_text.own_text_parts([str(tmp_path / "*.txt")])
    assert [(name, i) for name, i, _ in split["task_train"]] == [
        ("a.txt", 4),
        ("a.txt", 14),
        ("b.txt", 4),
    ]
    assert [(name, i) for name, i, _ in split["task_dev"]] == [
        ("a.txt", 9),
        ("a.txt", 19),
        ("b.txt", 9),
    ]
    assert len(split["pretrain"]) == 24
    # A document is one paragraph of its lines.
    assert split["task_train"][0][2] == [
        [f"the cat 4 sat on mat number {s} today." for s in range(6)]
    ]
    assert source["files"] == [first, second]
    assert source["sha256"][first] == hashlib.sha256(open(first, "rb").read()).hexdigest()


@pytest.mark.parametrize(
    "content, said",
    [
        ("few", "--text_file={path}: 9 documents; expected at least 10"),
        (b"\xff\xfe", "--text_file={path}: not UTF-8 text (byte 0)"),
    ],
)
def test_own_text_that_cannot_make_a_study_is_one_line(tmp_path, content, said):
    path = tmp_path / "text.txt"
    if content == "few":
        _own_text(path, 9)
    else:
        path.write_bytes(content)
    with pytest.raises(UserError) as err:
        real_text.own_text_parts([str(path)])
    assert str(err.value).startswith(said.format(path=path))
    with pytest.raises(UserError, match=r"^--text_file=\S+/none\*\.txt: no file matches$"):
        real_text.own_text_parts([str(tmp_path / "none*.txt")])


def test_get_real_text_from_own_text_builds_the_unlabelled_tasks(tmp_path):
    """The demo corpus stands in for a user's text: corpus parts, a tokenizer, and the
    next sentence and word order tasks; no later-novel task (it needs the novels' titles)."""
    corpus = os.path.join(REPO_ROOT, "data", "demo", "corpus", "part-00000.txt")
    out = tmp_path / "own"
    o = real_text.RealTextOptions(
        output_dir=str(out), text_file=(corpus,), vocab_size=300, train_examples=40, dev_examples=20
    )
    result = real_text.build(o)
    assert sorted(result["tasks"]) == ["CoLA", "MRPC"]
    assert {t: n["train"] for t, n in result["tasks"].items()} == {"CoLA": 40, "MRPC": 40}
    assert sorted(os.listdir(out / "glue")) == ["CoLA", "MRPC"]
    source = json.loads((out / "source.json").read_text())
    assert source["tasks"] == ["MRPC", "CoLA"] and source["files"] == [corpus]
    pretrain = (out / "corpus" / "pretrain.txt").read_text()
    dev = set((out / "corpus" / "task_dev.txt").read_text().split("\n\n"))
    assert not dev & set(pretrain.split("\n\n"))  # held-out documents are not pretrained on
    assert (out / "spm.model").stat().st_size > 0
    with pytest.raises(UserError, match="^--vocab_size=100000: "):
        real_text.build(dataclasses.replace(o, output_dir=str(tmp_path / "big"), vocab_size=100000))
