"""Tests of the instance builder: invariants, statistics, and equality with the original's
structure (the benchmark's peer port) under identical RNG streams."""

import importlib.util
import math
import os
import random

import numpy as np
import pytest

from albert_tf.data import example_serialization as es
from albert_tf.data import pretraining_instances as pi

from instance_fixtures import synthetic_corpus as _synthetic
from instance_fixtures import write_documents
from repo_paths import REPO_ROOT

ROOT = REPO_ROOT


def test_start_piece_rule_quirks():
    # Spec §8.5 / §15 item 17.
    starts = [
        "\u2581the",
        "<unk>",
        ".",
        "-",
        "'s",
        "9",
        "x9",
        "=",
        "a>b",
        "\u00e9t\u00e9",
        "\u20ac",
        "\u00a3",
    ]
    conts = ["s", "ing", "..", "Ab", "ab-cd", "e.g", "[CLS]"]  # specials: by position, not rule
    for p in starts:
        assert pi.is_start_piece_sp(p), p
    for p in conts:
        assert not pi.is_start_piece_sp(p), p
    assert pi.is_start_piece_wordpiece("word") and not pi.is_start_piece_wordpiece("##ing")


def test_shuffle_like_random_is_exact():
    for n in (0, 1, 2, 5, 129, 1000):
        a, b = random.Random(n), random.Random(n)
        x, y = list(range(n)), list(range(n))
        a.shuffle(x)
        pi.shuffle_like_random(y, b)
        assert x == y and a.random() == b.random()


def _build(cfg, seed=1, dupe=3, num_docs=300):
    corpus, vocab = _synthetic(num_docs)
    b = pi.InstanceBuilder(cfg, vocab, random.Random(seed), np.random.default_rng(seed))
    return corpus, vocab, b.create_instances(corpus, dupe)


def _binom_ok(k, n, p, z=5.0):
    return abs(k - n * p) <= z * math.sqrt(n * p * (1 - p)) + 1


def test_invariants_and_statistics():
    cfg = pi.MaskingConfig(max_seq_length=64, max_predictions_per_seq=10, masked_lm_prob=0.15)
    corpus, vocab, insts = _build(cfg)
    assert len(insts) > 1000
    labels1 = mask_n = keep_n = rand_n = total_masked = 0
    for inst in insts:
        ids, seg = inst.input_ids, inst.segment_ids
        n = ids.shape[0]
        assert 5 <= n <= cfg.max_seq_length
        seps = np.flatnonzero(ids == vocab.sep_id)
        assert ids[0] == vocab.cls_id and len(seps) == 2 and seps[1] == n - 1
        la = seps[0] - 1
        assert la >= 1 and n - la - 3 >= 1
        assert (seg[: la + 2] == 0).all() and (seg[la + 2 :] == 1).all()
        pos, lab = inst.masked_lm_positions, inst.masked_lm_ids
        ntp = min(cfg.max_predictions_per_seq, max(1, round(n * cfg.masked_lm_prob)))
        assert 1 <= len(pos) <= ntp
        assert (np.diff(pos) > 0).all() and pos.min() >= 1 and pos.max() <= n - 2
        assert not np.isin(pos, [0, la + 1, n - 1]).any()
        # Restored sides are contiguous corpus slices -> labels are the original tokens.
        orig = ids.copy()
        orig[pos] = lab
        mod = vocab.size - 10
        for side in (orig[1 : la + 1], orig[la + 2 : n - 1]):
            assert ((np.diff(side.astype(np.int64) - 10) % mod) == 1).all()
        # Boundary: 1 for specials, else the start-piece table.
        exp = vocab.is_start[orig].astype(np.int32)
        exp[[0, la + 1, n - 1]] = 1
        np.testing.assert_array_equal(inst.token_boundary, exp)
        out = ids[pos]
        mask_n += int((out == vocab.mask_id).sum())
        keep_n += int(((out == lab) & (out != vocab.mask_id)).sum())
        rand_n += int(((out != lab) & (out != vocab.mask_id)).sum())
        total_masked += len(pos)
        labels1 += inst.next_sentence_label
    assert _binom_ok(mask_n, total_masked, 0.8)
    assert _binom_ok(keep_n, total_masked, 0.1 + 0.1 / vocab.size, z=5)
    assert _binom_ok(rand_n, total_masked, 0.1 - 0.1 / vocab.size, z=5)
    # SOP: 50% swaps among multi-segment chunks plus random-document negatives -> >= 50% label 1.
    frac = labels1 / len(insts)
    assert 0.45 < frac < 0.8


