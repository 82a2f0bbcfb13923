"""The pretraining task: masked LM + sentence order on TFRecords (docs/original.md §6).

`PretrainingTask` says what a pretraining run does (its model, loss, data and held-out
evaluation); the driver (albert_tf/run/driver.py) runs it. With --do_eval every checkpoint is
evaluated on held-out records and the best masked-LM accuracy is kept as model.ckpt-best,
as the original's eval loop did (§6.4); the evaluation before training, which shows what
training changed, goes to its own file (eval_results_before_training.txt). Without
--input_file the demo runs on data/demo.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import pathlib

import tensorflow as tf

from albert_tf import fileio
from albert_tf.data.tokenization import digit_comma_option
from albert_tf.errors import UserError
from albert_tf.model import losses
from albert_tf.options import option
from albert_tf.run import driver, selection
from albert_tf.run.output_folder import OutputFolder

_logger = logging.getLogger(__name__)

REPO_DATA_DIR = pathlib.Path(__file__).resolve().parents[2] / "data"  # albert_tf/tasks/ -> repo
DEMO_DIR = REPO_DATA_DIR / "demo"
METRIC_NAMES = ("masked_lm_loss", "sentence_order_loss")


def pretraining_loss_fn(model, features, training, normalizers=None, sentence_order_weight=1.0):
    """loss_fn for albert_tf.run.training.Trainer: MLM + SOP on one replica's batch, divided
    by `normalizers` (the global batch's `losses.pretraining_loss_normalizers`; default:
    this batch's). Bind `sentence_order_weight` with functools.partial."""
    outputs = model(features, training=training)
    return losses.pretraining_loss(outputs, features, sentence_order_weight, normalizers)


def evaluate(strategy, model, dataset_fn, max_eval_steps, jit_compile=False):
    """The original's eval metrics over `max_eval_steps` batches; `jit_compile`: the
    per-replica step compiled with XLA.

    Returns masked_lm_accuracy, masked_lm_loss, sentence_order_accuracy,
    sentence_order_loss and loss (= the two losses' sum).
    """
    dataset = strategy.distribute_datasets_from_function(dataset_fn)

    @tf.function(jit_compile=jit_compile)
    def eval_step(features):
        outputs = model(features, training=False)
        return losses.pretraining_metric_sums(outputs, features)

    totals = None
    for step, features in enumerate(dataset):
        if step >= max_eval_steps:
            break
        sums = strategy.run(eval_step, args=(features,))
        sums = {
            k: float(strategy.reduce(tf.distribute.ReduceOp.SUM, v, axis=None))
            for k, v in sums.items()
        }
        totals = sums if totals is None else {k: totals[k] + sums[k] for k in totals}
    if totals is None:
        raise UserError(
            "the evaluation data produced no batch: expected at least one record per replica"
        )
    metrics = losses.finalize_pretraining_metrics(totals)
    metrics["loss"] = metrics["masked_lm_loss"] + metrics["sentence_order_loss"]
    return metrics


def ensure_demo_data(
    folder,
    max_seq_length,
    max_predictions_per_seq,
    dupe_factor,
    random_seed=12345,
    random_next_sentence=False,
    splits=("train", "eval"),
    digit_comma="python3",
):
    """Builds the demo TFRecords of `splits` (train, eval) from data/demo if missing.

    The last corpus part is held out for evaluation. `random_next_sentence`:
    NSP pairs (BERT's random-document negatives) instead of SOP. Returns
    (train_pattern, eval_pattern, spm_model_file); a split not asked for may not exist.
    """
    from albert_tf.data import create_pretraining_data as cpd  # only the demo needs it
    from albert_tf.data import pretraining_instances as pi

    corpus = sorted((DEMO_DIR / "corpus").glob("part-*.txt"))
    spm_model = DEMO_DIR / "spm.model"
    if len(corpus) < 2 or not spm_model.exists():
        raise FileNotFoundError(
            f"demo data not found under {DEMO_DIR}; run `python3 data/make_demo_data.py` "
            "or pass --input_file and --albert_config_file"
        )
    tf.io.gfile.makedirs(folder)
    outputs = {
        "train": (",".join(map(str, corpus[:-1])), os.path.join(folder, "train.tfrecord")),
        "eval": (str(corpus[-1]), os.path.join(folder, "eval.tfrecord")),
    }
    for split, (inputs, output) in outputs.items():
        if split not in splits or tf.io.gfile.exists(output):
            continue
        _logger.info("building demo %s data %s", split, output)
        config = pi.MaskingConfig(
            max_seq_length=max_seq_length,
            max_predictions_per_seq=max_predictions_per_seq,
            random_next_sentence=random_next_sentence,
        )
        cpd.create_pretraining_data(
            inputs,
            output,
            config,
            spm_model_file=str(spm_model),
            do_lower_case=True,
            dupe_factor=dupe_factor if split == "train" else 1,
            random_seed=random_seed + (split == "eval"),
            digit_comma=digit_comma,
        )
    return outputs["train"][1], outputs["eval"][1], str(spm_model)


@dataclasses.dataclass(kw_only=True)
class PretrainingOptions(driver.RunOptions):
    """run_pretraining.py's flags (the original's names and defaults, §10) plus ours. With
    no --input_file the demo runs: DEMO_SETTINGS replace the flags not given."""

    albert_config_file: str | None = option(None, "albert_config.json of the model.")
    input_file: str | None = option(None, "Comma-separated globs of pretraining TFRecords.")
    max_seq_length: int = option(512, "Sequence length of the TFRecords.", minimum=2)
    max_predictions_per_seq: int = option(20, "Masked positions per sequence.", minimum=1)
    do_train: bool = driver.RunOptions.default("do_train", True)
    do_eval: bool = option(
        False,
        "Evaluate every checkpoint on held-out data; keep the best "
        "masked-LM accuracy as model.ckpt-best.",
    )
    train_batch_size: int = driver.RunOptions.default("train_batch_size", 4096)
    eval_batch_size: int = option(64, "Global eval batch size.", minimum=1)
    optimizer: str = driver.RunOptions.default("optimizer", "lamb")
    learning_rate: float = driver.RunOptions.default("learning_rate", 0.00176)
    poly_power: float = option(1.0, "Power of the polynomial decay.")
    num_train_steps: int = option(125000, "Optimizer steps.", minimum=1)
    num_warmup_steps: int = option(3125, "Linear warmup steps.", minimum=0)
    start_warmup_step: int = option(0, "Step at which warmup starts.", minimum=0)
    save_checkpoints_steps: int = driver.RunOptions.default("save_checkpoints_steps", 5000)
    keep_checkpoint_max: int | None = driver.RunOptions.default("keep_checkpoint_max", 5)
    max_eval_steps: int = option(100, "Eval batches.", minimum=1)
    init_from_group0: bool = option(
        False,
        "Fill every group_<g> from the checkpoint's group_0 (fixed version of the "
        "original's flag, which restored the wrong groups).",
    )
    masked_lm_budget: float = option(
        0.0,
        "Original flag (a float there; its path crashed). > 0 turns on --dynamic_masking.",
        minimum=0.0,
    )
    gradient_accumulation_steps: int = option(
        1, "Micro-batches per optimizer step (global batch = train_batch_size).", minimum=1
    )
    dynamic_masking: bool = option(False, "Draw n-gram masks on the fly each epoch.")
    eval_file: str | None = option(None, "Eval TFRecords (default: --input_file, as the original).")
    dupe_factor: int = option(10, "Demo only: passes over the demo corpus.", minimum=1)
    digit_comma: str = digit_comma_option()
    spm_model_file: str | None = option(
        None,
        "The SentencePiece model the --input_file records were made with (the demo: its "
        "own): copied into --output_dir as 30k-clean.model and .vocab, so the folder is a "
        "release folder (albert_tf.export, the original's export_to_tfhub.py).",
    )
    sentence_order_loss_weight: float = option(
        1.0,
        "Factor on the sentence-order (or NSP) loss; 0 = masked LM only (the paper's "
        "Table 5 'None').",
        minimum=0.0,
    )
    loss_normalization: str = option(
        "global_batch",
        "How a step's loss is averaged when its batch is split over replicas or "
        "--gradient_accumulation_steps: global_batch = over the whole batch's masked "
        "tokens and examples (the original on one device, however the batch is split); "
        "per_replica = each part over its own, the parts' losses averaged (the original "
        "across TPU cores).",
        choices=("global_batch", "per_replica"),
    )


# The demo (no --input_file): these values replace flags not given on the command line.
DEMO_SETTINGS = dict(
    max_seq_length=128,
    max_predictions_per_seq=20,
    train_batch_size=32,
    eval_batch_size=32,
    learning_rate=0.005,
    num_train_steps=1200,
    num_warmup_steps=100,
    save_checkpoints_steps=400,
    iterations_per_loop=50,
    max_eval_steps=20,
    do_eval=True,
    # The norm its published numbers were measured with (docs/original.md 7.2).
    clip_norm_like="tpu",
)
BEFORE_TRAINING_RESULTS = "eval_results_before_training.txt"


class PretrainingTask(driver.Task):
    """Masked LM + sentence order on TFRecords of create_pretraining_data (or the demo's);
    dev metrics on held-out records every checkpoint, model.ckpt-best by masked-LM
    accuracy (the original's eval loop, §6.4)."""

    head = "masked_lm"
    head_patterns = ("^cls/",)
    metric_names = METRIC_NAMES
    record_flags = ("--input_file", "--eval_file")
    release_folder = True  # the config and tokenizer beside the checkpoints

    def __init__(self, options: PretrainingOptions):
        if options.input_file is None:  # the demo
            options = dataclasses.replace(
                options, **{k: v for k, v in DEMO_SETTINGS.items() if k not in options.given}
            )
        super().__init__(options)
        self.init_from_group0 = options.init_from_group0
        self.demo = options.input_file is None

    def resolve(self):
        from albert_tf.model.config import preset

        o = self.options
        if self.demo:
            import sentencepiece as spm

            spm_model = DEMO_DIR / "spm.model"
            if not spm_model.exists():
                raise UserError(
                    f"demo data not found under {DEMO_DIR}; run `python3 "
                    "data/make_demo_data.py` or pass --input_file and "
                    "--albert_config_file"
                )
            vocab_size = spm.SentencePieceProcessor(model_file=str(spm_model)).get_piece_size()
            config = (
                self._read_config(o.albert_config_file)
                if o.albert_config_file
                else preset("albert_tiny", vocab_size=vocab_size)
            )
        else:
            if not o.albert_config_file:
                raise UserError("--albert_config_file is required with --input_file")
            config = self._read_config(o.albert_config_file)
        if o.max_seq_length > config.max_position_embeddings:
            raise UserError(
                f"--max_seq_length={o.max_seq_length} exceeds the config's "
                f"max_position_embeddings={config.max_position_embeddings}"
            )
        if not self.demo:
            from albert_tf.data.input_pipeline import check_tfrecords, pretraining_feature_spec

            spec = pretraining_feature_spec(
                o.max_seq_length, o.max_predictions_per_seq, dynamic_masking=self._dynamic_masking()
            )
            vocabulary = (config.vocab_size, f"vocab_size of {self._config_name()}")
            ids = {
                "input_ids": vocabulary,
                "masked_lm_ids": vocabulary,
                # SOP/NSP records hold token types 0 and 1
                "segment_ids": (
                    config.type_vocab_size,
                    f"type_vocab_size of {self._config_name()}",
                ),
            }
            if o.do_train:
                check_tfrecords(o.input_file, spec, "--input_file", ids)
            if o.do_eval:
                check_tfrecords(
                    o.eval_file or o.input_file,
                    spec,
                    "--eval_file" if o.eval_file else "--input_file",
                    ids,
                )
        self._check_output_config(config)
        self._check_spm_model(config)
        return config

    def tokenizer_model(self) -> str | None:
        """The SentencePiece model of the run: --spm_model_file, the demo's, else None."""
        if self.options.spm_model_file:
            return self.options.spm_model_file
        return str(DEMO_DIR / "spm.model") if self.demo else None

    def _check_spm_model(self, config):
        """--spm_model_file: a SentencePiece model with the config's vocabulary size."""
        import sentencepiece as spm

        path = self.options.spm_model_file
        if not path:
            return
        flag = f"--spm_model_file={path}"
        fileio.check_input_file(path, flag)
        with tf.io.gfile.GFile(path, "rb") as f:
            proto = f.read()
        try:
            size = spm.SentencePieceProcessor(model_proto=proto).get_piece_size()
        except RuntimeError:
            raise UserError(f"{flag}: not a SentencePiece model") from None
        if size != config.vocab_size:
            raise UserError(
                f"{flag}: {size} pieces, but vocab_size={config.vocab_size} in "
                f"{self._config_name()}; expected the model the records were made with"
            )

    def input_shape(self):
        o = self.options
        names = (
            "input_file",
            "max_seq_length",
            "max_predictions_per_seq",
            "train_batch_size",
            "gradient_accumulation_steps",
            "dynamic_masking",
            "masked_lm_budget",
        )
        return {name: getattr(o, name) for name in names + (("dupe_factor",) if self.demo else ())}

    def _config_name(self):
        o = self.options
        return (
            f"--albert_config_file={o.albert_config_file}" if o.albert_config_file else "the demo"
        )

    def _check_output_config(self, config):
        """Refuses an output_dir whose checkpoints were trained with another config (its
        albert_config.json says which): its config file must keep describing them."""
        from albert_tf.model.config import AlbertConfig, differing_fields

        out = OutputFolder(self.options.output_dir)
        path = out.config_path
        if not out.contents().trained_checkpoints() or not tf.io.gfile.exists(path):
            return
        try:
            trained = AlbertConfig.from_json_file(path)
        except ValueError as err:
            raise UserError(f"{path}: {err}") from None
        differ = differing_fields(trained, config)
        if differ:
            shown = ", ".join(f"{k}: {a!r} vs {b!r}" for k, a, b in differ[:4])
            raise UserError(
                f"{path}: the checkpoints in {out.path} were trained with this config, which "
                f"differs from {self._config_name()} ({shown}); expected the same config, "
                "or another --output_dir"
            )

    def _dynamic_masking(self):
        return self.options.dynamic_masking or self.options.masked_lm_budget > 0

    @staticmethod
    def _read_config(path):
        from albert_tf.model.config import AlbertConfig

        fileio.check_input_file(path, f"--albert_config_file={path}")
        try:
            return AlbertConfig.from_json_file(path)
        except ValueError as err:
            raise UserError(f"--albert_config_file={path}: {err}") from None

    def batch_divisor(self):
        return self.options.gradient_accumulation_steps

    def build_model(self, config):
        from albert_tf.model.modeling import AlbertPretrainer

        return AlbertPretrainer(config, full_sequence_output=False)

    def loss_normalizers(self):
        if self.options.loss_normalization == "per_replica":
            return None
        return losses.pretraining_loss_normalizers

    def loss_fn(self, model, features, training, normalizers=None):
        return pretraining_loss_fn(
            model, features, training, normalizers, self.options.sentence_order_loss_weight
        )

    def prepare(self, run):
        o = self.options
        if self.demo:
            self.train_file, self.eval_file, _ = ensure_demo_data(
                os.path.join(o.output_dir, "demo_data"),
                o.max_seq_length,
                o.max_predictions_per_seq,
                o.dupe_factor,
                o.random_seed,
                digit_comma=o.digit_comma,
            )
            _logger.info("demo mode: %s -> %s", self.train_file, o.output_dir)
        else:
            self.train_file, self.eval_file = o.input_file, o.eval_file or o.input_file

    def _dataset_fn(self, pattern, global_batch, is_training, config):
        from albert_tf.data.input_pipeline import MaskingOptions, pretraining_dataset

        o = self.options
        dynamic = self._dynamic_masking()
        masking = MaskingOptions(vocab_size=config.vocab_size, mask_id=4) if dynamic else None

        def fn(ctx):
            return pretraining_dataset(
                pattern,
                ctx.get_per_replica_batch_size(global_batch),
                o.max_seq_length,
                o.max_predictions_per_seq,
                is_training,
                input_context=ctx,
                seed=o.random_seed,
                dynamic_masking=dynamic,
                masking_options=masking,
            )

        return fn

    def _evaluate(self, run):
        o = self.options
        return evaluate(
            run.strategy,
            run.model,
            self._dataset_fn(self.eval_file, o.eval_batch_size, False, run.config),
            o.max_eval_steps,
            run.jit_compile,
        )

    def evaluator(self, run):
        if not self.options.do_eval:
            return None
        return driver.Evaluation(
            "masked_lm_accuracy", lambda: self._evaluate(run), selection.PRETRAINING_FORMAT
        )

    def training_plan(self, run):
        o = self.options
        if o.do_eval and not run.resuming:  # shows what training changed
            metrics = self._evaluate(run)
            run.summary["before"] = metrics
            if run.is_chief:
                fileio.atomic_write_text(
                    os.path.join(o.output_dir, BEFORE_TRAINING_RESULTS),
                    selection.eval_block(
                        metrics, 0, selection.PRETRAINING_FORMAT, "masked_lm_accuracy", None, None
                    ),
                )
                selection.write_eval_summaries(o.output_dir, metrics, 0)
            _logger.info("eval before training: %s", json.dumps(metrics))
        accumulation = o.gradient_accumulation_steps
        return driver.TrainingPlan(
            self._dataset_fn(self.train_file, o.train_batch_size // accumulation, True, run.config),
            o.num_train_steps,
            o.num_warmup_steps,
            o.poly_power,
            o.start_warmup_step,
            accumulation,
        )


def run(options: PretrainingOptions) -> dict:
    """Trains and/or evaluates as the options say. Returns the summary: `before` (eval
    metrics before training, {} when not run), `after` (those of the last step, {} when
    not evaluated), `step`, `best`."""
    summary = driver.run(PretrainingTask(options))
    summary.setdefault("before", {})
    summary["after"] = summary.get("eval", {})
    summary["step"] = summary.get("eval_step", summary.get("train_step", 0))
    return summary
