"""SQuAD scoring: the official v1.1 and v2.0 evaluation definitions (§12.6).

Answers are compared after normalization (lower case, punctuation and the
articles a/an/the removed, whitespace collapsed). Exact match is equality of the
normalized strings; F1 is the harmonic mean of token precision and recall on the
normalized tokens. A question scores its best value over its gold answers;
results are percentages over all questions of the data set (unanswered ones
count 0).

v2.0 adds unanswerable questions: their only gold answer is "", and a question
is predicted unanswerable when its no-answer score exceeds a threshold. The best
threshold is searched on the same data (as the original reports it).
"""

from __future__ import annotations

import collections
import logging
import re
import string
from typing import Mapping, Sequence

_logger = logging.getLogger(__name__)

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """Lower case, no punctuation, no articles, single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, gold: str) -> int:
    return int(normalize_answer(prediction) == normalize_answer(gold))


def f1(prediction: str, gold: str) -> float:
    """Token-overlap F1; when either side is empty (no answer), 1 if both are, else 0."""
    pred_tokens, gold_tokens = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not pred_tokens or not gold_tokens:
        return float(pred_tokens == gold_tokens)
    common = sum((collections.Counter(pred_tokens) & collections.Counter(gold_tokens)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred_tokens), common / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def _questions(dataset: Sequence[Mapping]):
    for article in dataset:
        for paragraph in article["paragraphs"]:
            yield from paragraph["qas"]


def evaluate_v1(dataset: Sequence[Mapping], predictions: Mapping[str, str]) -> dict:
    """Official v1.1 scores: {"exact_match", "f1"} in percent over all questions of
    `dataset` (the JSON's `data` list)."""
    total = em_sum = f1_sum = 0.0
    missing = 0
    for qa in _questions(dataset):
        total += 1
        if qa["id"] not in predictions:
            missing += 1
            continue
        golds = [a["text"] for a in qa["answers"]]
        prediction = predictions[qa["id"]]
        em_sum += max(exact_match(prediction, g) for g in golds)
        f1_sum += max(f1(prediction, g) for g in golds)
    if missing:
        _logger.warning("%d unanswered questions score 0", missing)
    if not total:
        raise ValueError("the data set has no questions")
    return {"exact_match": 100.0 * em_sum / total, "f1": 100.0 * f1_sum / total}


def raw_scores_v2(dataset: Sequence[Mapping], predictions: Mapping[str, str]):
    """Per-question exact and F1 ({qid: score}); unanswerable golds are [""]."""
    exact, f1s = {}, {}
    for qa in _questions(dataset):
        golds = [a["text"] for a in qa["answers"] if normalize_answer(a["text"])] or [""]
        if qa["id"] not in predictions:
            _logger.warning("missing prediction for %s", qa["id"])
            continue
        prediction = predictions[qa["id"]]
        exact[qa["id"]] = max(exact_match(prediction, g) for g in golds)
        f1s[qa["id"]] = max(f1(prediction, g) for g in golds)
    return exact, f1s


def apply_no_answer_threshold(
    scores: Mapping[str, float],
    no_answer_probs: Mapping[str, float],
    has_answer: Mapping[str, bool],
    threshold: float,
) -> dict:
    """Scores with questions whose no-answer score exceeds `threshold` predicted empty."""
    return {
        qid: (float(not has_answer[qid]) if no_answer_probs[qid] > threshold else s)
        for qid, s in scores.items()
    }


def best_threshold(
    predictions: Mapping[str, str],
    scores: Mapping[str, float],
    no_answer_probs: Mapping[str, float],
    has_answer: Mapping[str, bool],
):
    """(best score in percent, threshold): sweep the threshold up through the sorted
    no-answer scores, answering one more question each step."""
    current = best = sum(1 for qid in has_answer if not has_answer[qid])
    threshold = 0.0
    for qid in sorted(no_answer_probs, key=lambda k: no_answer_probs[k]):
        if qid not in scores:
            continue
        if has_answer[qid]:
            current += scores[qid]
        elif predictions[qid]:
            current -= 1
        if current > best:
            best, threshold = current, no_answer_probs[qid]
    return 100.0 * best / len(scores), threshold


def evaluate_v2(
    dataset: Sequence[Mapping],
    predictions: Mapping[str, str],
    no_answer_probs: Mapping[str, float] | None = None,
    no_answer_threshold: float = 1.0,
) -> dict:
    """Official v2.0 scores: exact, f1, total, HasAns_/NoAns_ breakdowns, and with
    `no_answer_probs` the best_exact / best_f1 and their thresholds."""
    has_answer = {qa["id"]: bool(qa["answers"]) for qa in _questions(dataset)}
    if not has_answer:
        raise ValueError("the data set has no questions")
    probs = no_answer_probs if no_answer_probs is not None else {k: 0.0 for k in has_answer}
    exact_raw, f1_raw = raw_scores_v2(dataset, predictions)
    exact = apply_no_answer_threshold(exact_raw, probs, has_answer, no_answer_threshold)
    f1s = apply_no_answer_threshold(f1_raw, probs, has_answer, no_answer_threshold)

    def summary(ids):
        ids = list(ids)
        return {
            "exact": 100.0 * sum(exact[k] for k in ids) / len(ids),
            "f1": 100.0 * sum(f1s[k] for k in ids) / len(ids),
            "total": len(ids),
        }

    result = summary(exact)
    for prefix, wanted in (("HasAns", True), ("NoAns", False)):
        ids = [k for k in exact if has_answer[k] == wanted]
        if ids:
            result.update({f"{prefix}_{k}": v for k, v in summary(ids).items()})
    if no_answer_probs is not None:
        result["best_exact"], result["best_exact_thresh"] = best_threshold(
            predictions, exact_raw, no_answer_probs, has_answer
        )
        result["best_f1"], result["best_f1_thresh"] = best_threshold(
            predictions, f1_raw, no_answer_probs, has_answer
        )
    return result


__all__ = [
    "normalize_answer",
    "exact_match",
    "f1",
    "evaluate_v1",
    "evaluate_v2",
    "raw_scores_v2",
    "apply_no_answer_threshold",
    "best_threshold",
]
