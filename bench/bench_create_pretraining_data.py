"""Benchmark: albert_tf.data.create_pretraining_data vs a straightforward port of the original.

    python bench/bench_create_pretraining_data.py [--corpus 'data/demo/corpus/part-*.txt']
        [--spm_model data/demo/spm.model] [--dupe_factor 5] [--max_seq_length 512] [--runs 3]

The peer (`baseline_create`) has the original's structure: every document of every file in
memory as lists of piece strings, all instances in memory, global document and instance
shuffles, per-line `FullTokenizer.tokenize`, per-token Python masking, and one
`tf.train.Example` proto per instance written with `tf.io.TFRecordWriter`. Only its n-gram
length draw takes a seeded numpy Generator (as in our fix) so that runs are comparable.

Reports documents/s and instances/s (median of --runs) for the baseline, our builder with one
worker, and with all cores; writes a Markdown table to bench/results/create_pretraining_data.md.
"""

from __future__ import annotations

import argparse
import glob
import importlib
import os
import random
import statistics
import sys
import tempfile
import time

import numpy as np

from albert_tf.data import create_pretraining_data as cpd
from albert_tf.data import pretraining_instances as pi
from albert_tf.data import tokenization

# ---------------------------------------------------------------------------------------------
# Peer: single-process port of the original algorithm (structure kept on purpose).
# ---------------------------------------------------------------------------------------------


def _read_documents(files, tokenizer, do_lower_case):
    docs = [[]]
    for path in files:
        with open(path, "r", encoding="utf-8") as f:
            for line in f:
                line = tokenization.preprocess_text(line, lower=do_lower_case)
                if not line:
                    docs.append([])
                pieces = tokenizer.tokenize(line)
                if pieces:
                    docs[-1].append(pieces)
    return [d for d in docs if d]


def _truncate_pair(a, b, max_num_tokens, rng):
    while len(a) + len(b) > max_num_tokens:
        longer = a if len(a) > len(b) else b
        if rng.random() < 0.5:
            del longer[0]
        else:
            longer.pop()


def _mask(tokens, cfg, vocab_words, rng, draw_ngram):
    """Returns (output_tokens, positions, labels, boundary) with the original's loops."""
    cands = []
    boundary = [0] * len(tokens)
    for i, t in enumerate(tokens):
        if t in ("[CLS]", "[SEP]"):
            boundary[i] = 1
            continue
        start = pi.is_start_piece_sp(t)
        if cfg.do_whole_word_mask and cands and not start:
            cands[-1].append(i)
        else:
            cands.append([i])
            if start:
                boundary[i] = 1
    out = list(tokens)
    if cfg.masked_lm_prob == 0:
        return out, [], [], boundary
    num_to_predict = min(
        cfg.max_predictions_per_seq, max(1, int(round(len(tokens) * cfg.masked_lm_prob)))
    )
    grams = []
    for idx in range(len(cands)):
        grams.append([cands[idx : idx + n] for n in range(1, cfg.ngram + 1)])
    rng.shuffle(grams)
    masked = []
    covered = set()
    for gset in grams:
        if len(masked) >= num_to_predict:
            break
        n = draw_ngram()
        index_set = sum(gset[n - 1], [])
        n -= 1
        while len(masked) + len(index_set) > num_to_predict:
            if n == 0:
                break
            index_set = sum(gset[n - 1], [])
            n -= 1
        if len(masked) + len(index_set) > num_to_predict:
            continue
        if any(i in covered for i in index_set):
            continue
        for i in index_set:
            covered.add(i)
            if rng.random() < 0.8:
                rep = "[MASK]"
            elif rng.random() < 0.5:
                rep = tokens[i]
            else:
                rep = vocab_words[rng.randint(0, len(vocab_words) - 1)]
            out[i] = rep
            masked.append((i, tokens[i]))
    rng.shuffle(grams)
    masked.sort(key=lambda x: x[0])
    return out, [m[0] for m in masked], [m[1] for m in masked], boundary


def _instances_from_document(docs, di, cfg, vocab_words, rng, draw_ngram):
    doc = docs[di]
    max_num_tokens = cfg.max_seq_length - 3
    target = max_num_tokens
    if rng.random() < cfg.short_seq_prob:
        target = rng.randint(2, max_num_tokens)
    out = []
    chunk, length, i = [], 0, 0
    while i < len(doc):
        chunk.append(doc[i])
        length += len(doc[i])
        if i == len(doc) - 1 or length >= target:
            a_end = 1 if len(chunk) < 2 else rng.randint(1, len(chunk) - 1)
            a = [t for seg in chunk[:a_end] for t in seg]
            b = []
            if len(chunk) == 1 or (cfg.random_next_sentence and rng.random() < 0.5):
                label = 1
                target_b = target - len(a)
                for _ in range(10):
                    ri = rng.randint(0, len(docs) - 1)
                    if ri != di:
                        break
                rdoc = docs[ri]
                for j in range(rng.randint(0, len(rdoc) - 1), len(rdoc)):
                    b.extend(rdoc[j])
                    if len(b) >= target_b:
                        break
                i -= len(chunk) - a_end
            elif not cfg.random_next_sentence and rng.random() < 0.5:
                label = 1
                b = [t for seg in chunk[a_end:] for t in seg]
                a, b = b, a
            else:
                label = 0
                b = [t for seg in chunk[a_end:] for t in seg]
            _truncate_pair(a, b, max_num_tokens, rng)
            tokens = ["[CLS]"] + a + ["[SEP]"] + b + ["[SEP]"]
            seg_ids = [0] * (len(a) + 2) + [1] * (len(b) + 1)
            toks, pos, labels, boundary = _mask(tokens, cfg, vocab_words, rng, draw_ngram)
            out.append((toks, seg_ids, pos, labels, boundary, label))
            chunk, length = [], 0
        i += 1
    return out


