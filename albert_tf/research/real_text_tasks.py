"""Labelled fine-tuning tasks built from the real-text corpus (albert_tf/research/real_text.py),
written in GLUE's file formats so run_classifier.py reads them as it reads GLUE:

- `SST-2` format, task "later novel": is the sentence from one of Austen's three later
  novels (Mansfield Park, Emma, Persuasion: label 1) or from the three earlier ones
  (Sense and Sensibility, Pride and Prejudice, Northanger Abbey: label 0)? The novel a
  sentence comes from is the source's own label; grouping the six novels into early
  and late is our rule. Sentences of fewer than `MIN_WORDS` words are left out.
- `MRPC` format, task "next sentence": does the second sentence directly follow the
  first in the same paragraph of the novel (label 1), or is it a sentence from another
  chapter of the same novel (label 0)? Both labels come from the source's order.
- `CoLA` format, task "word order": is the sentence as Austen wrote it (label 1), or were
  two neighbouring words swapped (label 0)? The swap is our rule (`swap_neighbours`): two
  different lower-case words of letters alone, so capitals and punctuation stay in place
  and both labels have the same words; only their order tells them apart, which a model
  that reads words as a bag cannot learn, and a model that knows English can.

Training examples come from the chapters of the corpus part `task_train`, dev and test
examples from `task_dev` (first half of the shuffled examples dev, second half test;
test.tsv is unlabelled as in GLUE, its labels are in test_labels.tsv); pretraining saw
neither part. Each file has equal numbers of both labels (the larger class is
subsampled), so chance is accuracy 0.5 and a model predicting one class scores 0.5.
"""

from __future__ import annotations

import os
import random
import re

from albert_tf import fileio

LATER_NOVELS = ("Mansfield Park", "Emma", "Persuasion")
MIN_WORDS = 6
# Word order: longer sentences are left out, so that the swap is inside the 64 pieces a
# fine-tuning sequence holds (30 words are about 45 pieces).
MAX_WORDS = 30
# GLUE folder name (run_classifier.py's --task_name) -> what the task asks.
TASKS = {"SST-2": "later novel", "MRPC": "next sentence", "CoLA": "word order"}
UNLABELLED_TASKS = ("MRPC", "CoLA")  # built from any text: no labels from a source
_PLAIN_WORD = re.compile(r"[a-z]+")


