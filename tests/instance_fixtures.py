"""Synthetic corpora for the pretraining-instance tests."""

import random

from albert_tf.data import pretraining_instances as pi


def synthetic_corpus(num_docs=300, seed=0, vocab=5000):
    """Corpus whose token at flat index t is 10 + t % (vocab - 10): A/B slices are consecutive."""
    r = random.Random(seed)
    docs, t = [], 0
    for _ in range(num_docs):
        doc = []
        for _ in range(r.randint(1, 10)):
            n = r.randint(1, 40)
            doc.append([10 + (t + k) % (vocab - 10) for k in range(n)])
            t += n
        docs.append(doc)
    corpus = pi.Corpus.from_documents(docs)
    pieces = ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"] + [
        ("\u2581w%d" % i) if r.random() < 0.6 else ("x%s" % "abc"[i % 3]) for i in range(5, vocab)
    ]
    return corpus, pi.Vocab.from_pieces(pieces, spm_mode=True)


# Words with the tokenizer's special cases: accents, "digit,", apostrophes, punctuation.
WORDS = [
    "the",
    "cat",
    "sat",
    "on",
    "a",
    "mat",
    "running",
    "quickly",
    "caf\u00e9",
    "1990,",
    "it's",
    "(x)",
    "well...",
    "Zebra",
    "unbelievable",
    "x=y",
    "naive",
    "\u20ac5",
]


def write_documents(f, rng, num_docs, max_sentences, max_words, words=WORDS):
    """Writes `num_docs` documents in the original input format (one sentence per
    line, a blank line after each document) to the open text file `f`."""
    for _ in range(num_docs):
        for _ in range(rng.randint(1, max_sentences)):
            f.write(" ".join(rng.choice(words) for _ in range(rng.randint(1, max_words))) + "\n")
        f.write("\n")
