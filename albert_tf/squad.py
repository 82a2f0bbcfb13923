"""SQuAD v1.1 fine-tuning: the span model, its loss, prediction post-processing and
the run (the task side of run_squad.py; ORIGINAL_RELEASE.md §12).

Model (§12.4): start and end logits = sequence_output . W^T + b with W [2, H] (row 0
start, row 1 end), stored as `cls/squad/output_weights` / `cls/squad/output_bias`.
Loss = (CE(start) + CE(end)) / 2 with a log-softmax over all positions (no mask).

Post-processing (§12.6): for every feature, all pairs of its n_best_size highest
start and end logits are candidates if the start is a paragraph token owned by this
window (max context), end >= start and the span is at most max_answer_length
pieces. Candidates are keyed by window and piece positions in the paragraph; scores
of the same candidate from several runs (ensembles) are averaged. The example's
n-best list ranks start + end, deduplicates by answer text (raw paragraph
from the start piece's first character to the end piece's last, stripped) and gives
softmax probabilities over the kept totals.
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

from albert_tf import fileio, finetuning, squad_eval
from albert_tf.config import AlbertConfig
from albert_tf.heads import OutputProjection
from albert_tf.modeling import AlbertModel

_logger = logging.getLogger(__name__)

HEAD = "squad_v1"  # the model attribute; checkpoints.HEAD_SCOPES maps it to cls/squad


class SquadError(finetuning.FineTuningError):
    """A user error of a SQuAD run (bad flag, missing file, unusable checkpoint)."""


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
        self.squad_v1 = OutputProjection(2, initializer_range=config.initializer_range,
                                         name="squad_v1")

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
        return cls(AlbertConfig.from_dict(config["config"]),
                   name=config.get("name", "albert_squad_v1"))


def span_loss(logits, positions):
    """Mean over the batch of -log softmax(logits)[position]; logits [B, S], positions [B]."""
    log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1)
    picked = tf.gather(log_probs, tf.cast(positions, tf.int32), axis=1, batch_dims=1)
    return -tf.reduce_mean(picked)


def loss_fn(model, features, training):
    """Trainer loss: (start loss + end loss) / 2."""
    out = model(features, training=training)
    loss = (span_loss(out["start_logits"], features["start_positions"])
            + span_loss(out["end_logits"], features["end_positions"])) / 2.0
    return loss, {}


# --------------------------------------------------------------------------------------
# Prediction
# --------------------------------------------------------------------------------------
def _eval_dataset_fn(path, seq_length, batch_size, replicas):
    """Per-replica batches in file order, every batch padded to full size with rows of
    unique_id 0, and the batch count padded to a multiple of the replicas."""
    from albert_tf.data.squad_data import squad_dataset

    if batch_size % replicas:
        raise SquadError(f"batch size {batch_size} is not divisible by the {replicas} replicas")
    per_replica = batch_size // replicas
    n_batches = sum(1 for _ in tf.data.TFRecordDataset(path).batch(per_replica))
    extra = (-max(n_batches, 1)) % replicas

    def pad(batch):
        short = per_replica - tf.shape(batch["unique_ids"])[0]
        return {k: tf.pad(v, [[0, short]] + [[0, 0]] * (len(v.shape) - 1))
                for k, v in batch.items()}

    def fn(_input_context=None):
        # Not sharded: every worker reads the whole file, so local results are in order.
        d = squad_dataset(path, seq_length, per_replica, is_training=False).map(pad)
        if extra:
            zeros = d.take(1).map(lambda b: {k: tf.zeros_like(v) for k, v in b.items()})
            d = d.concatenate(zeros.repeat(extra))
        return d
    return fn


def predict_logits(strategy, model, dataset_fn):
    """{unique_id: (start_logits, end_logits)} (numpy [S] each) over the dataset."""
    outputs = finetuning.collect_outputs(strategy, dataset_fn, lambda features: {
        "unique_ids": features["unique_ids"], **model(features, training=False)})
    results = {}
    for uid, start, end in zip(outputs["unique_ids"], outputs["start_logits"],
                               outputs["end_logits"]):
        if uid:  # 0 = padding row
            results[int(uid)] = (start, end)
    return results


def _top_indexes(logits, n):
    """Indexes of the n largest values, ties in index order."""
    return sorted(range(len(logits)), key=lambda i: -logits[i])[:n]


def accumulate_spans(spans, examples, features, results, n_best_size, max_answer_length):
    """Adds the candidate spans of one run to `spans` and returns it.

    spans: {example_index: {(feature index within the example, start, end in paragraph
    pieces): [(start score, end score), ...]}}, updated in place (call once per run to
    ensemble runs).
    """
    by_example = collections.defaultdict(list)
    for feature in features:
        by_example[feature.example_index].append(feature)
    for example_index in range(len(examples)):
        candidates = spans.setdefault(example_index, {})
        for feature_index, feature in enumerate(by_example[example_index]):
            start_logits, end_logits = results[feature.unique_id]
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
                        (float(start_logits[start]), float(end_logits[end])))
    return spans


def _softmax(scores):
    top = max(scores)
    exps = [math.exp(s - top) for s in scores]
    total = sum(exps)
    return [e / total for e in exps]


def nbest_predictions(spans, examples, features, n_best_size):
    """(predictions {qas_id: text}, nbest {qas_id: [{text, probability,
    start_log_prob, end_log_prob}]}) from accumulated spans."""
    by_example = collections.defaultdict(list)
    for feature in features:
        by_example[feature.example_index].append(feature)
    predictions, nbest_json = collections.OrderedDict(), collections.OrderedDict()
    for example_index, example in enumerate(examples):
        windows = by_example[example_index]
        ranked = [(sum(p[0] for p in pairs) / len(pairs), sum(p[1] for p in pairs) / len(pairs),
                   f, start, end)
                  for (f, start, end), pairs in spans.get(example_index, {}).items()]
        ranked.sort(key=lambda r: -(r[0] + r[1]))
        seen, best = set(), []
        for start_score, end_score, f, start, end in ranked:
            if len(best) >= n_best_size:
                break
            window = windows[f]
            first = window.tok_start_to_orig_index[start]
            last = window.tok_end_to_orig_index[end]
            text = example.paragraph_text[first:last + 1].strip()
            if text in seen:
                continue
            seen.add(text)
            best.append((text, start_score, end_score))
        if not best:  # the original's placeholder
            best.append(("empty", 0.0, 0.0))
        probs = _softmax([s + e for _, s, e in best])
        nbest_json[example.qas_id] = [
            {"text": t, "probability": p, "start_log_prob": s, "end_log_prob": e}
            for (t, s, e), p in zip(best, probs)]
        predictions[example.qas_id] = best[0][0]
    return predictions, nbest_json


def write_predictions(output_dir, predictions, nbest):
    """predictions.json {qid: text} and nbest_predictions.json, written atomically."""
    paths = {}
    for name, value in (("predictions.json", predictions), ("nbest_predictions.json", nbest)):
        paths[name] = os.path.join(output_dir, name)
        fileio.atomic_write_text(paths[name], json.dumps(value, indent=4) + "\n")
    return paths


# --------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------
@dataclasses.dataclass
class SquadOptions:
    """run_squad_v1.py's flags (original names and defaults, §12.1) plus ours.

    Accepted and without effect: use_einsum (products are 2-D here), num_tpu_cores (the
    TPU topology decides), predict_feature_left_file (the original pickled prediction
    features there; they are rebuilt from --predict_file instead, so no stale copy can
    be reused).
    """
    output_dir: str
    albert_config_file: str | None = None
    spm_model_file: str | None = None
    vocab_file: str | None = None
    train_file: str | None = None
    predict_file: str | None = None
    train_feature_file: str | None = None
    predict_feature_file: str | None = None
    predict_feature_left_file: str | None = None
    init_checkpoint: str | None = None
    albert_hub_module_handle: str | None = None
    do_lower_case: bool = True
    max_seq_length: int = 384
    doc_stride: int = 128
    max_query_length: int = 64
    do_train: bool = False
    do_predict: bool = False
    train_batch_size: int = 32
    predict_batch_size: int = 8
    learning_rate: float = 5e-5
    num_train_epochs: float = 3.0
    warmup_proportion: float = 0.1
    save_checkpoints_steps: int = 1000
    iterations_per_loop: int = 1000
    n_best_size: int = 20
    max_answer_length: int = 30
    use_tpu: bool = False
    tpu_name: str | None = None
    tpu_zone: str | None = None
    gcp_project: str | None = None
    master: str | None = None
    num_tpu_cores: int = 8
    use_einsum: bool = True
    keep_checkpoint_max: int = 5
    strategy: str = "default"
    random_seed: int = 12345
    host_allocator: str = "auto"


def resolve(opts: SquadOptions):
    """Validates the options (SquadError naming the flag/file); returns (config, spm
    model file). Nothing is written."""
    from albert_tf import release

    if opts.albert_hub_module_handle:
        raise SquadError("--albert_hub_module_handle: TF-Hub modules are not supported; pass "
                         "the unpacked release folder as --init_checkpoint")
    if not (opts.do_train or opts.do_predict):
        raise SquadError("at least one of --do_train or --do_predict must be set")
    if not opts.output_dir:
        raise SquadError("--output_dir is required")
    for name in ("train_batch_size", "predict_batch_size", "save_checkpoints_steps",
                 "iterations_per_loop", "n_best_size", "max_answer_length", "doc_stride",
                 "max_query_length"):
        if getattr(opts, name) < 1:
            raise SquadError(f"--{name} must be >= 1, got {getattr(opts, name)}")
    if opts.num_train_epochs <= 0 and opts.do_train:
        raise SquadError(f"--num_train_epochs must be > 0, got {opts.num_train_epochs}")
    if not 0 <= opts.warmup_proportion <= 1:
        raise SquadError(f"--warmup_proportion must be in [0, 1], got {opts.warmup_proportion}")
    config_file, spm = opts.albert_config_file, opts.spm_model_file
    if opts.init_checkpoint and release.is_release_folder(opts.init_checkpoint):
        try:
            files = release.release_files(opts.init_checkpoint)
        except FileNotFoundError as err:
            raise SquadError(f"--init_checkpoint: {err}") from None
        config_file, spm = config_file or files.config_file, spm or files.spm_model_file
    if not config_file:
        raise SquadError("--albert_config_file is required (or a release folder as "
                         "--init_checkpoint)")
    if not tf.io.gfile.exists(config_file):
        raise SquadError(f"--albert_config_file={config_file}: file not found")
    try:
        config = AlbertConfig.from_json_file(config_file)
    except (ValueError, TypeError, KeyError) as err:
        raise SquadError(f"--albert_config_file={config_file}: {err}") from None
    if not spm:
        raise SquadError("--spm_model_file is required: SQuAD features are SentencePiece "
                         "only, as the original's" +
                         (" (--vocab_file is not used)" if opts.vocab_file else ""))
    for flag, path in (("spm_model_file", spm),
                       ("train_file", opts.train_file if opts.do_train else None),
                       ("predict_file", opts.predict_file if opts.do_predict else None)):
        if path and not tf.io.gfile.exists(path):
            raise SquadError(f"--{flag}={path}: file not found")
    if opts.do_train and not opts.train_file:
        raise SquadError("--do_train needs --train_file")
    if opts.do_predict and not opts.predict_file:
        raise SquadError("--do_predict needs --predict_file")
    if opts.max_seq_length > config.max_position_embeddings:
        raise SquadError(f"--max_seq_length={opts.max_seq_length} exceeds "
                         f"max_position_embeddings={config.max_position_embeddings} of "
                         f"{config_file}")
    if opts.max_seq_length <= opts.max_query_length + 3:
        raise SquadError(f"--max_seq_length={opts.max_seq_length} must exceed "
                         f"--max_query_length={opts.max_query_length} + 3")
    return config, spm


def _read(path, is_training):
    from albert_tf.data import squad_data

    try:
        return squad_data.read_squad_examples(path, is_training)
    except squad_data.SquadDataError as err:
        raise SquadError(str(err)) from None


def _features(opts, tokenizer, examples, is_training, path):
    from albert_tf.data import squad_data

    feats = squad_data.write_features(squad_data.convert_examples_to_features(
        examples, tokenizer, opts.max_seq_length, opts.doc_stride, opts.max_query_length,
        is_training), path, is_training)
    if not feats:
        raise SquadError(f"no features: every example of the "
                         f"{'training' if is_training else 'predict'} file was dropped")
    return feats


def run(opts: SquadOptions) -> dict:
    """Runs what the options ask for; returns a summary dict."""
    import random

    from albert_tf import tokenization, training
    from albert_tf.data import squad_data
    from albert_tf.distribute import get_strategy, is_chief
    from albert_tf.host_memory import configure_host_allocator
    from albert_tf.optimization import create_optimizer

    config, spm = resolve(opts)
    # Read the JSON files first: a malformed one fails before anything is written.
    predict_examples = _read(opts.predict_file, False) if opts.do_predict else None
    train_examples = _read(opts.train_file, True) if opts.do_train else None
    configure_host_allocator(opts.host_allocator, num_parameters=config.num_parameters())
    keras.utils.set_random_seed(opts.random_seed)
    strategy = get_strategy(opts.strategy, opts.use_tpu, opts.tpu_name, opts.tpu_zone,
                            opts.gcp_project, opts.master)
    chief, replicas = is_chief(strategy), strategy.num_replicas_in_sync
    if opts.train_batch_size % replicas:
        raise SquadError(f"--train_batch_size={opts.train_batch_size} is not divisible by "
                         f"the {replicas} replicas")
    tokenizer = tokenization.FullTokenizer(spm_model_file=spm, do_lower_case=opts.do_lower_case)
    summary = {}
    with strategy.scope():
        model = AlbertSquadV1(config)
        model.build()
    resuming = opts.do_train and bool(finetuning.object_checkpoints(opts.output_dir))
    if opts.init_checkpoint and not resuming:
        summary["init"] = finetuning.init_from_checkpoint(
            model, opts.init_checkpoint, HEAD, [r"^cls/squad/"], SquadError)
        _logger.info("--init_checkpoint: %s", summary["init"])
    tf.io.gfile.makedirs(opts.output_dir)  # only once the inputs proved usable

    selector = None
    if opts.do_predict:
        path = opts.predict_feature_file or os.path.join(opts.output_dir, "predict.tf_record")
        features = _features(opts, tokenizer, predict_examples, False, path)
        with tf.io.gfile.GFile(opts.predict_file) as f:
            gold = json.load(f)["data"]
        has_gold = any(qa.get("answers") for a in gold for p in a["paragraphs"]
                       for qa in p["qas"])
        dataset_fn = _eval_dataset_fn(path, opts.max_seq_length, opts.predict_batch_size,
                                      replicas)

        def predict():
            spans = accumulate_spans({}, predict_examples, features,
                                     predict_logits(strategy, model, dataset_fn),
                                     opts.n_best_size, opts.max_answer_length)
            return nbest_predictions(spans, predict_examples, features, opts.n_best_size)

        def evaluate():
            return squad_eval.evaluate_v1(gold, predict()[0])

        summary.update(num_predict_examples=len(predict_examples),
                       num_predict_features=len(features))
        if has_gold:
            selector = finetuning.CheckpointSelector("f1", opts.output_dir, model, evaluate,
                                                     HEAD, chief, SquadError)

    if opts.do_train:
        random.Random(12345).shuffle(train_examples)  # as the original, before features
        path = opts.train_feature_file or os.path.join(opts.output_dir, "train.tf_record")
        train_features = _features(opts, tokenizer, train_examples, True, path)
        steps = int(len(train_examples) / opts.train_batch_size * opts.num_train_epochs)
        if steps < 1:
            raise SquadError(f"{len(train_examples)} training examples x "
                             f"{opts.num_train_epochs} epochs give no step of batch "
                             f"{opts.train_batch_size}")
        warmup = int(steps * opts.warmup_proportion)
        summary.update(num_train_examples=len(train_examples),
                       num_train_features=len(train_features), num_train_steps=steps)
        with strategy.scope():
            optimizer = create_optimizer(opts.learning_rate, steps, warmup, "adamw")
        loop = training.LoopConfig(
            num_train_steps=steps, global_batch_size=opts.train_batch_size,
            iterations_per_loop=min(opts.iterations_per_loop, opts.save_checkpoints_steps),
            save_checkpoints_steps=opts.save_checkpoints_steps,
            keep_checkpoint_max=opts.keep_checkpoint_max)
        trainer = training.Trainer(strategy, model, optimizer, loss_fn, [], opts.output_dir,
                                   loop, chief)

        def train_dataset_fn(ctx):
            return squad_data.squad_dataset(path, opts.max_seq_length,
                                            ctx.get_per_replica_batch_size(
                                                opts.train_batch_size),
                                            is_training=True, drop_remainder=True,
                                            input_context=ctx, seed=opts.random_seed)

        summary["train_step"] = finetuning.train_and_select(trainer, train_dataset_fn, selector)

    if opts.do_predict:
        if selector is not None and not selector.evaluate_pending() and selector.best is None \
                and opts.init_checkpoint and not opts.do_train:
            selector.evaluate_current(0)  # the --init_checkpoint weights
        summary["predict_weights"] = finetuning.final_weights(
            model, opts.output_dir, opts.init_checkpoint, HEAD, SquadError)
        predictions, nbest = predict()
        if chief:
            summary.update(write_predictions(opts.output_dir, predictions, nbest))
            if selector is not None:
                summary["eval"] = squad_eval.evaluate_v1(gold, predictions)
                summary["best"] = selector.best
                _logger.info("dev with the predict weights (%s): %s", summary["predict_weights"],
                             ", ".join(f"{k} = {v:.2f}" for k, v in summary["eval"].items()))
    return summary


__all__ = ["AlbertSquadV1", "SquadOptions", "SquadError", "loss_fn", "span_loss",
           "predict_logits", "accumulate_spans", "nbest_predictions", "write_predictions",
           "resolve", "run"]