def test_ngram_sampler_distribution():
    cfg = pi.MaskingConfig(ngram=3)
    s = pi._NgramSampler(np.random.default_rng(0), cfg.ngram_probs())
    draws = np.array([s.draw() for _ in range(30000)])
    for n, p in zip((1, 2, 3), (6 / 11, 3 / 11, 2 / 11)):
        assert _binom_ok(int((draws == n).sum()), len(draws), p)
    rev = pi.MaskingConfig(ngram=3, favor_shorter_ngram=False).ngram_probs()
    np.testing.assert_allclose(rev, [2 / 11, 3 / 11, 6 / 11])


def test_mask_rate_respects_cap_and_rounding():
    cfg = pi.MaskingConfig(max_seq_length=128, max_predictions_per_seq=5, masked_lm_prob=0.15)
    _, _, insts = _build(cfg, dupe=1)
    for inst in insts:
        n = inst.input_ids.shape[0]
        assert len(inst.masked_lm_positions) <= min(5, max(1, round(n * 0.15)))
    # Nearly all instances reach the target (fallback to shorter n-grams).
    full = sum(
        len(i.masked_lm_positions) == min(5, max(1, round(len(i.input_ids) * 0.15))) for i in insts
    )
    assert full >= 0.95 * len(insts)


def test_no_masking_when_prob_zero_and_unmasked_mode():
    _, _, insts = _build(pi.MaskingConfig(max_seq_length=32, masked_lm_prob=0.0), dupe=1)
    assert all(len(i.masked_lm_positions) == 0 for i in insts)
    _, vocab, insts = _build(pi.MaskingConfig(max_seq_length=32, do_masking=False), dupe=1)
    assert all((i.input_ids != vocab.mask_id).all() for i in insts)


def test_config_validation():
    for bad in (
        dict(max_seq_length=4),
        dict(max_predictions_per_seq=0),
        dict(masked_lm_prob=1.5),
        dict(masked_lm_prob=-0.1),
        dict(ngram=0),
        dict(short_seq_prob=2.0),
    ):
        with pytest.raises(ValueError):
            pi.MaskingConfig(**bad).validate()


def _load_bench():
    path = os.path.join(ROOT, "bench", "bench_create_pretraining_data.py")
    spec = importlib.util.spec_from_file_location("bench_cpd", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_equal_to_original_structure_port(tmp_path):
    """Same Python RNG seed and n-gram draws -> identical examples to the original's algorithm."""
    tf = pytest.importorskip("tensorflow")
    spm_model = os.path.join(ROOT, "data", "demo", "spm.model")
    if not os.path.exists(spm_model):
        pytest.skip("demo SentencePiece model not generated")
    from albert_tf.data import pretraining_units as pu
    from albert_tf.data import tokenization

    bench = _load_bench()
    r = random.Random(3)
    path = tmp_path / "c.txt"
    with open(path, "w", encoding="utf-8") as f:
        write_documents(f, r, 40, max_sentences=8, max_words=25)
    tok = tokenization.FullTokenizer(spm_model_file=spm_model, do_lower_case=True)
    cfg = pi.MaskingConfig(max_seq_length=48, max_predictions_per_seq=7, short_seq_prob=0.3)
    base_out = str(tmp_path / "base.tfrecord")
    bench.baseline_create(
        [str(path)],
        base_out,
        tok,
        cfg,
        2,
        random.Random(7),
        pi._NgramSampler(np.random.default_rng(9), cfg.ngram_probs()).draw,
    )
    corpus = pu.read_unit(
        pu.Unit(0, 0, 0, str(path), 0, os.path.getsize(path)), pu.FastTokenizer(tok)
    )
    b = pi.InstanceBuilder(
        cfg, pi.Vocab.from_tokenizer(tok), random.Random(7), np.random.default_rng(9)
    )
    ours = [es.serialize_example(i, 48, 7) for i in b.create_instances(corpus, 2)]
    theirs = list(tf.data.TFRecordDataset(base_out).as_numpy_iterator())
    assert len(ours) == len(theirs) > 50
    for a, c in zip(ours, theirs):
        fa = tf.train.Example.FromString(a).features.feature
        fc = tf.train.Example.FromString(c).features.feature
        assert set(fa) == set(fc)
        for k in fa:
            assert fa[k] == fc[k], k