def _balanced(examples: list[tuple], rng: random.Random, limit: int | None) -> list[tuple]:
    """Equal numbers of each label (the last field), at most `limit` in all, shuffled."""
    by_label = {}
    for example in examples:
        by_label.setdefault(example[-1], []).append(example)
    each = min(len(v) for v in by_label.values())
    if limit is not None:
        each = min(each, limit // len(by_label))
    out = [e for label in sorted(by_label) for e in rng.sample(by_label[label], each)]
    rng.shuffle(out)
    return out


def novel_examples(chapters) -> list[tuple[str, int]]:
    """(sentence, 1 if from a later novel else 0) for every sentence of `chapters`
    ([(title, index, paragraphs)]) with at least MIN_WORDS words."""
    return [
        (sentence, int(title in LATER_NOVELS))
        for title, _, chapter in chapters
        for paragraph in chapter
        for sentence in paragraph
        if len(sentence.split()) >= MIN_WORDS
    ]


def next_sentence_examples(chapters, rng: random.Random) -> list[tuple[str, str, int]]:
    """(first, second, label) for each pair of neighbouring sentences of a paragraph:
    half of them (at random) keep the true next sentence (label 1), the others get a
    random sentence from another chapter of the same novel (label 0)."""
    by_novel = {}
    for title, index, chapter in chapters:
        by_novel.setdefault(title, []).append((index, [s for p in chapter for s in p]))
    out = []
    for title, index, chapter in chapters:
        others = [s for i, sents in by_novel[title] if i != index for s in sents]
        for paragraph in chapter:
            for first, second in zip(paragraph, paragraph[1:]):
                if others and rng.random() < 0.5:
                    out.append((first, rng.choice(others), 0))
                else:
                    out.append((first, second, 1))
    return out


def swap_neighbours(words: list[str], rng: random.Random) -> list[str] | None:
    """`words` with two neighbouring ones swapped, both different lower-case words of
    letters alone, the pair drawn at random; None if the sentence has no such pair."""
    pairs = [
        i
        for i in range(len(words) - 1)
        if words[i] != words[i + 1]
        and _PLAIN_WORD.fullmatch(words[i])
        and _PLAIN_WORD.fullmatch(words[i + 1])
    ]
    if not pairs:
        return None
    i = rng.choice(pairs)
    return [*words[:i], words[i + 1], words[i], *words[i + 2 :]]


def word_order_examples(chapters, rng: random.Random) -> list[tuple[str, int]]:
    """(sentence, label) for every sentence of `chapters` with MIN_WORDS to MAX_WORDS words
    and a pair that `swap_neighbours` can swap: half of them (at random) as written (label 1),
    the others swapped (label 0). Words are joined by single spaces in both."""
    out = []
    for _, _, chapter in chapters:
        for paragraph in chapter:
            for sentence in paragraph:
                words = sentence.split()
                fits = MIN_WORDS <= len(words) <= MAX_WORDS
                swapped = swap_neighbours(words, rng) if fits else None
                if swapped is None:
                    continue
                if rng.random() < 0.5:
                    out.append((" ".join(swapped), 0))
                else:
                    out.append((" ".join(words), 1))
    return out


def _tsv(rows) -> str:
    return "".join("\t".join(str(c).replace("\t", " ") for c in row) + "\n" for row in rows)


def _write_split(folder, task, train, dev, test) -> dict:
    """train.tsv, dev.tsv, test.tsv (unlabelled) and test_labels.tsv in GLUE's layout."""
    if task == "SST-2":
        files = {
            "train.tsv": [("sentence", "label"), *train],
            "dev.tsv": [("sentence", "label"), *dev],
            "test.tsv": [("index", "sentence"), *((i, s) for i, (s, _) in enumerate(test))],
        }
    elif task == "CoLA":  # no header; source, label, the original's mark ("*": label 0), text

        def rows(examples):
            return [("austen", y, "" if y else "*", s) for s, y in examples]

        files = {
            "train.tsv": rows(train),
            "dev.tsv": rows(dev),
            "test.tsv": [("index", "sentence"), *((i, s) for i, (s, _) in enumerate(test))],
        }
    else:  # MRPC: Quality (the label) first, then the two sentences' ids and texts
        header = ("Quality", "#1 ID", "#2 ID", "#1 String", "#2 String")

        def rows(examples):
            return [(y, 2 * i, 2 * i + 1, a, b) for i, (a, b, y) in enumerate(examples)]

        files = {
            "train.tsv": [header, *rows(train)],
            "dev.tsv": [header, *rows(dev)],
            "test.tsv": [("index", *header[1:]), *((i, *r[1:]) for i, r in enumerate(rows(test)))],
        }
    files["test_labels.tsv"] = [("index", "label"), *((i, e[-1]) for i, e in enumerate(test))]
    for name, rows_ in files.items():
        fileio.atomic_write_text(os.path.join(folder, task, name), _tsv(rows_))
    return {"train": len(train), "dev": len(dev), "test": len(test)}


def write_tasks(
    folder,
    parts: dict,
    seed: int = 12345,
    train_examples: int = 1000,
    dev_examples: int = 1000,
    tasks=tuple(TASKS),
) -> dict:
    """Writes <folder>/<task> for each of `tasks` (default SST-2, MRPC and CoLA) from the
    corpus parts (real_text.parts); returns {task: {"train": n, "dev": n, "test": n}}.
    `train_examples`: at most this many training examples per task (the low-data
    setting); `dev_examples`: at most this many held-out examples, split in half between
    dev and test."""
    summary = {}
    for task in tasks:
        rng = random.Random(f"{seed}-{task}")
        held_out = {}
        for part, limit in (("task_train", train_examples), ("task_dev", dev_examples)):
            chapters = parts[part]
            if task == "SST-2":
                examples = novel_examples(chapters)
            elif task == "CoLA":
                examples = word_order_examples(chapters, rng)
            else:
                examples = next_sentence_examples(chapters, rng)
            held_out[part] = _balanced(examples, rng, limit)
        dev_test = held_out["task_dev"]
        # Halves of each label, so dev and test stay balanced.
        dev = [e for label in (0, 1) for e in [x for x in dev_test if x[-1] == label][::2]]
        test = [e for label in (0, 1) for e in [x for x in dev_test if x[-1] == label][1::2]]
        rng.shuffle(dev)
        rng.shuffle(test)
        summary[task] = _write_split(folder, task, held_out["task_train"], dev, test)
    return summary


__all__ = [
    "LATER_NOVELS",
    "MIN_WORDS",
    "MAX_WORDS",
    "TASKS",
    "UNLABELLED_TASKS",
    "novel_examples",
    "next_sentence_examples",
    "swap_neighbours",
    "word_order_examples",
    "write_tasks",
]
