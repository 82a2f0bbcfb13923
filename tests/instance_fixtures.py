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
