#!/usr/bin/env python3
"""Generates the project's small synthetic demo data set (deterministic for a seed).

Usage:
  python3 data/make_demo_data.py [--output_dir data/demo] [--seed 12345] [--small]

Writes, under --output_dir:
  corpus/part-0000{0..3}.txt   pretraining text: one sentence per line, blank line between documents
  spm.model, spm.vocab         SentencePiece unigram model trained on the lower-cased corpus
  glue/<Task>/*.tsv            GLUE-format fixtures (CoLA, SST-2, MRPC, STS-B, QQP, MNLI, QNLI, RTE,
                               WNLI, diagnostic)
  squad/{train,dev}-v{1.1,2.0}.json   SQuAD-format question answering
  RACE/{train,dev,test}/{middle,high}/all.txt   RACE-format multiple choice

All text comes from the templates below (invented names, towns and stories). Each document tells an
ordered little story (a character introduced by name and later referred to by pronoun, "first /
then / finally" connectors, increasing clock times, years and seasons, causes before effects), so
that sentence-order prediction is learnable by a tiny model. Only the standard library and
sentencepiece are used. Every file is written to a temporary name and renamed when complete.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import random
import re
import sys
import unicodedata

import sentencepiece as spm

logger = logging.getLogger("make_demo_data")

# ------------------------------------------------------------------------------------------------
# Vocabulary (all invented for this project)
# ------------------------------------------------------------------------------------------------

FEMALE = (
    "Anna Maria Lucy Emma Sara Nora Julia Clara Alice Rose Helen Mia Ella Lily Grace Ruth Eva "
    "Kate Amy Chloé Zoë Irene Olga Vera Hannah Laura Sophie Megan Diana Fiona Paula Tina "
    "Wendy Agnes Bella Carmen Daisy Edith Freya Gloria Hazel Iris Jane Lena Martha Nadia "
    "Ophelia Petra Rita Stella Ursula Violet Yara Bianca Mabel Lotte Hilde Renée Inés"
).split()
MALE = (
    "Tom Jack Paul Peter Sam Ben Leo Max Adam Noah Oscar Hugo Felix David Mark Luke Owen Ivan "
    "Omar Carl José René Victor Simon Albert Bruno Colin Dennis Edgar Frank George Henry Isaac "
    "James Kevin Louis Martin Nathan Patrick Quentin Robert Steven Thomas Walter Xavier Yusuf "
    "Arthur Basil Cyril Desmond Ernest Harold Jonah Milo Rufus Tobias André François"
).split()
JOBS = (
    "baker farmer teacher doctor nurse painter driver pilot writer singer tailor carpenter "
    "gardener fisher miner builder cook clerk judge student scientist engineer lawyer dancer "
    "artist merchant sailor guard waiter librarian plumber butcher potter weaver shepherd "
    "blacksmith barber jeweller mechanic dentist banker poet actor drummer sculptor printer "
    "postman florist chemist farrier brewer cobbler"
).split()
# Invented town names from two syllables; the set is fixed (not seed dependent).
TOWNS = sorted(
    {
        a + b
        for a in (
            "Ash Oak Elm Red Green Stone Mill North West East South Fair "
            "Bright Cold Pine River Sun High Fox Bell King Long Black White "
            "Silver Gold Iron Rose Lake Thorn"
        ).split()
        for b in (
            "ford brook vale bridge water hill mont bury wick side stead moor "
            "haven crest ton field gate ley mere wood"
        ).split()
        if (len(a) * 7 + len(b) * 3 + ord(a[0]) + ord(b[-1])) % 5 == 0
    }
)
PLACES = (
    "market library kitchen garden station harbor school bakery office museum park river "
    "forest farm hospital bridge church square shop workshop barn beach hill village "
    "castle theatre stadium factory mill tower cellar attic orchard meadow pond stable "
    "gallery hotel airport cinema palace prison temple dock"
).split()
OBJECTS = (
    "box basket letter lamp chair table book map key bag bottle cup plate knife rope ladder "
    "hammer bucket coat hat scarf umbrella clock radio camera bicycle candle blanket pencil "
    "notebook jar spoon bowl kettle mirror wallet ticket parcel saw drill brush broom "
    "pillow curtain carpet vase teapot glove boot shovel rake needle thread button "
    "envelope stamp newspaper magazine guitar violin drum flute telescope compass lantern "
    "suitcase trunk crate barrel sack shelf desk bench stool cupboard"
).split()
INGREDIENTS = (
    "apples eggs onions carrots potatoes tomatoes lemons beans rice flour sugar butter "
    "milk cheese garlic mushrooms peas oranges pears plums nuts honey fish chicken corn "
    "cabbage spinach cherries grapes peaches melons lentils oats herbs cream yoghurt "
    "ginger cucumbers peppers olives almonds raisins berries leeks turnips beets"
).split()
DISHES = (
    "soup cake pie salad stew bread pudding curry pasta omelette pancakes sandwich porridge "
    "pizza tart risotto casserole dumplings biscuits muffins jam pie noodles goulash "
    "chowder crumble quiche waffles"
).split()
ADJS = (
    "big small old new heavy light red blue green yellow white black warm cold clean dirty "
    "round long short bright dark quiet soft hard fresh dry wet empty full wooden brown "
    "purple orange grey golden silver narrow wide tall thin thick smooth rough sharp "
    "shiny dusty broken strong tiny huge ancient modern plain fancy cheap expensive"
).split()
POS = (
    "good great wonderful excellent delicious lovely pleasant charming superb fantastic "
    "delightful brilliant tasty perfect beautiful splendid marvellous enjoyable fine "
    "terrific"
).split()
NEG = (
    "bad awful terrible horrible dull boring bland poor disappointing nasty ugly weak "
    "unpleasant dreadful stale mediocre tasteless gloomy clumsy tedious"
).split()
MACHINES = (
    "car bicycle clock radio washing-machine oven boat tractor fridge heater printer "
    "computer lawnmower motorbike sewing-machine television"
).split()
PARTS = (
    "wheel chain battery belt spring wire pump valve switch fuse screw gear cable filter".split()
)
ANIMALS = "sheep goats cows hens ducks pigs horses rabbits geese donkeys turkeys bees".split()
LANDS = (
    "fields hills lakes forests rivers villages farms mountains valleys meadows castles bridges"
).split()
PLANTS = (
    "roses tulips daisies lilies sunflowers beans peas carrots lettuce strawberries "
    "pumpkins herbs onions violets"
).split()
SUBJECTS = (
    "history music painting science geography poetry chemistry mathematics drawing languages"
).split()
FRIEND_ROLES = "friend sister brother cousin neighbour uncle aunt teacher".split()
SEASONS = ("spring", "summer", "autumn", "winter")
SYN = {  # paraphrase pairs (both directions are used)
    "big": "large",
    "small": "little",
    "bought": "purchased",
    "walked": "went",
    "quick": "fast",
    "began": "started",
    "ended": "finished",
    "looked at": "watched",
    "said": "stated",
    "gave": "handed",
    "house": "home",
    "shop": "store",
    "happy": "glad",
    "road": "street",
    "took": "carried",
    "quiet": "silent",
    "angry": "upset",
    "repaired": "fixed",
    "picked": "chose",
}

MIDDLE_CONNECTORS = ("Then", "Next,", "After that,", "Later,", "Soon after,", "After a while,")


class Person:
    """A story character: name, pronouns, job and home town."""

    def __init__(self, rng: random.Random, exclude: tuple = ()):
        female = rng.random() < 0.5
        while True:
            self.name = rng.choice(FEMALE if female else MALE)
            if self.name not in exclude:
                break
        self.subj, self.obj, self.poss = ("she", "her", "her") if female else ("he", "him", "his")
        self.job = rng.choice(JOBS)
        self.town = rng.choice(TOWNS)


def article(word: str) -> str:
    return ("an " if word[0] in "aeiou" else "a ") + word


def cap(s: str) -> str:
    return s[0].upper() + s[1:]


def clock(minutes: int) -> str:
    return f"{minutes // 60}:{minutes % 60:02d}"


def price(rng: random.Random) -> str:
    sym = rng.choice(("£", "€", "$"))
    return f"{sym}{rng.randint(2, 90)}"


def big_number(rng: random.Random) -> str:
    # Mostly round amounts, as in real text (this also makes "000" a piece of the model).
    tail = rng.choice(("000", "000", "000", "500", "250", f"{rng.randint(0, 999):03d}"))
    return f"{rng.randint(1, 99)},{tail}"


# ------------------------------------------------------------------------------------------------
# Corpus: ordered stories
# ------------------------------------------------------------------------------------------------


def _recipe(rng, p, friend):
    dish, ing = rng.choice(DISHES), rng.choice(INGREDIENTS)
    intro = [
        f"{p.name} was {article(p.job)} from {p.town}.",
        f"One day {p.name} wanted to cook {dish} for {p.poss} {friend.name}.",
    ]
    steps = [
        f"{{S}} walked to the market and bought {rng.randint(2, 12)} {ing}.",
        f"{{S}} carried the {ing} home in {article(rng.choice(ADJS))} basket.",
        f"{{S}} washed the {ing} in cold water.",
        f"{{S}} cut the {ing} into small pieces.",
        "{S} put a pot of water on the stove.",
        f"When the water was hot, {{s}} added the {ing} and a little salt.",
        f"{{S}} stirred the {dish} for {rng.randint(5, 40)} minutes.",
        f"{{S}} tasted the {dish} and added some pepper.",
        f"{{S}} set the table with {rng.randint(2, 6)} plates.",
        f"{{S}} served the {dish} to {friend.name}.",
    ]
    end = f'{friend.name} said, "This {dish} is {rng.choice(POS)}."'
    return intro[rng.randint(0, 1)], steps, end


def _journey(rng, p, friend):
    town2 = rng.choice([t for t in TOWNS if t != p.town])
    o1, o2 = rng.sample(OBJECTS, 2)
    intro = f"{p.name} lived in {p.town} and wanted to visit {town2}."
    steps = [
        f"{{S}} packed a bag with {article(o1)} and {article(o2)}.",
        f"{{S}} locked the door of {p.poss} house.",
        "{S} walked to the station.",
        f"{{S}} bought a ticket for {price(rng)}.",
        f"{{S}} took the train to {town2}.",
        f"{{S}} looked out of the window at the {rng.choice(LANDS)}.",
        f"The train arrived in {town2} (about {rng.randint(2, 6)} hours later).",
        f"{{S}} met {friend.name} near the {rng.choice(PLACES)}.",
        "They had lunch together at a small café.",
        f"{{S}} said goodbye to {friend.name}.",
        f"{{S}} returned to {p.town} in the evening.",
    ]
    end = f"{p.name} was tired but {rng.choice(('happy', 'glad'))}."
    return intro, steps, end


def _repair(rng, p, friend):
    m, part = rng.choice(MACHINES), rng.choice(PARTS)
    intro = f"One morning the {m} of {p.name} stopped working."
    steps = [
        f"{{S}} opened the {m} to look inside.",
        f"{{S}} found that the {part} was broken.",
        f"Because the {part} was broken, the {m} could not run.",
        f"{{S}} called {p.poss} {rng.choice(FRIEND_ROLES)} {friend.name} for advice.",
        f"{{S}} drove to the shop in {p.town} to buy a new {part}.",
        f"The new {part} cost {price(rng)}.",
        f"{{S}} replaced the old {part} with the new one.",
        f"{{S}} cleaned the {m} with {article(rng.choice(ADJS))} cloth.",
        f"{{S}} tested the {m} again.",
    ]
    end = f"Now the {m} worked well, so {p.name} was {rng.choice(('happy', 'glad'))}."
    return intro, steps, end


def _farm(rng, p, friend):
    animal = rng.choice(ANIMALS)
    n = rng.randint(3, 20)
    intro = f"{p.name} kept {n} {animal} on a farm near {p.town}."
    steps = []
    for season in SEASONS:
        born = rng.randint(1, 9)
        n += born
        steps.append(f"In {season}, {born} more {animal} were born, so there were {n} {animal}.")
        sold = rng.randint(1, max(1, n // 3))
        n -= sold
        steps.append(f"Later that {season}, {{s}} sold {sold} of them, so {n} were left.")
    end = f"At the end of the year {p.name} had {n} {animal}."
    return intro, steps, end


def _life(rng, p, friend):
    year = rng.randint(1900, 1990)
    town2 = rng.choice([t for t in TOWNS if t != p.town])
    intro = f"{p.name} was born in {p.town} in {year}."
    events = [
        f"{{s}} started school in {p.town}.",
        f"{{s}} moved to {town2}.",
        f"{{s}} became {article(p.job)}.",
        f"{{s}} married {friend.name}.",
        f"{{s}} bought a house for {big_number(rng)} pounds.",
        f"{{s}} opened a {rng.choice(PLACES)} in {town2}.",
        f"{{s}} wrote a book about {rng.choice(LANDS)}.",
        f"{{s}} sold {p.poss} house and moved back to {p.town}.",
    ]
    steps = []
    for e in events:
        year += rng.randint(1, 9)
        steps.append(f"In {year}, {e}")
    end = f"{p.name} died in {year + rng.randint(2, 20)}."
    return intro, steps, end


def _workday(rng, p, friend):
    t = rng.randint(5 * 60, 8 * 60)
    place = rng.choice(PLACES)
    intro = f"{p.name} worked as {article(p.job)} in {p.town}."
    events = [
        "{s} woke up and drank a cup of tea.",
        f"{{s}} left home and walked to the {place}.",
        f"{{s}} opened the {place} and turned on the lamp.",
        f"{{s}} wrote {rng.randint(2, 9)} letters.",
        f"{{s}} had lunch with {friend.name}.",
        f"{{s}} fixed {article(rng.choice(ADJS))} {rng.choice(OBJECTS)}.",
        f"{{s}} closed the {place} and went home.",
        "{s} cooked dinner.",
        "{s} read a book and went to bed.",
    ]
    steps = []
    for e in events:
        t += rng.randint(20, 120)
        steps.append(f"At {clock(min(t, 23 * 60 + 59))}, {e}")
    end = "It had been a long day."
    return intro, steps, end


def _garden(rng, p, friend):
    plant, tool = rng.choice(PLANTS), rng.choice(("shovel", "rake", "spade", "hoe"))
    intro = f"{p.name} had a small garden behind {p.poss} house in {p.town}."
    steps = [
        f"{{S}} took {p.poss} {tool} from the shed.",
        "{S} dug the soil and removed the stones.",
        f"{{S}} planted {rng.randint(5, 60)} {plant} in {rng.randint(2, 8)} rows.",
        f"{{S}} watered the {plant} with a {rng.choice(ADJS)} bucket.",
        "For a week it did not rain, so the soil became very dry.",
        f"Because the soil was dry, {{s}} watered the {plant} every morning.",
        f"After a month the {plant} began to grow.",
        f"{{S}} showed the {plant} to {friend.name}.",
        f"{{S}} picked the first {plant} and put them in a {rng.choice(OBJECTS)}.",
    ]
    end = f"{friend.name} thought the garden of {p.name} was {rng.choice(POS)}."
    return intro, steps, end


def _lessons(rng, p, friend):
    subject = rng.choice(SUBJECTS)
    intro = f"{p.name} decided to learn {subject} from {friend.name}, a {friend.job} in {p.town}."
    steps = []
    for lesson, what in enumerate(
        rng.sample(
            (
                "read the first chapter of an old book",
                "wrote notes in a notebook",
                "asked many questions",
                "made a few mistakes",
                "practised for two hours",
                "learned the basic rules",
                "solved a hard problem",
                "gave a short talk",
                "passed a small test",
                "helped another student",
            ),
            8,
        ),
        start=1,
    ):
        steps.append(f"In lesson {lesson}, {{s}} {what}.")
    end = f"After {rng.randint(9, 30)} lessons {p.name} knew a lot about {subject}."
    return intro, steps, end


SCENARIOS = (_recipe, _journey, _repair, _farm, _life, _workday, _garden, _lessons)


def make_document(rng: random.Random) -> list[str]:
    """Returns one document: 4-12 sentences in a meaningful order."""
    p = Person(rng)
    friend = Person(rng, exclude=(p.name,))
    intro, steps, end = rng.choice(SCENARIOS)(rng, p, friend)
    k = rng.randint(3, min(10, len(steps)))
    chosen = [steps[i] for i in sorted(rng.sample(range(len(steps)), k))]
    out = [intro]
    for i, s in enumerate(chosen):
        named = rng.random() < 0.15  # mostly pronouns after the introduction
        subj = p.name if named else p.subj
        if s.startswith("{S}"):
            if i == 0:
                conn = "First,"
            elif i == len(chosen) - 1:
                conn = "Finally,"
            else:
                conn = rng.choice(MIDDLE_CONNECTORS)
            s = f"{conn} {subj} {s[3:].lstrip()}"
        s = s.replace("{s}", subj).replace("{S}", cap(subj))
        out.append(cap(s))
    if rng.random() < 0.8:
        out.append(end)
    return out[:12]


# ------------------------------------------------------------------------------------------------
# Simple sentences for GLUE / SQuAD / RACE
# ------------------------------------------------------------------------------------------------


def simple_sentence(rng: random.Random) -> tuple[str, list[str]]:
    """A short declarative sentence and its content words (for overlap-based labels)."""
    p = Person(rng)
    adj, obj, place = rng.choice(ADJS), rng.choice(OBJECTS), rng.choice(PLACES)
    verb = rng.choice(("bought", "took", "gave", "picked", "repaired", "looked at"))
    tail = rng.choice((f"in the {place}", f"near the {place}", f"at the {place} in {p.town}"))
    return f"{p.name} {verb} the {adj} {obj} {tail}.", [p.name, verb, adj, obj, place]


def synonym_swap(s: str) -> str:
    for a, b in SYN.items():
        if re.search(rf"\b{re.escape(a)}\b", s):
            s = re.sub(rf"\b{re.escape(a)}\b", b, s)
        elif re.search(rf"\b{re.escape(b)}\b", s):
            s = re.sub(rf"\b{re.escape(b)}\b", a, s)
    return s


def binary_parse(sentence: str) -> str:
    toks = sentence.replace(".", " .").split()

    def rec(ts):
        return ts[0] if len(ts) == 1 else f"( {ts[0]} {rec(ts[1:])} )"

    return rec(toks)


def tree_parse(sentence: str) -> str:
    toks = sentence.replace(".", " .").split()
    return "(ROOT (S " + " ".join(f"(X {t})" for t in toks) + "))"


def _tsv(rows: list[list[str]]) -> str:
    for r in rows:
        for field in r:
            assert "\t" not in field and "\n" not in field, field
    return "".join("\t".join(r) + "\n" for r in rows)


def make_glue(rng: random.Random, n_train: int, n_eval: int) -> dict[str, str]:
    """Returns {relative path: file text} for the GLUE fixtures (real GLUE column layouts)."""
    files: dict[str, str] = {}
    splits = (("train", n_train), ("dev", n_eval), ("test", n_eval))

    # CoLA: no header on train/dev; test has "index\tsentence".
    for split, n in splits:
        rows = []
        for i in range(n):
            s, _ = simple_sentence(rng)
            good = rng.random() < 0.6
            if not good:
                words = s[:-1].split()
                how = rng.randint(0, 2)
                if how == 0:
                    rng.shuffle(words)
                elif how == 1:
                    words.insert(rng.randint(0, len(words)), words[rng.randrange(len(words))])
                else:
                    del words[1]  # drop the verb
                s = " ".join(words) + "."
            if split == "test":
                rows.append([str(i), s])
            else:
                rows.append(["demo01", "1" if good else "0", "" if good else "*", s])
        files[f"CoLA/{split}.tsv"] = (
            _tsv([["index", "sentence"]]) if split == "test" else ""
        ) + _tsv(rows)

    # SST-2: "sentence\tlabel"; test "index\tsentence".
    for split, n in splits:
        rows = []
        for i in range(n):
            label = rng.random() < 0.5
            w = rng.choice(POS if label else NEG)
            thing = rng.choice(DISHES + ["service", "music", "film", "story", "room"])
            form = rng.randint(0, 2)
            if form == 0:
                s = f"the {thing} was {w}"
            elif form == 1:
                s = f"{article(w)} {thing} from start to end"
            else:  # negation flips the word's polarity
                w = rng.choice(NEG if label else POS)
                s = f"the {thing} was not {w} at all"
            rows.append([str(i), s] if split == "test" else [s, str(int(label))])
        head = ["index", "sentence"] if split == "test" else ["sentence", "label"]
        files[f"SST-2/{split}.tsv"] = _tsv([head] + rows)

    # MRPC: "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String" (test: first column "index").
    for split, n in splits:
        rows = []
        for i in range(n):
            s1, _ = simple_sentence(rng)
            para = rng.random() < 0.6
            s2 = synonym_swap(s1) if para else simple_sentence(rng)[0]
            first = str(i) if split == "test" else str(int(para))
            rows.append([first, str(100000 + 2 * i), str(100001 + 2 * i), s1, s2])
        head = [
            "index" if split == "test" else "Quality",
            "#1 ID",
            "#2 ID",
            "#1 String",
            "#2 String",
        ]
        files[f"MRPC/{split}.tsv"] = _tsv([head] + rows)

    # STS-B: 10 columns (test: 9, no score); score = 5 x fraction of kept content words.
    head = "index genre filename year old_index source1 source2 sentence1 sentence2 score".split()
    for split, n in splits:
        rows = []
        for i in range(n):
            s1, words = simple_sentence(rng)
            k = rng.randint(0, len(words))
            s2 = s1
            for w in rng.sample(words, k):
                repl = rng.choice(ADJS + OBJECTS + PLACES)
                s2 = re.sub(rf"\b{re.escape(w)}\b", repl, s2, count=1)
            score = 5.0 * (1 - k / len(words))
            row = [str(i), "main-demo", "demo", "2024", f"{i:04d}", "none", "none", s1, s2]
            rows.append(row if split == "test" else row + [f"{score:.3f}"])
        files[f"STS-B/{split}.tsv"] = _tsv([head if split != "test" else head[:-1]] + rows)

    # QQP: "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate"; test "id\tquestion1\tquestion2".
    for split, n in splits:
        rows = []
        for i in range(n):
            obj = rng.choice(OBJECTS)
            q1 = rng.choice(
                (
                    f"How can I buy a big {obj} quickly?",
                    f"Where is the best shop for a {obj}?",
                    f"Why did my old {obj} stop working?",
                    f"What is a small {obj} used for?",
                )
            )
            dup = rng.random() < 0.5
            if dup:
                q2 = synonym_swap(q1)
            else:
                q2 = q1.replace(obj, rng.choice([o for o in OBJECTS if o != obj]))
            if split == "test":
                rows.append([str(i), q1, q2])
            else:
                rows.append([str(i), str(2 * i + 1), str(2 * i + 2), q1, q2, str(int(dup))])
        head = (
            ["id", "question1", "question2"]
            if split == "test"
            else ["id", "qid1", "qid2", "question1", "question2", "is_duplicate"]
        )
        files[f"QQP/{split}.tsv"] = _tsv([head] + rows)

    # NLI pairs shared by MNLI / RTE / diagnostic.
    def nli_pair():
        p = Person(rng)
        place, obj = rng.choice(PLACES), rng.choice(OBJECTS)
        premise = f"{p.name} bought {article(obj)} at the {place} in {p.town}."
        label = rng.choice(("entailment", "contradiction", "neutral"))
        if label == "entailment":
            hyp = rng.choice(
                (
                    f"{p.name} was at the {place}.",
                    f"{p.name} bought something.",
                    f"Someone bought {article(obj)}.",
                )
            )
        elif label == "contradiction":
            hyp = rng.choice(
                (
                    f"{p.name} never went to the {place}.",
                    f"{p.name} bought nothing.",
                    f"Nobody bought {article(obj)}.",
                )
            )
        else:
            hyp = rng.choice(
                (
                    f"{p.name} was {rng.choice(('happy', 'tired', 'angry'))}.",
                    f"{p.name} paid {price(rng)} for it.",
                    f"{p.name} lives in {p.town}.",
                )
            )
        return premise, hyp, label

    mnli_head = (
        "index promptID pairID genre sentence1_binary_parse sentence2_binary_parse "
        "sentence1_parse sentence2_parse sentence1 sentence2"
    ).split()
    for split, genres in (
        ("train", "fiction government slate telephone travel"),
        ("dev_matched", "fiction government slate telephone travel"),
        ("dev_mismatched", "facetoface letters nineeleven oup verbatim"),
        ("test_matched", "fiction government slate telephone travel"),
        ("test_mismatched", "facetoface letters nineeleven oup verbatim"),
    ):
        n = n_train if split == "train" else n_eval
        rows = []
        for i in range(n):
            s1, s2, label = nli_pair()
            row = [
                str(i),
                str(1000 + i),
                f"{1000 + i}e",
                rng.choice(genres.split()),
                binary_parse(s1),
                binary_parse(s2),
                tree_parse(s1),
                tree_parse(s2),
                s1,
                s2,
            ]
            if split == "train":
                row += [label, label]
            elif split.startswith("dev"):
                row += [label] * 6
            rows.append(row)
        if split == "train":
            head = mnli_head + ["label1", "gold_label"]
        elif split.startswith("dev"):
            head = mnli_head + [f"label{j}" for j in range(1, 6)] + ["gold_label"]
        else:
            head = mnli_head
        files[f"MNLI/{split}.tsv"] = _tsv([head] + rows)

    # diagnostic (AX): "index\tsentence1\tsentence2".
    rows = [[str(i)] + list(nli_pair()[:2]) for i in range(n_eval)]
    files["diagnostic/diagnostic.tsv"] = _tsv([["index", "sentence1", "sentence2"]] + rows)

    # QNLI: "index\tquestion\tsentence\tlabel".
    for split, n in splits:
        rows = []
        for i in range(n):
            p = Person(rng)
            obj, place = rng.choice(OBJECTS), rng.choice(PLACES)
            q = f"Where did {p.name} buy the {obj}?"
            ent = rng.random() < 0.5
            if ent:
                sent = f"{p.name} bought the {obj} at the {place} in {p.town}."
            else:
                sent = f"{p.name} gave the {obj} to a friend who worked at the {place}."
            label = "entailment" if ent else "not_entailment"
            rows.append([str(i), q, sent] + ([] if split == "test" else [label]))
        head = ["index", "question", "sentence"] + ([] if split == "test" else ["label"])
        files[f"QNLI/{split}.tsv"] = _tsv([head] + rows)

    # RTE: "index\tsentence1\tsentence2\tlabel" with entailment / not_entailment.
    for split, n in splits:
        rows = []
        for i in range(n):
            s1, s2, label = nli_pair()
            label = "entailment" if label == "entailment" else "not_entailment"
            rows.append([str(i), s1, s2] + ([] if split == "test" else [label]))
        head = ["index", "sentence1", "sentence2"] + ([] if split == "test" else ["label"])
        files[f"RTE/{split}.tsv"] = _tsv([head] + rows)

    # WNLI: pronoun resolution; the adjective says who the pronoun refers to.
    for split, n in splits:
        rows = []
        for i in range(n):
            a = Person(rng)
            b = Person(rng, exclude=(a.name,))
            while b.subj == a.subj:  # different pronouns, so the reference is decidable
                b = Person(rng, exclude=(a.name,))
            obj = rng.choice(OBJECTS)
            giver_trait = rng.random() < 0.5
            trait = (
                rng.choice(("generous", "kind")) if giver_trait else rng.choice(("hungry", "poor"))
            )
            because = b.subj if not giver_trait else a.subj
            s1 = f"{a.name} gave {b.name} the {obj} because {because} was {trait}."
            who = rng.choice((a, b))
            s2 = f"{who.name} was {trait}."
            correct = (who is a) == giver_trait
            rows.append([str(i), s1, s2] + ([] if split == "test" else [str(int(correct))]))
        head = ["index", "sentence1", "sentence2"] + ([] if split == "test" else ["label"])
        files[f"WNLI/{split}.tsv"] = _tsv([head] + rows)
    return files


# ------------------------------------------------------------------------------------------------
# SQuAD
# ------------------------------------------------------------------------------------------------


def _squad_paragraph(rng: random.Random, v2: bool, n_answers: int, pid: str, train: bool):
    """Builds one paragraph: context text with fact spans recorded as they are written."""
    p = Person(rng)
    friend = Person(rng, exclude=(p.name,))
    town2 = rng.choice([t for t in TOWNS if t != p.town])
    year = rng.randint(1850, 1990)
    cost = big_number(rng)
    obj = rng.choice(OBJECTS)
    parts: list[str] = []
    spans: dict[str, tuple[int, str]] = {}

    def add(text: str, **marks: str):
        start = sum(len(x) for x in parts)
        for key, val in marks.items():
            spans[key] = (start + text.index(val), val)
        parts.append(text)

    add(f"{p.name} was born in {p.town} in {year}. ", town=p.town, year=str(year))
    add(f"{cap(p.subj)} worked as {article(p.job)} for many years. ", job=p.job)
    add(
        f"In {year + rng.randint(18, 30)}, {p.subj} moved to {town2} with {friend.name}. ",
        town2=town2,
        friend=friend.name,
    )
    add(
        f"There {p.subj} bought a house for {cost} pounds and {article(rng.choice(ADJS))} {obj}. ",
        cost=f"{cost} pounds",
        obj=obj,
    )
    add(f"People in {town2} said the café of {p.name} was {rng.choice(POS)}.", town2b=town2)
    context = "".join(parts)
    questions = [
        ("town", f"Where was {p.name} born?"),
        ("year", f"In which year was {p.name} born?"),
        ("job", f"What was the job of {p.name}?"),
        ("town2", f"Where did {p.name} move to?"),
        ("friend", f"Who moved to {town2} with {p.name}?"),
        ("cost", f"How much did the house of {p.name} cost?"),
        ("obj", f"What else did {p.name} buy in {town2}?"),
    ]
    qas = []
    for j, (key, q) in enumerate(rng.sample(questions, 5)):
        start, text = spans[key]
        assert context[start : start + len(text)] == text
        ans = [{"text": text, "answer_start": start}] * n_answers
        qa = {"question": q, "id": f"{pid}q{j}", "answers": ans}
        if v2:
            qa["is_impossible"] = False
        qas.append(qa)
    if v2:  # unanswerable questions about a person or place not in the paragraph
        other = Person(rng, exclude=(p.name, friend.name))
        for j, q in enumerate(
            (
                f"Where was {other.name} born?",
                f"Who moved to {rng.choice([t for t in TOWNS if t not in context])} with {p.name}?",
            )
        ):
            qa = {"question": q, "id": f"{pid}u{j}", "answers": [], "is_impossible": True}
            if train:  # the official v2 training file carries plausible answers for these
                start, text = spans["town"]
                qa["plausible_answers"] = [{"text": text, "answer_start": start}]
            qas.append(qa)
    return p, {"context": context, "qas": qas}


def make_squad(rng: random.Random, n_train_par: int, n_dev_par: int) -> dict[str, str]:
    files = {}
    for version, v2 in (("1.1", False), ("2.0", True)):
        for split, n_par in (("train", n_train_par), ("dev", n_dev_par)):
            data = []
            for a in range(max(1, n_par // 4)):
                pars, title = [], None
                for b in range(4):
                    pid = f"{split}{version.replace('.', '')}{a:03d}{b}"
                    person, par = _squad_paragraph(
                        rng, v2, 1 if split == "train" else 3, pid, split == "train"
                    )
                    title = title or f"{person.name}_of_{person.town}"
                    pars.append(par)
                data.append({"title": title, "paragraphs": pars})
            doc = {"version": "v2.0" if v2 else "1.1", "data": data}
            files[f"squad/{split}-v{version}.json"] = json.dumps(doc, ensure_ascii=False) + "\n"
    return files


# ------------------------------------------------------------------------------------------------
# RACE
# ------------------------------------------------------------------------------------------------


def _race_item(rng: random.Random, level: str, idx: int) -> dict:
    p = Person(rng)
    friend = Person(rng, exclude=(p.name,))
    place1, place2 = rng.sample(PLACES, 2)
    dish = rng.choice(DISHES)
    t = rng.randint(6 * 60, 9 * 60)
    times = [t, t + rng.randint(30, 90)]
    times.append(times[-1] + rng.randint(60, 180))
    sents = [
        f"{p.name} lived in {p.town} and worked as {article(p.job)}.",
        f"At {clock(times[0])}, {p.subj} walked to the {place1}.",
        f"At {clock(times[1])}, {p.subj} met {friend.name} there and they talked about the {dish}.",
        f"At {clock(times[2])}, they went to the {place2} together.",
    ]
    if level == "high":  # longer articles for the "high" level
        sents += [make_document(rng)[0] for _ in range(3)]
    sents.append(f"{friend.name} said the {dish} was {rng.choice(POS)}.")
    qs = [
        (f"Where did {p.name} live?", p.town, [t_ for t_ in TOWNS if t_ != p.town]),
        (f"{p.name} went to the _ first.", place1, [x for x in PLACES if x not in (place1,)]),
        (
            f"Who did {p.name} meet?",
            friend.name,
            [n for n in FEMALE + MALE if n not in (p.name, friend.name)],
        ),
        (
            f"At what time did they go to the {place2}?",
            clock(times[2]),
            [clock(times[0]), clock(times[1]), clock(times[2] + 60)],
        ),
        (f"In {p.town}, {p.name} earned money as a _.", p.job, [j for j in JOBS if j != p.job]),
    ]
    questions, options, answers = [], [], []
    for q, right, pool in rng.sample(qs, rng.randint(2, 4)):
        wrong = rng.sample(pool, 3)
        opts = wrong + [right]
        rng.shuffle(opts)
        questions.append(q)
        options.append(opts)
        answers.append("ABCD"[opts.index(right)])
    return {
        "answers": answers,
        "options": options,
        "questions": questions,
        "article": " ".join(sents),
        "id": f"{level}{idx}.txt",
    }


def make_race(rng: random.Random, n_train: int, n_eval: int) -> dict[str, str]:
    files = {}
    for split, n in (("train", n_train), ("dev", n_eval), ("test", n_eval)):
        for level in ("middle", "high"):
            lines = [json.dumps(_race_item(rng, level, i), ensure_ascii=False) for i in range(n)]
            files[f"RACE/{split}/{level}/all.txt"] = "\n".join(lines) + "\n"
    return files


# ------------------------------------------------------------------------------------------------
# SentencePiece
# ------------------------------------------------------------------------------------------------

USER_SYMBOLS = ["(", ")", '"', "-", ".", "–", "£", "€"]


def _normalize_for_spm(line: str) -> str:
    # Same as albert_tf.data.tokenization.preprocess_text(lower=True); duplicated so this
    # script needs only the standard library and sentencepiece.
    out = unicodedata.normalize("NFKD", " ".join(line.strip().split()))
    return "".join(c for c in out if not unicodedata.combining(c)).lower()


def train_spm(lines: list[str], prefix: str, vocab_size: int, seed: int) -> int:
    """Trains the unigram model with the original's spm_train options; returns the vocab size.

    Writes `<prefix>.model` and `<prefix>.vocab`. The user-defined symbols go in as a list
    (sentencepiece CSV-quotes it), avoiding the original README's comma-list pitfall
    (docs/original.md §9.5, quirk 20). Sentences come from an iterator and the model from a
    writer, so no file path ends up in the stored trainer spec; one thread and a fixed seed
    make the output byte-identical.
    If `vocab_size` is more than the corpus supports, the largest supported size is used.
    """
    text = [_normalize_for_spm(x) for x in lines if x.strip()]
    opts = dict(
        pad_id=0,
        unk_id=1,
        eos_id=-1,
        bos_id=-1,
        control_symbols=["[CLS]", "[SEP]", "[MASK]"],
        user_defined_symbols=USER_SYMBOLS,
        shuffle_input_sentence=True,
        input_sentence_size=10000000,
        character_coverage=0.99995,
        model_type="unigram",
        num_threads=1,
        minloglevel=2,
    )

    def run(size: int) -> bytes:
        spm.set_random_generator_seed(seed)
        writer = io.BytesIO()
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(text), model_writer=writer, vocab_size=size, **opts
        )
        return writer.getvalue()

    try:
        proto = run(vocab_size)
    except RuntimeError as e:
        m = re.search(r"value <= (\d+)", str(e))
        if not m:
            raise
        vocab_size = int(m.group(1))
        logger.info("vocab_size too high for this corpus; using %d", vocab_size)
        proto = run(vocab_size)
    sp = spm.SentencePieceProcessor(model_proto=proto)
    # Same layout as spm_train's .vocab file: piece TAB score (C++ default float formatting).
    vocab = "".join(f"{sp.IdToPiece(i)}\t{sp.GetScore(i):g}\n" for i in range(sp.GetPieceSize()))
    write_bytes(prefix + ".model", proto)
    write_bytes(prefix + ".vocab", vocab.encode("utf-8"))
    return vocab_size


# ------------------------------------------------------------------------------------------------
# Main
# ------------------------------------------------------------------------------------------------


def write_bytes(path: str, data: bytes) -> None:
    """Writes atomically: a temporary sibling is renamed over `path` once complete."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def write_text(path: str, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def generate(
    output_dir: str, seed: int = 12345, small: bool = False, vocab_size: int = 2000
) -> dict:
    """Writes every demo file under `output_dir`; returns a summary dict."""
    # Separate generators per product, so changing one product's size leaves the others as is.
    sizes = (
        dict(
            docs=300,
            glue_train=60,
            glue_eval=20,
            squad_train=12,
            squad_dev=8,
            race_train=6,
            race_eval=3,
        )
        if small
        else dict(
            docs=3000,
            glue_train=300,
            glue_eval=100,
            squad_train=60,
            squad_dev=32,
            race_train=40,
            race_eval=10,
        )
    )
    rngs = {k: random.Random(f"{seed}-{k}") for k in ("corpus", "glue", "squad", "race")}
    docs = [make_document(rngs["corpus"]) for _ in range(sizes["docs"])]
    files: dict[str, str] = {}
    n_parts = 4
    for i in range(n_parts):
        part = docs[i::n_parts]
        files[f"corpus/part-{i:05d}.txt"] = "\n\n".join("\n".join(d) for d in part) + "\n"
    glue = make_glue(rngs["glue"], sizes["glue_train"], sizes["glue_eval"])
    files.update({f"glue/{k}": v for k, v in glue.items()})
    files.update(make_squad(rngs["squad"], sizes["squad_train"], sizes["squad_dev"]))
    files.update(make_race(rngs["race"], sizes["race_train"], sizes["race_eval"]))
    for rel, text in files.items():
        write_text(os.path.join(output_dir, rel), text)
    lines = [x for d in docs for x in d]
    vs = train_spm(lines, os.path.join(output_dir, "spm"), vocab_size, seed)
    words = {w for x in lines for w in re.findall(r"[\w']+", _normalize_for_spm(x))}
    total = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(output_dir) for f in fs)
    return {
        "documents": len(docs),
        "sentences": len(lines),
        "distinct_words": len(words),
        "corpus_bytes": sum(len(files[k].encode()) for k in files if k.startswith("corpus/")),
        "spm_vocab_size": vs,
        "files": len(files) + 2,
        "total_bytes": total,
    }


def main(argv=None) -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--output_dir", default=os.path.join(here, "demo"))
    ap.add_argument("--seed", type=int, default=12345)
    ap.add_argument("--small", action="store_true", help="tiny version for tests")
    ap.add_argument(
        "--vocab_size",
        type=int,
        default=None,
        help="SentencePiece vocab size (default 2000, or 400 with --small)",
    )
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    vocab_size = args.vocab_size or (400 if args.small else 2000)
    summary = generate(args.output_dir, args.seed, args.small, vocab_size)
    for k, v in summary.items():
        logger.info("%-15s %s", k, v)
    return 0


if __name__ == "__main__":
    sys.exit(main())
