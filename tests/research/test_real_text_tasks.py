"""albert_tf/research/real_text_tasks.py: the labels come from where each sentence stands in
the novels, and the files read back through run_classifier.py's GLUE processors."""

import random

from albert_tf.data import classifier_data
from albert_tf.research import real_text_tasks


def _chapters(title, first_index, count, paragraphs=3, sentences=4):
    """Chapters whose sentences name their place: "<title> c<chapter> p<para> s<n> ..."."""
    return [
        (
            title,
            index,
            [
                [f"{title} c{index} p{p} s{s} and more words" for s in range(sentences)]
                for p in range(paragraphs)
            ],
        )
        for index in range(first_index, first_index + count)
    ]


def _place(sentence):
    words = sentence.split()
    title = " ".join(words[: words.index(next(w for w in words if w.startswith("c")))])
    rest = sentence[len(title) :].split()
    return title, int(rest[0][1:]), int(rest[1][1:]), int(rest[2][1:])


def test_later_novel_labels_and_short_sentences():
    chapters = _chapters("Emma", 0, 1, 1, 2) + _chapters("Pride and Prejudice", 0, 1, 1, 1)
    chapters.append(("Persuasion", 0, [["Too short to tell."]]))
    assert real_text_tasks.novel_examples(chapters) == [
        ("Emma c0 p0 s0 and more words", 1),
        ("Emma c0 p0 s1 and more words", 1),
        ("Pride and Prejudice c0 p0 s0 and more words", 0),
    ]


def test_next_sentence_pairs_follow_or_come_from_another_chapter():
    chapters = _chapters("Emma", 0, 3) + _chapters("Persuasion", 0, 2)
    examples = real_text_tasks.next_sentence_examples(chapters, random.Random(1))
    assert len(examples) == 5 * 3 * 3  # neighbouring pairs per paragraph
    labels = [y for _, _, y in examples]
    assert 0 < sum(labels) < len(labels)
    for first, second, label in examples:
        (t1, c1, p1, s1), (t2, c2, p2, s2) = _place(first), _place(second)
        assert t1 == t2
        if label:
            assert (c2, p2, s2) == (c1, p1, s1 + 1)
        else:
            assert c2 != c1


def test_swap_neighbours_swaps_two_different_plain_lower_case_words():
    rng = random.Random(0)
    words = "Mr. Darcy said that she was, after all, right".split()
    seen = set()
    for _ in range(200):
        swapped = real_text_tasks.swap_neighbours(words, rng)
        changed = [i for i, (a, b) in enumerate(zip(words, swapped)) if a != b]
        assert len(changed) == 2 and changed[1] == changed[0] + 1
        i = changed[0]
        assert swapped[i : i + 2] == [words[i + 1], words[i]]
        seen.add(i)
    # said|that and that|she only: "Mr." and "Darcy" have a full stop or a capital, "was,"
    # and "all," a comma, and "after" and "right" have no plain neighbour.
    assert seen == {2, 3}
    for nothing_to_swap in ("Mr. Darcy, Emma.", "so so so", "Yes, yes; indeed!"):
        assert real_text_tasks.swap_neighbours(nothing_to_swap.split(), rng) is None


def test_word_order_labels_and_which_sentences_take_part():
    long = " ".join(["and more"] * 16)  # 32 words: longer than MAX_WORDS
    sentences = [f"Emma c0 p0 s{s} went to see her friend" for s in range(200)]
    chapters = [("Emma", 0, [sentences + [long, "Too short to tell."]])]
    examples = real_text_tasks.word_order_examples(chapters, random.Random(2))
    assert len(examples) == 200  # the long and the short sentence are left out
    labels = [y for _, y in examples]
    assert 60 < sum(labels) < 140
    for (text, label), original in zip(examples, sentences):
        if label:
            assert text == original
        else:
            assert text != original and sorted(text.split()) == sorted(original.split())


def test_written_files_are_glue_balanced_and_readable(tmp_path):
    parts = {
        "task_train": _chapters("Emma", 4, 2) + _chapters("Sense and Sensibility", 4, 3),
        "task_dev": _chapters("Persuasion", 9, 3) + _chapters("Northanger Abbey", 9, 2),
    }
    summary = real_text_tasks.write_tasks(tmp_path, parts, seed=3, train_examples=20)
    # Held out: 36 later-novel and 24 earlier-novel sentences -> 24 of each, half dev.
    assert summary["SST-2"] == {"train": 20, "dev": 24, "test": 24}
    assert (tmp_path / "SST-2" / "test.tsv").read_text().startswith("index\tsentence\n0\t")
    mrpc_header = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
    assert (tmp_path / "MRPC" / "train.tsv").read_text().startswith(mrpc_header)
    assert (tmp_path / "CoLA" / "train.tsv").read_text().split("\t")[0] == "austen"  # no header
    for task, processor in (
        ("SST-2", classifier_data.Sst2Processor()),
        ("MRPC", classifier_data.MrpcProcessor()),
        ("CoLA", classifier_data.ColaProcessor()),
    ):
        train = processor.get_train_examples(str(tmp_path))
        dev = processor.get_dev_examples(str(tmp_path))
        test = processor.get_test_examples(str(tmp_path))
        assert len(train) == summary[task]["train"]
        assert len(test) == summary[task]["test"]
        for examples in (train, dev):
            labels = [e.label for e in examples]
            assert labels.count("0") == labels.count("1")
        # Training text comes from task_train chapters only, dev and test from task_dev.
        assert all(e.text_a.startswith(("emma", "sense")) for e in train)
        assert all(e.text_a.startswith(("persuasion", "northanger")) for e in dev + test)
        if task == "SST-2":
            assert {e.label for e in train if e.text_a.startswith("emma")} == {"1"}
        if task == "CoLA":  # as written (1), or with "and more" or "more words" swapped (0)
            for e in train + dev:
                assert e.text_a.endswith("and more words") == (e.label == "1")
        answers = (tmp_path / task / "test_labels.tsv").read_text().splitlines()
        assert answers[0] == "index\tlabel" and len(answers) == 1 + len(test)