def baseline_create(
    files, output_file, tokenizer, cfg: pi.MaskingConfig, dupe_factor, rng, draw_ngram
):
    """The original's create_training_instances + write_instance_to_example_files. -> stats."""
    import tensorflow as tf

    docs = _read_documents(files, tokenizer, tokenizer.do_lower_case)
    rng.shuffle(docs)
    vocab_words = list(tokenizer.vocab.keys())
    instances = []
    for _ in range(dupe_factor):
        for di in range(len(docs)):
            instances.extend(_instances_from_document(docs, di, cfg, vocab_words, rng, draw_ngram))
    rng.shuffle(instances)

    def ints(v):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=list(v)))

    S, P = cfg.max_seq_length, cfg.max_predictions_per_seq
    with tf.io.TFRecordWriter(output_file) as w:
        for toks, seg_ids, pos, labels, boundary, label in instances:
            ids = tokenizer.convert_tokens_to_ids(toks)
            n = len(ids)
            lab_ids = tokenizer.convert_tokens_to_ids(labels)
            m = len(pos)
            feats = {
                "input_ids": ints(ids + [0] * (S - n)),
                "input_mask": ints([1] * n + [0] * (S - n)),
                "segment_ids": ints(seg_ids + [0] * (S - n)),
                "token_boundary": ints(boundary + [0] * (S - n)),
                "masked_lm_positions": ints(pos + [0] * (P - m)),
                "masked_lm_ids": ints(lab_ids + [0] * (P - m)),
                "masked_lm_weights": tf.train.Feature(
                    float_list=tf.train.FloatList(value=[1.0] * m + [0.0] * (P - m))
                ),
                "next_sentence_labels": ints([label]),
            }
            w.write(tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString())
    return dict(documents=len(docs), instances=len(instances))


def numpy_choice_drawer(np_rng, cfg):
    """n-gram length per call with Generator.choice (the original's per-call np.random.choice)."""
    grams = np.arange(1, cfg.ngram + 1)
    p = cfg.ngram_probs()
    return lambda: int(np_rng.choice(grams, p=p))


# ---------------------------------------------------------------------------------------------


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", default="data/demo/corpus/part-*.txt")
    ap.add_argument("--spm_model", default="data/demo/spm.model")
    ap.add_argument("--dupe_factor", type=int, default=5)
    ap.add_argument("--max_seq_length", type=int, default=512)
    ap.add_argument("--max_predictions_per_seq", type=int, default=20)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", default="bench/results/create_pretraining_data.md")
    args = ap.parse_args(argv)
    import logging

    logging.basicConfig(level=logging.WARNING)

    files = sorted(glob.glob(args.corpus))
    if not files:
        sys.exit(f"no corpus files match {args.corpus!r} (run: python3 data/make_demo_data.py)")
    tok = tokenization.FullTokenizer(spm_model_file=args.spm_model, do_lower_case=True)
    cfg = pi.MaskingConfig(
        max_seq_length=args.max_seq_length, max_predictions_per_seq=args.max_predictions_per_seq
    )
    ncpu = os.cpu_count() or 1
    rows = []
    with tempfile.TemporaryDirectory() as tmp:

        def run_baseline():
            rng = random.Random(12345)
            return baseline_create(
                files,
                os.path.join(tmp, "base.tfrecord"),
                tok,
                cfg,
                args.dupe_factor,
                rng,
                numpy_choice_drawer(np.random.default_rng(12345), cfg),
            )

        def run_ours(workers):
            return lambda: cpd.create_pretraining_data(
                ",".join(files),
                os.path.join(tmp, f"ours{workers}.tfrecord"),
                cfg,
                spm_model_file=args.spm_model,
                dupe_factor=args.dupe_factor,
                num_workers=workers,
            )

        importlib.import_module("tensorflow")  # the baseline's import, excluded from its times

        configs = [
            ("baseline (port of original, 1 process)", run_baseline),
            ("albert_tf, 1 worker", run_ours(1)),
            (f"albert_tf, {ncpu} workers", run_ours(ncpu)),
        ]
        for _, fn in configs[1:]:
            fn()  # warm-up: imports, worker start-up machinery
        times = {name: [] for name, _ in configs}
        stats = {}
        # Interleaved run by run: load changes on the shared machine hit every row alike.
        for _ in range(args.runs):
            for name, fn in configs:
                t = time.perf_counter()
                stats[name] = fn()
                times[name].append(time.perf_counter() - t)
        for name, _ in configs:
            sec, st = statistics.median(times[name]), stats[name]
            rows.append((name, sec, st["documents"] / sec, st["instances"] / sec, st["instances"]))
            print(f"{name}: {sec:.2f} s", flush=True)
    base = rows[0][3]
    lines = [
        "# create_pretraining_data benchmark",
        "",
        f"Corpus `{args.corpus}` ({len(files)} files, "
        f"{sum(os.path.getsize(f) for f in files) / 1e6:.2f} MB), dupe_factor={args.dupe_factor}, "
        f"max_seq_length={args.max_seq_length}, median of {args.runs} runs, {ncpu} CPU cores "
        "(shared machine), the rows interleaved run by run. Times include reading, "
        "tokenization and writing; imports and the start of the worker-process machinery are "
        "excluded (warm-up runs).",
        "",
        "| tool | seconds | documents/s | instances/s | instances | speed-up |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, sec, dps, ips, n in rows:
        lines.append(f"| {name} | {sec:.2f} | {dps:.0f} | {ips:.0f} | {n} | {ips / base:.1f}x |")
    text = "\n".join(lines) + "\n"
    print(text)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
