"""albert_tf/research/real_text.py: sentence and chapter splitting on text laid out as the
package stores it, the held-out parts, and data/get_real_text.py's one line when the
package cannot be fetched."""

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
