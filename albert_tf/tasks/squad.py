"""SQuAD v1.1 and v2.0 fine-tuning: the span models, their losses, prediction
post-processing and the run (the task side of run_squad.py; docs/original.md §12).

v1 model (§12.4): start and end logits = sequence_output . W^T + b with W [2, H] (row 0
start, row 1 end), stored as `cls/squad/output_weights` / `cls/squad/output_bias`.
Loss = (CE(start) + CE(end)) / 2 with a log-softmax over all positions (no mask).

v2 model (§12.5): the XLNet-style head of heads.SquadV2Head (masked start log-probs; end
log-probs given the gold start in training, a start_n_top x end_n_top beam in inference;
an answer-class logit). Loss adds half the answer-class sigmoid cross-entropy.

Post-processing (§12.6): v1 takes all pairs of each window's n_best_size highest start
and end logits, v2 the beam pairs; a candidate counts if its start is a paragraph token
owned by this window (max context), end >= start and the span is at most
max_answer_length pieces. Candidates are keyed by window and piece positions in the
paragraph; scores of the same candidate from several runs (ensembles) are averaged.
The example's n-best list ranks start + end, deduplicates by answer text (raw
paragraph from the start piece's first character to the end piece's last, stripped)
and gives softmax probabilities over the kept totals. v2 answers "" when the example's
null score (smallest cls_logits over its windows) reaches the threshold that maximizes
F1 on the predict file (the original's evaluation).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
import math
import os

import keras
import tensorflow as tf

from albert_tf import fileio
from albert_tf.errors import UserError
from albert_tf.export.saved_model import SQUAD_KIND
from albert_tf.model.config import AlbertConfig
from albert_tf.model.heads import OutputProjection, SquadV2Head
from albert_tf.model.modeling import AlbertModel
from albert_tf.options import option
from albert_tf.run import driver, selection
from albert_tf.run.eval_outputs import collect_outputs, replica_eval_dataset_fn
from albert_tf.run.model_files import ModelFileOptions, make_tokenizer, resolve_model_files
from albert_tf.tasks import squad_eval

_logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------
# Model and loss
# --------------------------------------------------------------------------------------
class AlbertSquadV1(keras.Model):
    """ALBERT encoder + the run_squad_v1.py span head.

    Call with the encoder's dict of int32 [B, S] inputs. Returns a dict:
    start_logits, end_logits [B, S] float32.
    """

    def __init__(self, config, **kwargs):
        kwargs.setdefault("name", "albert_squad_v1")
        super().__init__(**kwargs)
        if isinstance(config, dict):
            config = AlbertConfig.from_dict(config)
        self.config = config
        self.albert = AlbertModel(config, name="albert")
        self.squad_v1 = OutputProjection(
            2, initializer_range=config.initializer_range, name="squad_v1"
        )

    def build(self, input_shape=None):
        self.albert.build()
        self.squad_v1.build((None, self.config.hidden_size))
        self.built = True

    def call(self, inputs, training=False):
        hidden = self.albert(inputs, training=training)["sequence_output"]
        logits = self.squad_v1(hidden)  # [B, S, 2]
        return {"start_logits": logits[..., 0], "end_logits": logits[..., 1]}

    def get_config(self):
        return {"config": self.config.to_dict(), "name": self.name}

    @classmethod
    def from_config(cls, config):
        return cls(
            AlbertConfig.from_dict(config["config"]), name=config.get("name", "albert_squad_v1")
        )


def span_loss(logits, positions):
    """Mean over the batch of -log softmax(logits)[position]; logits [B, S], positions [B]."""
    log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1)
    picked = tf.gather(log_probs, tf.cast(positions, tf.int32), axis=1, batch_dims=1)
    return -tf.reduce_mean(picked)


def loss_fn(model, features, training):
    """Trainer loss: (start loss + end loss) / 2."""
    out = model(features, training=training)
    loss = (
        span_loss(out["start_logits"], features["start_positions"])
        + span_loss(out["end_logits"], features["end_positions"])
    ) / 2.0
    return loss, {}


class AlbertSquadV2(keras.Model):
    """ALBERT encoder + the run_squad_v2.py head (heads.SquadV2Head, §12.5).

    Inputs: the encoder's dict plus `p_mask` int32 [B, S] (1 = not an answer position),
    and in training `start_positions` [B] (the end network sees the gold start).
    Training returns start_log_probs, end_log_probs [B, S], cls_logits [B]. Inference
    returns the beam: start_top_log_probs, start_top_index [B, start_n_top];
    end_top_log_probs, end_top_index [B, start_n_top * end_n_top] (index k * end_n_top
    + j: the j-th end of the k-th start); cls_logits [B].
    """

    def __init__(self, config, start_n_top=5, end_n_top=5, dropout_prob=0.1, **kwargs):
        kwargs.setdefault("name", "albert_squad_v2")
        super().__init__(**kwargs)
        if isinstance(config, dict):
            config = AlbertConfig.from_dict(config)
        self.config = config
        self.start_n_top, self.end_n_top = int(start_n_top), int(end_n_top)
        self.dropout_prob = float(dropout_prob)
        self.albert = AlbertModel(config, name="albert")
        self.squad_v2 = SquadV2Head(
            config.hidden_size, config.initializer_range, self.dropout_prob, name="squad_v2"
        )

    def build(self, input_shape=None):
        self.albert.build()
        self.squad_v2.build()
        self.built = True

    def call(self, inputs, training=False):
        head = self.squad_v2
        h = self.albert(inputs, training=training)["sequence_output"]
        p_mask = tf.cast(inputs["p_mask"], tf.float32)
        start = head.start_logits(h, p_mask)
        start_log_probs = tf.nn.log_softmax(start, axis=-1)
        cls_logits = head.answer_logits(h, start, training=training)
        if training:
            gold = tf.gather(h, tf.cast(inputs["start_positions"], tf.int32), batch_dims=1)
            end = head.end_logits(h, gold, p_mask)
            return {
                "start_log_probs": start_log_probs,
                "end_log_probs": tf.nn.log_softmax(end, axis=-1),
                "cls_logits": cls_logits,
            }
        start_top, start_index = tf.nn.top_k(start_log_probs, k=self.start_n_top)
        end = head.end_logits(h, tf.gather(h, start_index, batch_dims=1), p_mask)
        end_top, end_index = tf.nn.top_k(tf.nn.log_softmax(end, axis=-1), k=self.end_n_top)
        beam = self.start_n_top * self.end_n_top
        return {
            "start_top_log_probs": start_top,
            "start_top_index": start_index,
            "end_top_log_probs": tf.reshape(end_top, [-1, beam]),
            "end_top_index": tf.reshape(end_index, [-1, beam]),
            "cls_logits": cls_logits,
        }

    def get_config(self):
        return {
            "config": self.config.to_dict(),
            "start_n_top": self.start_n_top,
            "end_n_top": self.end_n_top,
            "dropout_prob": self.dropout_prob,
            "name": self.name,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        return cls(AlbertConfig.from_dict(config.pop("config")), **config)


def loss_fn_v2(model, features, training):
    """Trainer loss: (start CE + end CE) / 2 + answer-class sigmoid CE / 2, CE on the
    masked log-probabilities."""
    out = model(features, training=training)

    def cross_entropy(log_probs, positions):
        picked = tf.gather(log_probs, tf.cast(positions, tf.int32), axis=1, batch_dims=1)
        return -tf.reduce_mean(picked)

    answer = tf.reduce_mean(
        tf.nn.sigmoid_cross_entropy_with_logits(
            labels=tf.cast(features["is_impossible"], tf.float32), logits=out["cls_logits"]
        )
    )
    loss = (
        cross_entropy(out["start_log_probs"], features["start_positions"])
        + cross_entropy(out["end_log_probs"], features["end_positions"])
    ) / 2.0
    return loss + answer / 2.0, {}


# --------------------------------------------------------------------------------------
# Prediction
# --------------------------------------------------------------------------------------
def eval_dataset_fn(path, seq_length, batch_size, num_features, replicas):
    """Every feature once, in file order, in padded per-replica batches (padding rows
    have unique_id 0; eval_outputs.replica_eval_dataset_fn)."""
    from albert_tf.data.squad_data import squad_dataset

    return replica_eval_dataset_fn(
        lambda per_replica: squad_dataset(path, seq_length, per_replica, is_training=False),
        num_features,
        batch_size,
        replicas,
    )


def predict_outputs(strategy, model, dataset_fn, jit_compile=False):
    """{unique_id: {output name: numpy array of that feature}} over the dataset
    (`jit_compile`: the step compiled with XLA)."""
    outputs = collect_outputs(
        strategy,
        dataset_fn,
        lambda features: {"unique_ids": features["unique_ids"], **model(features, training=False)},
        jit_compile,
    )
    names = [n for n in outputs if n != "unique_ids"]
    return {
        int(uid): {n: outputs[n][row] for n in names}
        for row, uid in enumerate(outputs["unique_ids"])
        if uid
    }  # 0 = padding row


def _top_indexes(logits, n):
    """Indexes of the n largest values, ties in index order."""
    return sorted(range(len(logits)), key=lambda i: -logits[i])[:n]


def accumulate_spans(spans, examples, features, results, n_best_size, max_answer_length):
    """v1: adds the candidate spans of one run to `spans` and returns it.

    results: `predict_outputs` ({unique_id: {"start_logits", "end_logits"}}).

    spans: {example_index: {(feature index within the example, start, end in paragraph
    pieces): [(start score, end score), ...]}}, updated in place (call once per run to
    ensemble runs).
    """
    by_example = _by_example(features)
    for example_index in range(len(examples)):
        candidates = spans.setdefault(example_index, {})
        for feature_index, feature in enumerate(by_example[example_index]):
            start_logits = results[feature.unique_id]["start_logits"]
            end_logits = results[feature.unique_id]["end_logits"]
            offset = feature.tokens.index("[SEP]") + 1
            n_doc = len(feature.tok_start_to_orig_index)
            for start in _top_indexes(start_logits, n_best_size):
                for end in _top_indexes(end_logits, n_best_size):
                    if start - offset >= n_doc or end - offset >= n_doc:
                        continue
                    if not feature.token_is_max_context.get(start, False):
                        continue
                    if end < start or end - start + 1 > max_answer_length:
                        continue
                    key = (feature_index, start - offset, end - offset)
                    candidates.setdefault(key, []).append(
                        (float(start_logits[start]), float(end_logits[end]))
                    )
    return spans


def _softmax(scores):
    top = max(scores)
    exps = [math.exp(s - top) for s in scores]
    total = sum(exps)
    return [e / total for e in exps]


def _ranked_texts(example, windows, candidates, n_best_size):
    """[(text, start score, end score)]: candidates {(window, start, end): [(s, e), ...]}
    averaged, ranked by s + e, deduplicated by text, at most n_best_size."""
    ranked = sorted(
        (
            (
                sum(p[0] for p in pairs) / len(pairs),
                sum(p[1] for p in pairs) / len(pairs),
                f,
                start,
                end,
            )
            for (f, start, end), pairs in candidates.items()
        ),
        key=lambda r: -(r[0] + r[1]),
    )
    seen, best = set(), []
    for start_score, end_score, f, start, end in ranked:
        if len(best) >= n_best_size:
            break
        window = windows[f]
        first = window.tok_start_to_orig_index[start]
        last = window.tok_end_to_orig_index[end]
        text = example.paragraph_text[first : last + 1].strip()
        if text not in seen:
            seen.add(text)
            best.append((text, start_score, end_score))
    return best


def _nbest_json(best):
    probs = _softmax([s + e for _, s, e in best])
    return [
        {"text": t, "probability": p, "start_log_prob": s, "end_log_prob": e}
        for (t, s, e), p in zip(best, probs)
    ]


def _by_example(features):
    windows = collections.defaultdict(list)
    for feature in features:
        windows[feature.example_index].append(feature)
    return windows


def nbest_predictions(spans, examples, features, n_best_size):
    """v1: (predictions {qas_id: text}, nbest {qas_id: [{text, probability,
    start_log_prob, end_log_prob}]}) from accumulated spans."""
    windows = _by_example(features)
    predictions, nbest_json = collections.OrderedDict(), collections.OrderedDict()
    for example_index, example in enumerate(examples):
        best = _ranked_texts(
            example, windows[example_index], spans.get(example_index, {}), n_best_size
        ) or [("empty", 0.0, 0.0)]  # the original's placeholder
        nbest_json[example.qas_id] = _nbest_json(best)
        predictions[example.qas_id] = best[0][0]
    return predictions, nbest_json


def accumulate_spans_v2(
    spans, null_scores, examples, features, results, max_answer_length, start_n_top, end_n_top
):
    """v2: adds one run's beam candidates to `spans` (as v1's) and each example's null
    score (the smallest cls_logits over its windows) to `null_scores` {example_index:
    [score per run]}. results: `predict_outputs` of AlbertSquadV2."""
    by_example = _by_example(features)
    for example_index in range(len(examples)):
        candidates = spans.setdefault(example_index, {})
        score_null = 1e6
        for feature_index, feature in enumerate(by_example[example_index]):
            out = results[feature.unique_id]
            score_null = min(score_null, float(out["cls_logits"]))
            offset = feature.tokens.index("[SEP]") + 1
            n_doc = len(feature.tok_start_to_orig_index)
            for i in range(start_n_top):
                start = int(out["start_top_index"][i])
                for j in range(end_n_top):
                    end = int(out["end_top_index"][i * end_n_top + j])
                    if not 0 <= start - offset < n_doc or end - offset >= n_doc:
                        continue
                    if not feature.token_is_max_context.get(start, False):
                        continue
                    if end < start or end - start + 1 > max_answer_length:
                        continue
                    candidates.setdefault((feature_index, start - offset, end - offset), []).append(
                        (
                            float(out["start_top_log_probs"][i]),
                            float(out["end_top_log_probs"][i * end_n_top + j]),
                        )
                    )
        null_scores.setdefault(example_index, []).append(score_null)
    return spans, null_scores


def nbest_predictions_v2(spans, null_scores, examples, features, n_best_size, threshold=None):
    """v2: (predictions, nbest, null_odds {qas_id: mean null score over runs}). An
    example is answered "" when its null score reaches `threshold` (None: never)."""
    windows = _by_example(features)
    predictions, nbest_json = collections.OrderedDict(), collections.OrderedDict()
    null_odds = collections.OrderedDict()
    for example_index, example in enumerate(examples):
        best = _ranked_texts(
            example, windows[example_index], spans.get(example_index, {}), n_best_size
        ) or [("", -1e6, -1e6)]
        nbest_json[example.qas_id] = _nbest_json(best)
        scores = null_scores[example_index]
        null_odds[example.qas_id] = sum(scores) / len(scores)
        answered = threshold is None or null_odds[example.qas_id] < threshold
        predictions[example.qas_id] = best[0][0] if answered else ""
    return predictions, nbest_json, null_odds


def evaluate_with_threshold(gold, predict):
    """The original's v2 evaluation: score predictions made without a threshold, take
    the best-F1 null threshold found on this data, predict again with it and score.
    predict(threshold) -> (predictions, nbest, null_odds). Returns (metrics,
    (predictions, nbest, null_odds) with the threshold)."""
    predictions, _, null_odds = predict(None)
    first = squad_eval.evaluate_v2(gold, predictions, null_odds)
    threshold = first["best_f1_thresh"]
    final = predict(threshold)
    metrics = squad_eval.evaluate_v2(gold, final[0], final[2])
    metrics.update(
        {k: first[k] for k in ("best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh")}
    )
    metrics["null_score_diff_threshold"] = threshold
    return metrics, final


def write_predictions(output_dir, predictions, nbest, null_odds=None):
    """predictions.json {qid: text}, nbest_predictions.json and (v2) null_odds.json
    {qid: null score}, each written atomically. Returns {file name: path}."""
    paths = {}
    files = [("predictions.json", predictions), ("nbest_predictions.json", nbest)]
    if null_odds is not None:
        files.append(("null_odds.json", null_odds))
    for name, value in files:
        paths[name] = os.path.join(output_dir, name)
        fileio.atomic_write_text(paths[name], json.dumps(value, indent=4) + "\n")
    return paths


# --------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------
@dataclasses.dataclass(kw_only=True)
class SquadOptions(driver.RunOptions, ModelFileOptions):
    """run_squad_v1.py's and run_squad_v2.py's flags (original names and defaults, §12.1)
    plus ours; version_2_with_negative picks v2 (start_n_top, end_n_top and dropout_prob
    are v2's).

    Accepted and without effect: use_einsum (products are 2-D here), num_tpu_cores (the
    TPU topology decides), predict_feature_left_file (the original pickled prediction
    features there; they are rebuilt from --predict_file instead, so no stale copy can
    be reused). train_feature_file is reused only when it was built from the same inputs
    and settings (`SquadTask._train_features`).
    """

    vocab_file: str | None = option(None, "Not used: SQuAD features are SentencePiece only.")
    train_file: str | None = option(None, "SQuAD training JSON (train-v1.1.json).")
    predict_file: str | None = option(
        None, "SQuAD JSON to predict (dev-v1.1.json); scored when it holds answers."
    )
    train_feature_file: str | None = option(
        None,
        "Training features TFRecord (default <output_dir>/train.tf_record; reused only "
        "when built from the same inputs and settings).",
    )
    predict_feature_file: str | None = option(
        None,
        "Prediction features TFRecord (default <output_dir>/predict.tf_record; always rebuilt).",
    )
    predict_feature_left_file: str | None = option(
        None, "Accepted; prediction features are kept in memory instead of this pickle."
    )
    max_seq_length: int = option(384, "Sequence length (<= max_position_embeddings).", minimum=1)
    doc_stride: int = option(128, "Stride between paragraph windows.", minimum=1)
    max_query_length: int = option(64, "Question pieces kept.", minimum=1)
    do_predict: bool = option(
        False, "Predict --predict_file (and pick the best checkpoint by F1 when it holds answers)."
    )
    predict_batch_size: int = option(8, "Predict batch size.", minimum=1)
    num_train_epochs: float = option(3.0, "Epochs over the training examples.")
    warmup_proportion: float = option(
        0.1, "Share of the steps with linear warmup.", minimum=0.0, maximum=1.0
    )
    n_best_size: int = option(
        20, "Start and end candidates per window, and n-best list length.", minimum=1
    )
    max_answer_length: int = option(30, "Longest answer in pieces.", minimum=1)
    use_einsum: bool = option(True, "Accepted for compatibility.")
    export_dir: str | None = option(
        None,
        "v1.1: write <export_dir>/saved_model/<timestamp> "
        "(int32 [1, max_seq_length] inputs) and "
        "albert_model.tflite.",
        output="folder",
    )
    start_n_top: int = option(5, "v2: beam width over starts.", minimum=1)
    end_n_top: int = option(5, "v2: ends kept per start.", minimum=1)
    dropout_prob: float = option(
        0.1, "v2: dropout in the answer-class head (training).", minimum=0.0, below=1.0
    )
    version_2_with_negative: bool = option(
        False,
        "SQuAD v2.0 (run_squad_v2.py's model, unanswerable questions, null "
        "threshold) instead of v1.1.",
    )


class SquadTask(driver.Task):
    """SQuAD v1.1 / v2.0: span features of the train and predict JSON files, checkpoints
    selected by F1 on the predict file when it holds answers, predictions.json,
    nbest_predictions.json (and null_odds.json for v2), the v1.1 SavedModel/TFLite export."""

    export_kind = SQUAD_KIND

    def __init__(self, options: SquadOptions):
        super().__init__(options)
        self.v2 = options.version_2_with_negative
        if self.v2:
            self.head = "squad_v2"
            self.head_patterns = (r"^start_logits/", r"^end_logits/", r"^answer_class/")
        else:
            self.head, self.head_patterns = "squad_v1", (r"^cls/squad/",)

    def resolve(self):
        from albert_tf.data import squad_data

        opts = self.options
        if not (opts.do_train or opts.do_predict or opts.export_dir):
            raise UserError("at least one of --do_train, --do_predict or --export_dir must be set")
        if opts.export_dir and self.v2:
            raise UserError("--export_dir exports the v1.1 model only, as the original")
        if opts.num_train_epochs <= 0 and opts.do_train:
            raise UserError(f"--num_train_epochs must be > 0, got {opts.num_train_epochs}")
        if self.v2 and max(opts.start_n_top, opts.end_n_top) > opts.max_seq_length:
            raise UserError(
                f"--start_n_top={opts.start_n_top} / --end_n_top={opts.end_n_top}: "
                f"at most --max_seq_length={opts.max_seq_length}"
            )
        if opts.do_train and not opts.train_file:
            raise UserError("--do_train needs --train_file")
        if opts.do_predict and not opts.predict_file:
            raise UserError("--do_predict needs --predict_file")
        self.files = resolve_model_files(opts, opts.max_seq_length, require_spm=True)
        for flag, path in (
            ("train_file", opts.train_file if opts.do_train else None),
            ("predict_file", opts.predict_file if opts.do_predict else None),
        ):
            if path:
                fileio.check_input_file(path, f"--{flag}={path}")
        if opts.max_seq_length <= opts.max_query_length + 3:
            raise UserError(
                f"--max_seq_length={opts.max_seq_length} must exceed "
                f"--max_query_length={opts.max_query_length} + 3"
            )
        # Read the JSON files now: a malformed one fails before anything is written.
        self.predict_examples = (
            _read(opts.predict_file, False, "--predict_file") if opts.do_predict else None
        )
        self.train_examples = (
            _read(opts.train_file, True, "--train_file") if opts.do_train else None
        )
        # A v1.1 run would train unanswerable questions as answers at [CLS], or fail in
        # its first dev evaluation (a v1.1 score needs answers to every question).
        for flag, path in (
            ("--train_file", opts.train_file if opts.do_train else None),
            ("--predict_file", opts.predict_file if opts.do_predict else None),
        ):
            question = path and not self.v2 and squad_data.v2_question(path)
            if question:
                raise UserError(
                    f"{flag}={path} holds unanswerable questions ({question}), i.e. SQuAD "
                    "v2.0 data: pass --version_2_with_negative (or a v1.1 file)"
                )
        self.tokenizer = make_tokenizer(opts, self.files)
        return self.files.config

    def file_outputs(self):
        opts = self.options
        names = ("unique_ids", "input_ids", "input_mask", "segment_ids")
        used = {
            "train_feature_file": ("train.tf_record", opts.do_train),
            "predict_feature_file": ("predict.tf_record", opts.do_predict),
        }
        return {
            flag: (getattr(opts, flag) or os.path.join(opts.output_dir, name), names)
            for flag, (name, on) in used.items()
            if on
        }

    def file_inputs(self):
        opts = self.options
        found = {"--train_file": opts.train_file, "--predict_file": opts.predict_file}
        return {**super().file_inputs(), **{f: [p] for f, p in found.items() if p}}

    def input_shape(self):
        opts = self.options
        return {
            name: getattr(opts, name)
            for name in (
                "train_file",
                "version_2_with_negative",
                "max_seq_length",
                "doc_stride",
                "max_query_length",
                "do_lower_case",
                "train_batch_size",
            )
        }

    def build_model(self, config):
        opts = self.options
        if self.v2:
            return AlbertSquadV2(config, opts.start_n_top, opts.end_n_top, opts.dropout_prob)
        return AlbertSquadV1(config)

    def loss_fn(self, model, features, training):
        return (loss_fn_v2 if self.v2 else loss_fn)(model, features, training)

    def prepare(self, run):
        if self.options.do_predict:
            self._prepare_predictions(run)

    def _features(self, examples, is_training):
        """The features of `examples` (at least one: checked before any file is written)."""
        from albert_tf.data import squad_data

        opts = self.options
        feats = list(
            squad_data.convert_examples_to_features(
                examples,
                self.tokenizer,
                opts.max_seq_length,
                opts.doc_stride,
                opts.max_query_length,
                is_training,
            )
        )
        if not feats:
            flag = "--train_file" if is_training else "--predict_file"
            raise UserError(
                f"{flag}={opts.train_file if is_training else opts.predict_file}: every "
                "example was dropped; expected at least one feature"
            )
        return feats

    def _prepare_predictions(self, run):
        from albert_tf.data import squad_data

        opts = self.options
        path = opts.predict_feature_file or os.path.join(opts.output_dir, "predict.tf_record")
        self.predict_features = squad_data.write_features(
            self._features(self.predict_examples, False), path, False
        )
        with tf.io.gfile.GFile(opts.predict_file) as f:
            self.gold = json.load(f)["data"]
        self.has_gold = any(
            qa.get("answers") for a in self.gold for p in a["paragraphs"] for qa in p["qas"]
        )
        self.predict_dataset_fn = eval_dataset_fn(
            path,
            opts.max_seq_length,
            opts.predict_batch_size,
            len(self.predict_features),
            run.replicas,
        )
        run.summary.update(
            num_predict_examples=len(self.predict_examples),
            num_predict_features=len(self.predict_features),
        )

    def _predict_and_score(self, run):
        """(metrics or None without gold answers, (predictions, nbest, null_odds))."""
        opts = self.options
        examples, features = self.predict_examples, self.predict_features
        results = predict_outputs(run.strategy, run.model, self.predict_dataset_fn, run.jit_compile)
        if not self.v2:
            spans = accumulate_spans(
                {}, examples, features, results, opts.n_best_size, opts.max_answer_length
            )
            predictions, nbest = nbest_predictions(spans, examples, features, opts.n_best_size)
            metrics = squad_eval.evaluate_v1(self.gold, predictions) if self.has_gold else None
            return metrics, (predictions, nbest, None)
        spans, nulls = accumulate_spans_v2(
            {},
            {},
            examples,
            features,
            results,
            opts.max_answer_length,
            opts.start_n_top,
            opts.end_n_top,
        )

        def predict(threshold):
            return nbest_predictions_v2(
                spans, nulls, examples, features, opts.n_best_size, threshold
            )

        if self.has_gold:
            return evaluate_with_threshold(self.gold, predict)
        return None, predict(None)

    def evaluator(self, run):
        if not (self.options.do_predict and self.has_gold):
            return None
        return driver.Evaluation(
            "f1",
            lambda: self._predict_and_score(run)[0],
            selection.SQUAD_V2_FORMAT if self.v2 else selection.SQUAD_FORMAT,
        )

    def training_plan(self, run):
        import random

        from albert_tf.data import squad_data

        opts = self.options
        examples = self.train_examples
        random.Random(12345).shuffle(examples)  # as the original, before features
        path = opts.train_feature_file or os.path.join(opts.output_dir, "train.tf_record")
        num_features = self._train_features(examples, path)
        steps = int(len(examples) / opts.train_batch_size * opts.num_train_epochs)
        if steps < 1:
            raise UserError(
                f"{len(examples)} training examples x {opts.num_train_epochs} "
                f"epochs give no step of batch {opts.train_batch_size}"
            )
        run.summary.update(
            num_train_examples=len(examples), num_train_features=num_features, num_train_steps=steps
        )

        def dataset_fn(ctx):
            return squad_data.squad_dataset(
                path,
                opts.max_seq_length,
                ctx.get_per_replica_batch_size(opts.train_batch_size),
                is_training=True,
                drop_remainder=True,
                input_context=ctx,
                seed=opts.random_seed,
            )

        return driver.TrainingPlan(dataset_fn, steps, int(steps * opts.warmup_proportion))

    def _train_features(self, examples, path) -> int:
        """Writes the training TFRecord to `path`, or reuses it when its sidecar
        `<path>.json` holds the same key: a hash of the train file's and the tokenizer's
        bytes, do_lower_case, the three lengths and the version (so, unlike the original's
        --train_feature_file, a stale file is never read). Returns the number of features."""
        from albert_tf.data import squad_data
        from albert_tf.data.classifier_data import feature_cache_key

        opts = self.options
        task = "squad_v2" if self.v2 else "squad_v1"
        key = feature_cache_key(
            task,
            "train",
            max_seq_length=opts.max_seq_length,
            do_lower_case=opts.do_lower_case,
            label_list=(),
            data_files=[opts.train_file],
            spm_model_file=self.files.spm_model_file,
            vocab_file=None,
            extra={"doc_stride": opts.doc_stride, "max_query_length": opts.max_query_length},
            digit_comma=opts.digit_comma,
        )
        meta_path = path + ".json"
        if tf.io.gfile.exists(meta_path):
            meta = json.loads(fileio.read_text(meta_path))
            if meta.get("key") == key and tf.io.gfile.exists(path):
                _logger.info(
                    "reusing training features %s (%d features, key %s)",
                    path,
                    meta["num_features"],
                    key,
                )
                return int(meta["num_features"])
            _logger.info(
                "rebuilding %s: it was made from other inputs or settings (key %s, now %s)",
                path,
                meta.get("key"),
                key,
            )
        features = self._features(examples, True)
        if tf.io.gfile.exists(meta_path):
            tf.io.gfile.remove(meta_path)  # never leave a sidecar beside other features
        count = len(squad_data.write_features(features, path, True))
        fileio.atomic_write_text(
            meta_path,
            json.dumps(
                {
                    "key": key,
                    "num_features": count,
                    "train_file": opts.train_file,
                    "max_seq_length": opts.max_seq_length,
                    "doc_stride": opts.doc_stride,
                    "max_query_length": opts.max_query_length,
                    "do_lower_case": opts.do_lower_case,
                    "version_2_with_negative": self.v2,
                },
                indent=2,
                sort_keys=True,
            ),
        )
        return count

    def wants_final_weights(self):
        return self.options.do_predict or bool(self.options.export_dir)

    def predict(self, run):
        if not self.options.do_predict:
            return
        metrics, written = self._predict_and_score(run)
        if run.is_chief:
            run.summary.update(write_predictions(self.options.output_dir, *written))
            if metrics is not None:
                run.summary["eval"] = metrics
                _logger.info(
                    "dev with the predict weights (%s): %s",
                    run.summary["predict_weights"],
                    ", ".join(f"{k} = {v:.2f}" for k, v in metrics.items()),
                )

    def export(self, run):
        from albert_tf.export.saved_model import export_squad

        if self.options.export_dir and run.is_chief:
            run.summary["export"] = export_squad(
                run.model, self.options.export_dir, self.options.max_seq_length
            )


def _read(path, is_training, flag):
    """The questions of a SQuAD JSON file given as `flag`: at least one."""
    from albert_tf.data import squad_data

    try:
        examples = squad_data.read_squad_examples(path, is_training)
    except squad_data.SquadDataError as err:  # named by the flag too: "--flag=path: ..."
        message = str(err)
        if not message.startswith(f"{path}: "):
            message = f"{path}: {message}"
        raise UserError(f"{flag}={message}") from None
    if not examples:
        raise UserError(
            f"{flag}={path}: holds no question; expected data[].paragraphs[].qas[] entries"
        )
    return examples


def run(opts: SquadOptions) -> dict:
    """Runs what the options ask for; returns a summary dict."""
    return driver.run(SquadTask(opts))


__all__ = [
    "AlbertSquadV1",
    "AlbertSquadV2",
    "SquadOptions",
    "SquadTask",
    "loss_fn",
    "loss_fn_v2",
    "span_loss",
    "accumulate_spans_v2",
    "nbest_predictions_v2",
    "evaluate_with_threshold",
    "predict_outputs",
    "accumulate_spans",
    "nbest_predictions",
    "write_predictions",
    "run",
]
