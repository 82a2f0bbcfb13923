"""SQuAD v1.1 / v2.0 models, losses and prediction post-processing."""

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.data.squad_data import SquadExample, SquadFeature
from albert_tf.tasks.squad import (
    AlbertSquadV1,
    AlbertSquadV2,
    accumulate_spans,
    accumulate_spans_v2,
    loss_fn_v2,
    nbest_predictions,
    nbest_predictions_v2,
    span_loss,
)
from albert_tf.weights import checkpoints

from classifier_fixtures import glue_config


def test_model_outputs_and_original_head_names():
    cfg = glue_config()
    model = AlbertSquadV1(cfg)
    model.build()
    names = checkpoints.original_variable_map(model)
    assert names["cls/squad/output_weights"].shape == (2, cfg.hidden_size)
    assert names["cls/squad/output_bias"].shape == (2,)
    names["cls/squad/output_bias"].assign([0.5, -0.25])
    rng = np.random.default_rng(0)
    inputs = {
        "input_ids": tf.constant(rng.integers(0, cfg.vocab_size, (3, 10)), tf.int32),
        "input_mask": tf.ones([3, 10], tf.int32),
        "segment_ids": tf.zeros([3, 10], tf.int32),
    }
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
    np.testing.assert_allclose(
        span_loss(tf.constant(logits), tf.constant(positions)), want, rtol=1e-6
    )


# A paragraph of five pieces "▁Rose ▁lives ▁in ▁Foxton ▁." -> raw characters.
PARAGRAPH = "Rose lives in Foxton ."
STARTS, ENDS = [0, 5, 11, 14, 21], [3, 9, 12, 19, 21]


def _feature(unique_id, doc, max_context, example_index=0):
    """[CLS] q q [SEP] <doc pieces> [SEP]: paragraph pieces from position 4."""
    tokens = ["[CLS]", "▁who", "?", "[SEP]"] + [f"p{i}" for i in doc] + ["[SEP]"]
    return SquadFeature(
        unique_id=unique_id,
        example_index=example_index,
        doc_span_index=0,
        tok_start_to_orig_index=[STARTS[i] for i in doc],
        tok_end_to_orig_index=[ENDS[i] for i in doc],
        token_is_max_context={4 + k: flag for k, flag in enumerate(max_context)},
        tokens=tokens,
        input_ids=[],
        input_mask=[],
        segment_ids=[],
        paragraph_len=len(tokens),
        p_mask=[],
    )


def _logits(length, **values):
    x = np.full(length, -10.0, np.float32)
    for k, v in values.items():
        x[int(k[1:])] = v
    return x


def _run(start, end):
    return {"start_logits": start, "end_logits": end}


def test_nbest_filters_dedupes_and_normalizes():
    example = SquadExample("q1", "who?", PARAGRAPH)
    feature = _feature(1000000000, [0, 1, 2, 3, 4], [True] * 5)
    # Best pair (start 4 = "Rose", end 7 = "Foxton") is longer than max_answer_length
    # 3; start 2 is in the query; end 5 < start 6.
    start = _logits(10, p4=5.0, p2=9.0, p6=3.0, p7=1.0)
    end = _logits(10, p7=6.0, p4=2.0, p5=0.5)
    spans = accumulate_spans(
        {},
        [example],
        [feature],
        {1000000000: {"start_logits": start, "end_logits": end}},
        n_best_size=4,
        max_answer_length=3,
    )
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
    results = {
        1: _run(_logits(8, p6=9.0), _logits(8, p6=9.0)),  # "in" in the first window
        2: _run(_logits(8, p5=1.0), _logits(8, p5=1.0)),
    }  # "Foxton" in the second
    spans = accumulate_spans({}, [example], [first, second], results, 2, 5)
    preds, _ = nbest_predictions(spans, [example], [first, second], 5)
    assert preds["q1"] == "Foxton"


def test_ensembled_runs_average_and_no_candidate_gives_empty():
    example = SquadExample("q1", "who?", PARAGRAPH)
    other = SquadExample("q2", "who?", PARAGRAPH)
    f1 = _feature(1, [0, 1, 2, 3, 4], [True] * 5)
    f2 = _feature(2, [0, 1, 2, 3, 4], [False] * 5, example_index=1)
    run_a = {1: _run(_logits(10, p4=4.0), _logits(10, p4=2.0)), 2: _run(_logits(10), _logits(10))}
    run_b = {1: _run(_logits(10, p4=2.0), _logits(10, p4=0.0)), 2: _run(_logits(10), _logits(10))}
    spans = accumulate_spans({}, [example, other], [f1, f2], run_a, 1, 5)
    accumulate_spans(spans, [example, other], [f1, f2], run_b, 1, 5)
    preds, nbest = nbest_predictions(spans, [example, other], [f1, f2], 5)
    assert preds["q1"] == "Rose"
    assert nbest["q1"][0]["start_log_prob"] == pytest.approx(3.0)
    assert nbest["q1"][0]["end_log_prob"] == pytest.approx(1.0)
    assert preds["q2"] == "empty" and nbest["q2"][0]["probability"] == 1.0


