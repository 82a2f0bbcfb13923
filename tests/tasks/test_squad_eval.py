"""SQuAD scoring: official normalization, EM/F1, v2 no-answer thresholds."""

import pytest

from albert_tf.tasks import squad_eval


def _dataset(questions):
    """questions: [(id, [gold texts])]."""
    return [
        {
            "paragraphs": [
                {
                    "context": "c",
                    "qas": [
                        {
                            "id": qid,
                            "question": "?",
                            "answers": [{"text": t, "answer_start": 0} for t in golds],
                        }
                        for qid, golds in questions
                    ],
                }
            ]
        }
    ]


def test_normalization():
    assert squad_eval.normalize_answer("The  Cat's, a-dog!") == "cats adog"
    assert squad_eval.normalize_answer("An apple; THE end.") == "apple end"
    assert squad_eval.normalize_answer("theatre") == "theatre"  # articles as words only


def test_exact_and_f1():
    assert squad_eval.exact_match("The Rose.", "rose") == 1
    assert squad_eval.f1("the cat sat", "cat sat down") == pytest.approx(0.8)
    assert squad_eval.f1("cat cat", "cat") == pytest.approx(2 * 0.5 * 1 / 1.5)
    assert squad_eval.f1("dog", "cat") == 0.0
    assert squad_eval.f1("", "") == 1.0 and squad_eval.f1("a", "") == 1.0  # both empty
    assert squad_eval.f1("cat", "") == 0.0


def test_evaluate_v1_takes_best_gold_and_counts_missing_as_zero(caplog):
    data = _dataset([("q1", ["Rose", "rose garden"]), ("q2", ["cat sat down"]), ("q3", ["x"])])
    got = squad_eval.evaluate_v1(data, {"q1": "the rose garden", "q2": "the cat sat"})
    assert got["exact_match"] == pytest.approx(100 / 3)
    assert got["f1"] == pytest.approx(100 * (1 + 0.8 + 0) / 3)
    assert "1 unanswered" in caplog.text


def test_evaluate_v2_scores_and_best_threshold():
    data = _dataset([("a", ["Rose"]), ("b", ["Paris"]), ("c", []), ("d", [])])
    preds = {"a": "Rose", "b": "London", "c": "", "d": "Tom"}
    probs = {"a": 0.1, "b": 0.9, "c": 0.8, "d": 0.3}
    got = squad_eval.evaluate_v2(data, preds, probs)
    assert got["exact"] == got["f1"] == 50.0 and got["total"] == 4
    assert got["HasAns_exact"] == 50.0 and got["NoAns_exact"] == 50.0
    assert got["HasAns_total"] == got["NoAns_total"] == 2
    # All empty: c, d right (2). Answering a (prob 0.1) first: 3 right -> 75% at 0.1.
    assert got["best_exact"] == got["best_f1"] == 75.0
    assert got["best_exact_thresh"] == got["best_f1_thresh"] == 0.1
    # Applying that threshold reproduces the best score.
    again = squad_eval.evaluate_v2(data, preds, probs, no_answer_threshold=0.1)
    assert again["exact"] == 75.0
    # The default threshold 1.0 turns a question with score 1.5 into "no answer".
    probs_hi = dict(probs, b=1.5)
    assert squad_eval.evaluate_v2(data, preds, probs_hi)["HasAns_exact"] == 50.0
    assert squad_eval.evaluate_v2(data, preds, dict(probs, a=1.5))["HasAns_exact"] == 0.0


def test_empty_data_is_an_error():
    with pytest.raises(ValueError, match="no questions"):
        squad_eval.evaluate_v1([], {})
    with pytest.raises(ValueError, match="no questions"):
        squad_eval.evaluate_v2([], {})
