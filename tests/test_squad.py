"""SQuAD v1.1 model, loss and prediction post-processing."""

import numpy as np
import pytest
import tensorflow as tf

from albert_tf import checkpoints
from albert_tf.data.squad_data import SquadExample, SquadFeature
from albert_tf.squad import AlbertSquadV1, accumulate_spans, nbest_predictions, span_loss

from classifier_fixtures import tiny_config


def test_model_outputs_and_original_head_names():
    cfg = tiny_config()
    model = AlbertSquadV1(cfg)
    model.build()
    names = checkpoints.original_variable_map(model)
    assert names["cls/squad/output_weights"].shape == (2, cfg.hidden_size)
    assert names["cls/squad/output_bias"].shape == (2,)
    names["cls/squad/output_bias"].assign([0.5, -0.25])
    rng = np.random.default_rng(0)
    inputs = {"input_ids": tf.constant(rng.integers(0, cfg.vocab_size, (3, 10)), tf.int32),
              "input_mask": tf.ones([3, 10], tf.int32), "segment_ids": tf.zeros([3, 10], tf.int32)}
    out = model(inputs)
    hidden = model.albert(inputs)["sequence_output"].numpy()
    w = names["cls/squad/output_weights"].numpy()
    np.testing.assert_allclose(out["start_logits"], hidden @ w[0] + 0.5, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["end_logits"], hidden @ w[1] - 0.25, rtol=1e-5, atol=1e-6)


def test_span_loss_is_mean_negative_log_softmax():
    logits = np.random.default_rng(1).normal(size=(4, 7)).astype(np.float32)
    positions = np.array([0, 3, 6, 2])
    log_probs = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    want = -log_probs[np.arange(4), positions].mean()
    np.testing.assert_allclose(span_loss(tf.constant(logits), tf.constant(positions)), want,
                               rtol=1e-6)


# A paragraph of five pieces "▁Rose ▁lives ▁in ▁Foxton ▁." -> raw characters.
PARAGRAPH = "Rose lives in Foxton ."
STARTS, ENDS = [0, 5, 11, 14, 21], [3, 9, 12, 19, 21]


def _feature(unique_id, doc, max_context, example_index=0):
    """[CLS] q q [SEP] <doc pieces> [SEP]: paragraph pieces from position 4."""
    tokens = ["[CLS]", "▁who", "?", "[SEP]"] + [f"p{i}" for i in doc] + ["[SEP]"]
    return SquadFeature(
        unique_id=unique_id, example_index=example_index, doc_span_index=0,
        tok_start_to_orig_index=[STARTS[i] for i in doc],
        tok_end_to_orig_index=[ENDS[i] for i in doc],
        token_is_max_context={4 + k: flag for k, flag in enumerate(max_context)},
        tokens=tokens, input_ids=[], input_mask=[], segment_ids=[], paragraph_len=len(tokens),
        p_mask=[])


def _logits(length, **values):
    x = np.full(length, -10.0, np.float32)
    for k, v in values.items():
        x[int(k[1:])] = v
    return x


def test_nbest_filters_dedupes_and_normalizes():
    example = SquadExample("q1", "who?", PARAGRAPH)
    feature = _feature(1000000000, [0, 1, 2, 3, 4], [True] * 5)
    # Best pair (start 4 = "Rose", end 7 = "Foxton") is longer than max_answer_length
    # 3; start 2 is in the query; end 5 < start 6.
    start = _logits(10, p4=5.0, p2=9.0, p6=3.0, p7=1.0)
    end = _logits(10, p7=6.0, p4=2.0, p5=0.5)
    spans = accumulate_spans({}, [example], [feature],
                             {1000000000: (start, end)}, n_best_size=4, max_answer_length=3)
    keys = set(spans[0])
    assert (0, 0, 3) not in keys and (0, 0, 1) in keys  # "Rose .. Foxton" is too long
    assert all(s >= 0 for _, s, _ in keys)  # no query starts
    assert all(e >= s for _, s, e in keys)
    preds, nbest = nbest_predictions(spans, [example], [feature], n_best_size=3)
    # Candidates: (p4,p4) "Rose" 7.0, (p4,p5) "Rose lives" 5.5, (p6,p7) "in Foxton" 9.0,
    # (p7,p7) "Foxton" 7.0, (p6, p6)...
    assert preds["q1"] == "in Foxton"
    texts = [e["text"] for e in nbest["q1"]]
    assert texts[0] == "in Foxton" and len(texts) == 3 and len(set(texts)) == 3
    totals = np.array([e["start_log_prob"] + e["end_log_prob"] for e in nbest["q1"]])
    probs = np.exp(totals - totals.max())
    np.testing.assert_allclose([e["probability"] for e in nbest["q1"]], probs / probs.sum())
    assert list(totals) == sorted(totals, reverse=True)


def test_max_context_and_window_offsets():
    # Two windows: pieces 0-2 and 2-4; piece 2 ("in") is owned by the second only.
    example = SquadExample("q1", "who?", PARAGRAPH)
    first = _feature(1, [0, 1, 2], [True, True, False])
    second = _feature(2, [2, 3, 4], [True, True, True])
    results = {1: (_logits(8, p6=9.0), _logits(8, p6=9.0)),   # "in" in the first window
               2: (_logits(8, p5=1.0), _logits(8, p5=1.0))}   # "Foxton" in the second
    spans = accumulate_spans({}, [example], [first, second], results, 2, 5)
    preds, _ = nbest_predictions(spans, [example], [first, second], 5)
    assert preds["q1"] == "Foxton"


def test_ensembled_runs_average_and_no_candidate_gives_empty():
    example = SquadExample("q1", "who?", PARAGRAPH)
    other = SquadExample("q2", "who?", PARAGRAPH)
    f1 = _feature(1, [0, 1, 2, 3, 4], [True] * 5)
    f2 = _feature(2, [0, 1, 2, 3, 4], [False] * 5, example_index=1)
    run_a = {1: (_logits(10, p4=4.0), _logits(10, p4=2.0)), 2: (_logits(10), _logits(10))}
    run_b = {1: (_logits(10, p4=2.0), _logits(10, p4=0.0)), 2: (_logits(10), _logits(10))}
    spans = accumulate_spans({}, [example, other], [f1, f2], run_a, 1, 5)
    accumulate_spans(spans, [example, other], [f1, f2], run_b, 1, 5)
    preds, nbest = nbest_predictions(spans, [example, other], [f1, f2], 5)
    assert preds["q1"] == "Rose"
    assert nbest["q1"][0]["start_log_prob"] == pytest.approx(3.0)
    assert nbest["q1"][0]["end_log_prob"] == pytest.approx(1.0)
    assert preds["q2"] == "empty" and nbest["q2"][0]["probability"] == 1.0