# --------------------------------------------------------------------------------------
# v2
# --------------------------------------------------------------------------------------
def _np_layer_norm(x, gamma, beta, eps=1e-12):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def _np_log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def _np_v2_head(h, p_mask, w, start_positions=None, k1=2, k2=3):
    """The run_squad_v2.py head written from the math (§12.5); h [B, S, H] float64."""

    def mask(x, p):
        return x * (1 - p) - 1e30 * p

    start = mask(h @ w["start_logits/dense/kernel"][:, 0] + w["start_logits/dense/bias"][0], p_mask)
    start_lp = _np_log_softmax(start)

    def end_logits(start_vec):  # start_vec [B, H] -> [B, S]
        x = np.concatenate([h, np.repeat(start_vec[:, None], h.shape[1], 1)], -1)
        x = np.tanh(x @ w["end_logits/dense_0/kernel"] + w["end_logits/dense_0/bias"])
        x = _np_layer_norm(x, w["end_logits/LayerNorm/gamma"], w["end_logits/LayerNorm/beta"])
        return mask(
            x @ w["end_logits/dense_1/kernel"][:, 0] + w["end_logits/dense_1/bias"][0], p_mask
        )

    probs = np.exp(start_lp)
    feature = np.concatenate([(probs[..., None] * h).sum(1), h[:, 0]], -1)
    hidden = np.tanh(feature @ w["answer_class/dense_0/kernel"] + w["answer_class/dense_0/bias"])
    cls_logits = hidden @ w["answer_class/dense_1/kernel"][:, 0]
    rows = np.arange(h.shape[0])
    if start_positions is not None:
        return {
            "start_log_probs": start_lp,
            "cls_logits": cls_logits,
            "end_log_probs": _np_log_softmax(end_logits(h[rows, start_positions])),
        }
    start_index = np.argsort(-start_lp, axis=-1, kind="stable")[:, :k1]
    end_lp, end_index = [], []
    for k in range(k1):
        lp = _np_log_softmax(end_logits(h[rows, start_index[:, k]]))
        idx = np.argsort(-lp, axis=-1, kind="stable")[:, :k2]
        end_index.append(idx)
        end_lp.append(np.take_along_axis(lp, idx, -1))
    return {
        "start_top_index": start_index,
        "start_top_log_probs": np.take_along_axis(start_lp, start_index, -1),
        "end_top_index": np.concatenate(end_index, -1),
        "end_top_log_probs": np.concatenate(end_lp, -1),
        "cls_logits": cls_logits,
    }


def test_v2_head_names_and_numerics_match_a_numpy_reference():
    cfg = glue_config()
    model = AlbertSquadV2(cfg, start_n_top=2, end_n_top=3, dropout_prob=0.1)
    model.build()
    names = checkpoints.original_variable_map(model)
    h_ = cfg.hidden_size
    want_shapes = {
        "start_logits/dense/kernel": (h_, 1),
        "start_logits/dense/bias": (1,),
        "end_logits/dense_0/kernel": (2 * h_, h_),
        "end_logits/dense_0/bias": (h_,),
        "end_logits/LayerNorm/beta": (h_,),
        "end_logits/LayerNorm/gamma": (h_,),
        "end_logits/dense_1/kernel": (h_, 1),
        "end_logits/dense_1/bias": (1,),
        "answer_class/dense_0/kernel": (2 * h_, h_),
        "answer_class/dense_0/bias": (h_,),
        "answer_class/dense_1/kernel": (h_, 1),
    }
    head_names = {n: tuple(v.shape) for n, v in names.items() if not n.startswith("bert/")}
    assert head_names == want_shapes
    rng = np.random.default_rng(3)
    for name, var in names.items():  # non-trivial biases and layer-norm parameters
        if not name.startswith("bert/"):
            var.assign(rng.normal(scale=0.3, size=var.shape) + (1.0 if "gamma" in name else 0.0))
    b, s = 3, 12
    p_mask = np.ones((b, s), np.int32)
    p_mask[:, 0] = 0
    p_mask[:, 5:10] = 0
    p_mask[2, 8:] = 1
    inputs = {
        "input_ids": tf.constant(rng.integers(5, cfg.vocab_size, (b, s)), tf.int32),
        "input_mask": tf.ones([b, s], tf.int32),
        "segment_ids": tf.zeros([b, s], tf.int32),
        "p_mask": tf.constant(p_mask),
    }
    h = model.albert(inputs)["sequence_output"].numpy().astype(np.float64)
    w = {n: v.numpy().astype(np.float64) for n, v in names.items()}
    got = model(inputs, training=False)
    want = _np_v2_head(h, p_mask.astype(np.float64), w)
    for key in ("start_top_index", "end_top_index"):
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    for key in ("start_top_log_probs", "end_top_log_probs", "cls_logits"):
        np.testing.assert_allclose(got[key], want[key], rtol=1e-5, atol=1e-5, err_msg=key)
    allowed = [set(np.flatnonzero(row == 0)) for row in p_mask]  # masked positions: never
    assert all(set(got["end_top_index"].numpy()[i]) <= allowed[i] for i in range(b))
    # Training (no dropout so the answer class is deterministic): the gold start.
    model.squad_v2.dropout_prob = 0.0
    starts = np.array([0, 6, 7])
    got = model({**inputs, "start_positions": tf.constant(starts)}, training=True)
    want = _np_v2_head(h, p_mask.astype(np.float64), w, start_positions=starts)
    for key in ("start_log_probs", "end_log_probs", "cls_logits"):
        finite = want[key] > -1e29
        np.testing.assert_allclose(
            np.asarray(got[key])[finite], want[key][finite], rtol=1e-5, atol=1e-5, err_msg=key
        )


def test_v2_loss_adds_half_the_answer_class_loss():
    out = {
        "start_log_probs": tf.math.log([[0.5, 0.25, 0.25]]),
        "end_log_probs": tf.math.log([[0.2, 0.2, 0.6]]),
        "cls_logits": tf.constant([0.3]),
    }
    model = lambda features, training: out  # noqa: E731
    features = {
        "start_positions": tf.constant([1]),
        "end_positions": tf.constant([2]),
        "is_impossible": tf.constant([1]),
    }
    loss, _ = loss_fn_v2(model, features, True)
    answer = np.log1p(np.exp(-0.3))  # sigmoid CE with label 1
    want = (-np.log(0.25) - np.log(0.6)) / 2 + answer / 2
    np.testing.assert_allclose(loss, want, rtol=1e-6)


def _v2_run(start_index, start_lp, end_index, end_lp, cls):
    return {
        "start_top_index": np.array(start_index),
        "start_top_log_probs": np.array(start_lp),
        "end_top_index": np.array(end_index),
        "end_top_log_probs": np.array(end_lp),
        "cls_logits": np.float32(cls),
    }


def test_v2_null_scores_threshold_and_fallback():
    example = SquadExample("q1", "who?", PARAGRAPH)
    f1 = _feature(1, [0, 1, 2], [True, True, True])
    f2 = _feature(2, [2, 3, 4], [False, True, True])
    results = {  # beam of 2 starts x 1 end; start 2 is in the query, start 4 = "Rose"
        1: _v2_run([4, 2], [-0.1, -0.2], [5, 5], [-0.3, -0.1], cls=2.0),
        2: _v2_run([5, 6], [-1.0, -2.0], [6, 7], [-1.0, -0.5], cls=-1.0),
    }
    spans, nulls = accumulate_spans_v2({}, {}, [example], [f1, f2], results, 30, 2, 1)
    # (2, 5): start in the query; (6, 7): end on the last [SEP].
    assert set(spans[0]) == {(0, 0, 1), (1, 1, 2)}
    assert nulls == {0: [-1.0]}  # the smallest cls_logits over the windows
    accumulate_spans_v2(spans, nulls, [example], [f1, f2], results, 30, 2, 1)
    assert nulls == {0: [-1.0, -1.0]}
    preds, nbest, odds = nbest_predictions_v2(spans, nulls, [example], [f1, f2], 5)
    assert preds["q1"] == "Rose lives" and odds["q1"] == -1.0
    assert nbest_predictions_v2(spans, nulls, [example], [f1, f2], 5, threshold=-1.0)[0] == {
        "q1": ""
    }
    assert nbest_predictions_v2(spans, nulls, [example], [f1, f2], 5, threshold=-0.5)[0] == {
        "q1": "Rose lives"
    }
    _, nbest, _ = nbest_predictions_v2({}, {0: [0.0]}, [example], [f1], 5)
    assert nbest["q1"] == [
        {"text": "", "probability": 1.0, "start_log_prob": -1e6, "end_log_prob": -1e6}
    ]


@pytest.mark.slow
@pytest.mark.parametrize("task", ["squad_v1", "squad_v2"])
def test_prediction_over_two_replicas_equals_one_device(tmp_path, task):
    """Every feature once, with the logits of a single device (7 questions, global batch 6
    over two replicas: the last batches are padded)."""
    from worker_fixtures import run_script

    for strategy in ("default", "mirrored2"):
        run_script("replica_predict_script.py", task, strategy, tmp_path / f"{strategy}.npz")
    one, two = (np.load(tmp_path / f"{s}.npz") for s in ("default", "mirrored2"))
    assert (int(one["replicas"]), int(two["replicas"])) == (1, 2)
    np.testing.assert_array_equal(one["unique_ids"], sorted(one["feature_ids"]))
    assert len(one["unique_ids"]) > 7  # several windows per question
    for key in one.files:
        if key != "replicas":
            np.testing.assert_allclose(two[key], one[key], rtol=1e-5, atol=1e-6, err_msg=key)
