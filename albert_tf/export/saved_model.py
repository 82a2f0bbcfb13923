"""Exports: SavedModels of a fine-tuned GLUE classifier (`export_classifier`) and of a
SQuAD v1.1 model (+ TFLite, `export_squad`), the pretrained encoder as a TF2 SavedModel
(`export_encoder`, the role of the original's export_to_tfhub.py), a checkpoint
without optimizer state (`export_checkpoint`, its export_checkpoints.py; also the
conversion of a Hugging Face folder or keras-hub preset to the original format), a
Hugging Face folder (`export_huggingface`) and a keras-hub preset (`export_keras_hub`).
The last four are also the CLI `python -m albert_tf.export` (`main`).

What a loader needs is written into every export's `assets.extra/export_info.json`
(`load_imports`) and logged: a SavedModel whose graph tokenizes raw text holds
tensorflow-text's SentencePiece ops (`SentencepieceOp`, `SentencepieceTokenizeOp`,
`TFText>FastSentencepieceTokenize`), so `tf.saved_model.load` fails with "Op type not
registered" until `import tensorflow_text` has run; the token-id SavedModels load with
TensorFlow alone.

GLUE classifier signatures:
  serving_default: input_ids, input_mask, segment_ids int32 [None, S] ->
    probabilities float32 [None, K] (STS-B: the regression value [None]),
    predictions int32 [None] (STS-B: float32 [None]), and `threshold` (a
    constant) when --threshold_to_export is set (the original's intent, quirk 30).
  serve_text (SentencePiece models only): text_a tf.string [None] (and text_b
    for sentence-pair tasks; an empty text_b gives the single-sentence layout, as
    in Python) -> the same outputs. Tokenization runs in-graph with
    tensorflow-text (albert_tf.data.tf_tokenization), matching FullTokenizer +
    preprocess_text. With it the SavedModel needs `import tensorflow_text` to load.

The classifier's folder also holds `assets.extra/labels.txt` (one label per line, in
index order). Every export folder is written beside its destination and replaces it
only once complete (albert_tf/run/output_writer.py): a failed export leaves the earlier
one as it was, and a folder holding anything else is refused.
"""

from __future__ import annotations

import json
import logging
import math
import os

import tensorflow as tf

from albert_tf.cpu import speed_paths
from albert_tf.data.tokenization import DEFAULT_DIGIT_COMMA
from albert_tf.errors import UserError
from albert_tf.export.inference import inference_config, serving_model
from albert_tf.run.output_writer import replace_output

_logger = logging.getLogger(__name__)


# What a loader must import before tf.saved_model.load (export_info.json `load_imports`).
TENSORFLOW_ONLY = ("tensorflow",)
WITH_TEXT_OPS = ("tensorflow", "tensorflow_text")
EXPORT_INFO = os.path.join("assets.extra", "export_info.json")
# The kinds of output folder (albert_tf/run/output_writer.py): an export replaces only
# an earlier export of its kind.
CLASSIFIER_KIND = "run_classifier.py SavedModel"
SQUAD_KIND = "run_squad.py SavedModel and TFLite"
ENCODER_KIND = "encoder SavedModel"


def load_note(imports) -> str:
    """One line saying what loading a SavedModel with these `load_imports` takes."""
    if "tensorflow_text" in imports:
        return (
            "import tensorflow_text before tf.saved_model.load: the raw-text signatures hold "
            "its SentencePiece ops"
        )
    return "loads with TensorFlow alone (tf.saved_model.load; no tensorflow_text, no albert_tf)"


class TextPreprocessor(tf.Module):
    """Raw strings -> the int32 [B, S] features `convert_single_example` builds, in the
    graph (albert_tf.data.tf_tokenization: a SavedModel holding it needs tensorflow_text).

    features(text_a [B], text_b [B] or None) -> input_ids, input_mask, segment_ids; an
    empty text_b gives the single-sentence layout, as in Python.
    """

    def __init__(
        self, spm_model_file, max_seq_length, do_lower_case=True, digit_comma=DEFAULT_DIGIT_COMMA
    ):
        super().__init__(name="text_preprocessor")
        from albert_tf.data.tf_tokenization import InGraphTokenizer

        self.tokenizer = InGraphTokenizer(
            spm_model_file, do_lower_case=do_lower_case, digit_comma=digit_comma
        )
        self.max_seq_length = int(max_seq_length)

    def features(self, text_a, text_b=None):
        from albert_tf.data.tf_tokenization import pack_inputs

        tok = self.tokenizer
        ids_a = tok(text_a)
        single = pack_inputs(ids_a, None, self.max_seq_length, tok.cls_id, tok.sep_id)
        if text_b is None:
            return single
        ids_b = tok(text_b)
        pair = pack_inputs(ids_a, ids_b, self.max_seq_length, tok.cls_id, tok.sep_id)
        has_b = (ids_b.row_lengths() > 0)[:, tf.newaxis]  # "if tokens_b" of the Python path
        return {k: tf.where(has_b, pair[k], single[k]) for k in pair}

    def signatures(self) -> dict:
        """serving_default: text_a -> features; pair: text_a, text_b -> features."""
        text_a = tf.TensorSpec([None], tf.string, name="text_a")
        text_b = tf.TensorSpec([None], tf.string, name="text_b")
        single = tf.function(lambda text_a: self.features(text_a), input_signature=[text_a])
        pair = tf.function(
            lambda text_a, text_b: self.features(text_a, text_b), input_signature=[text_a, text_b]
        )
        return {
            "serving_default": single.get_concrete_function(),
            "pair": pair.get_concrete_function(),
        }


class ClassifierServing(tf.Module):
    """tf.Module wrapping an AlbertClassifier for tf.saved_model.save; it traces the
    model's dropout-free form (albert_tf/export/inference.py), same weights."""

    def __init__(
        self,
        model,
        max_seq_length,
        spm_model_file=None,
        do_lower_case=True,
        text_pair=True,
        threshold=None,
        digit_comma=DEFAULT_DIGIT_COMMA,
    ):
        super().__init__(name="classifier_serving")
        self.model = serving_model(model)
        self.max_seq_length = int(max_seq_length)
        self.text_pair = bool(text_pair)
        self.threshold = None if threshold is None or math.isnan(threshold) else float(threshold)
        self.preprocessor = None
        if spm_model_file:
            self.preprocessor = TextPreprocessor(
                spm_model_file, max_seq_length, do_lower_case, digit_comma
            )

    def _outputs(self, features):
        out = self.model(features, training=False)
        result = {"probabilities": out["probabilities"], "predictions": out["predictions"]}
        if self.threshold is not None:
            batch = tf.shape(features["input_ids"])[0]
            result["threshold"] = tf.fill([batch], tf.constant(self.threshold, tf.float32))
        return result

    def serve_ids(self, input_ids, input_mask, segment_ids):
        return self._outputs(
            {"input_ids": input_ids, "input_mask": input_mask, "segment_ids": segment_ids}
        )

    def text_features(self, text_a, text_b=None):
        """Raw strings -> int32 [B, S] features, as convert_single_example."""
        return self.preprocessor.features(text_a, text_b)

    @property
    def load_imports(self) -> tuple:
        return TENSORFLOW_ONLY if self.preprocessor is None else WITH_TEXT_OPS

    def signatures(self):
        s = self.max_seq_length
        ids_spec = [
            tf.TensorSpec([None, s], tf.int32, name=n)
            for n in ("input_ids", "input_mask", "segment_ids")
        ]
        sigs = {
            "serving_default": tf.function(
                self.serve_ids, input_signature=ids_spec
            ).get_concrete_function()
        }
        if self.preprocessor is not None:
            text = tf.TensorSpec([None], tf.string, name="text_a")
            if self.text_pair:
                fn = tf.function(
                    lambda text_a, text_b: self._outputs(self.text_features(text_a, text_b)),
                    input_signature=[text, tf.TensorSpec([None], tf.string, name="text_b")],
                )
            else:
                fn = tf.function(
                    lambda text_a: self._outputs(self.text_features(text_a)), input_signature=[text]
                )
            sigs["serve_text"] = fn.get_concrete_function()
        return sigs


def _write_export_info(saved_model_dir, info: dict) -> None:
    extra = os.path.join(saved_model_dir, "assets.extra")
    tf.io.gfile.makedirs(extra)
    with tf.io.gfile.GFile(os.path.join(saved_model_dir, EXPORT_INFO), "w") as f:
        f.write(json.dumps(info, indent=2))


def export_classifier(
    model,
    export_dir,
    max_seq_length,
    *,
    spm_model_file=None,
    do_lower_case=True,
    text_pair=True,
    label_list=None,
    task_name=None,
    threshold=None,
    digit_comma=DEFAULT_DIGIT_COMMA,
    flag="--export_dir",
) -> str:
    """Writes a SavedModel of `model` (an AlbertClassifier) to `export_dir` (given as
    `flag`, named in refusals).

    `digit_comma`: the tokenizer mode the model was fine-tuned with (serve_text must
    tokenize as training did; albert_tf.data.tokenization). An existing `export_dir` is
    replaced. With `spm_model_file` (serve_text) loading needs `import tensorflow_text`
    (export_info.json `load_imports`). Returns export_dir.
    """
    module = ClassifierServing(
        model, max_seq_length, spm_model_file, do_lower_case, text_pair, threshold, digit_comma
    )
    if spm_model_file is None:
        _logger.warning("no SentencePiece model: exporting without the serve_text signature")
    with replace_output(export_dir, CLASSIFIER_KIND, flag=flag) as tmp:
        # Plain ops only: the serving graph must load on builds without oneDNN
        # kernels or XLA (TF Serving, ARM).
        with speed_paths.forced(speed_paths.PLAIN):
            signatures = module.signatures()
            tf.saved_model.save(module, tmp, signatures=signatures)
        if label_list is not None:
            tf.io.gfile.makedirs(os.path.join(tmp, "assets.extra"))
            with tf.io.gfile.GFile(os.path.join(tmp, "assets.extra", "labels.txt"), "w") as f:
                f.write("".join(f"{label}\n" for label in label_list))
        _write_export_info(
            tmp,
            {
                "task_name": task_name,
                "max_seq_length": int(max_seq_length),
                "do_lower_case": bool(do_lower_case),
                "digit_comma": digit_comma,
                "text_pair": bool(text_pair),
                "label_list": None
                if label_list is None
                else [None if x is None else str(x) for x in label_list],
                "threshold": module.threshold,
                "signatures": sorted(signatures),
                "load_imports": list(module.load_imports),
            },
        )
    _logger.info("exported SavedModel to %s; it %s", export_dir, load_note(module.load_imports))
    return os.fspath(export_dir).rstrip("/")


def _squad_input_specs(max_seq_length):
    return [
        tf.TensorSpec([1, max_seq_length], tf.int32, name=n)
        for n in ("input_ids", "input_mask", "segment_ids")
    ]


def export_squad(model, export_dir, max_seq_length, flag="--export_dir") -> dict:
    """The original run_squad_v1.py --export_dir: a SavedModel under
    `<export_dir>/saved_model/<timestamp>` (serving_default: input_ids, input_mask,
    segment_ids int32 [1, S] -> start_logits, end_logits [1, S]) and a float TFLite
    model `<export_dir>/albert_model.tflite` with the same inputs; its outputs are
    output_0 = start_logits and output_1 = end_logits (TFLite drops the names of a
    frozen function). `export_dir` (given as `flag`) is replaced as a whole once both
    are written (albert_tf/run/output_writer.py), so it holds one timestamp; both trace
    the model's dropout-free form (albert_tf/export/inference.py). Returns
    {"saved_model": path, "tflite": path}."""
    import time

    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    model = serving_model(model)

    def serve(input_ids, input_mask, segment_ids):
        out = model(
            {"input_ids": input_ids, "input_mask": input_mask, "segment_ids": segment_ids},
            training=False,
        )
        return {"start_logits": out["start_logits"], "end_logits": out["end_logits"]}

    export_dir = os.fspath(export_dir).rstrip("/")
    saved_name = os.path.join("saved_model", str(int(time.time())))
    tflite_name = "albert_model.tflite"
    module = tf.Module()
    module.model = model
    with replace_output(export_dir, SQUAD_KIND, flag=flag) as tmp:
        # Plain ops only (see export_classifier); TFLite needs them too.
        with speed_paths.forced(speed_paths.PLAIN):
            module.serve = tf.function(serve, input_signature=_squad_input_specs(max_seq_length))
            concrete = module.serve.get_concrete_function()
            tf.saved_model.save(
                module, os.path.join(tmp, saved_name), signatures={"serving_default": concrete}
            )
            # TFLite takes the weights as constants.
            frozen = convert_variables_to_constants_v2(concrete)

            def as_tuple(input_ids, input_mask, segment_ids):
                out = tf.nest.pack_sequence_as(
                    concrete.structured_outputs, frozen(input_ids, input_mask, segment_ids)
                )
                return out["start_logits"], out["end_logits"]

            as_tuple = tf.function(as_tuple, input_signature=_squad_input_specs(max_seq_length))
            flatbuffer = tf.lite.TFLiteConverter.from_concrete_functions(
                [as_tuple.get_concrete_function()], module
            ).convert()
        with tf.io.gfile.GFile(os.path.join(tmp, tflite_name), "wb") as f:
            f.write(flatbuffer)
    saved = os.path.join(export_dir, saved_name)
    tflite = os.path.join(export_dir, tflite_name)
    _logger.info(
        "exported SavedModel to %s and TFLite to %s; the SavedModel %s",
        saved,
        tflite,
        load_note(TENSORFLOW_ONLY),
    )
    return {"saved_model": saved, "tflite": tflite}


# --------------------------------------------------------------------------------------
# The pretrained encoder (export_to_tfhub.py) and a checkpoint without optimizer state
# (export_checkpoints.py)
# --------------------------------------------------------------------------------------
PREPROCESS_DIR = "preprocess"
# Pretraining head -> its original scope and the signature that uses it.
_HEADS = {
    "masked_lm": ("cls/predictions", "mlm"),
    "sentence_order": ("cls/seq_relationship", "sop"),
}


class EncoderServing(tf.Module):
    """Root object of the encoder SavedModel: TensorFlow ops only, no tokenizer.

    __call__(inputs, training=False): inputs a dict of int32 [B, S] `input_ids`,
      `input_mask`, `segment_ids` -> dict pooled_output [B, H], sequence_output
      [B, S, H], default (= pooled_output). Everything is traced from the
      pretrainer's dropout-free form (albert_tf/export/inference.py): `training`
      (the original's "train" tag, which hub.KerasLayer passes) gives the same
      outputs; a fine-tuner adds the dropout of the config asset itself, as
      --albert_hub_module_handle does. The Reusable SavedModel attributes `variables`,
      `trainable_variables` and `regularization_losses` ([]) go with it, as
      hub.KerasLayer expects.
    original_variables: {original name: variable} (what albert_tf.weights.hub reads back).
    vocab_file, config_file: the SentencePiece model and albert_config.json (assets).
    """

    # Plain attributes in this class (tf.Module computes properties of these names);
    # saved, they are the lists hub.KerasLayer reads.
    variables = None
    trainable_variables = None

    def __init__(self, pretrainer, heads, spm_model_file, config_file, do_lower_case):
        super().__init__(name="albert_encoder")
        from albert_tf.weights.checkpoints import original_variable_map

        pretrainer = serving_model(pretrainer)
        self.encoder = pretrainer.albert
        # Only the heads the checkpoint held: a fresh head would be noise under a
        # pretrained name.
        self.heads = sorted(heads)
        for attribute in self.heads:
            setattr(self, attribute, getattr(pretrainer, attribute))
        scopes = tuple(_HEADS[a][0] + "/" for a in self.heads)
        self.original_variables = {
            name: variable
            for name, variable in original_variable_map(pretrainer).items()
            if name.startswith("bert/") or name.startswith(scopes)
        }
        self.variables = list(self.original_variables.values())
        self.trainable_variables = list(self.variables)
        self.regularization_losses = []
        self.vocab_file = tf.saved_model.Asset(spm_model_file)
        self.config_file = tf.saved_model.Asset(config_file)
        self.do_lower_case = bool(do_lower_case)

    @tf.function
    def __call__(self, inputs, training=False):
        out = self.encoder(inputs, training=training)
        pooled = out["pooled_output"]
        return {
            "pooled_output": pooled,
            "sequence_output": out["sequence_output"],
            "default": pooled,
        }

    def _encode(self, input_ids, input_mask, segment_ids):
        inputs = {"input_ids": input_ids, "input_mask": input_mask, "segment_ids": segment_ids}
        out = self.encoder(inputs, training=False)
        return {"sequence_output": out["sequence_output"], "pooled_output": out["pooled_output"]}

    def signatures(self) -> dict:
        """The original module's signatures (docs/original.md §14), for the heads held."""
        ids = [
            tf.TensorSpec([None, None], tf.int32, name=n)
            for n in ("input_ids", "input_mask", "segment_ids")
        ]
        positions = tf.TensorSpec([None, None], tf.int32, name="mlm_positions")

        def sop(input_ids, input_mask, segment_ids):
            out = self._encode(input_ids, input_mask, segment_ids)
            logits = self.sentence_order(out["pooled_output"])
            return {**out, "sop_log_probs": tf.nn.log_softmax(logits, axis=-1)}

        def mlm(input_ids, input_mask, segment_ids, mlm_positions):
            out = self._encode(input_ids, input_mask, segment_ids)
            logits = self.masked_lm(
                out["sequence_output"], mlm_positions, self.encoder.embedding_table
            )
            vocab = self.encoder.config.vocab_size
            return {**out, "mlm_logits": tf.reshape(logits, [-1, vocab])}

        def tokenization_info():
            return {
                "vocab_file": self.vocab_file.asset_path,
                "do_lower_case": tf.constant(self.do_lower_case),
            }

        tokens = tf.function(self._encode, input_signature=ids).get_concrete_function()
        sigs = {"serving_default": tokens, "tokens": tokens}
        if "sentence_order" in self.heads:
            sigs["sop"] = tf.function(sop, input_signature=ids).get_concrete_function()
        if "masked_lm" in self.heads:
            sigs["mlm"] = tf.function(
                mlm, input_signature=[*ids, positions]
            ).get_concrete_function()
        sigs["tokenization_info"] = tf.function(
            tokenization_info, input_signature=[]
        ).get_concrete_function()
        return sigs


def load_pretrainer(albert_directory, checkpoint_name):
    """(release files, config, AlbertPretrainer filled from the folder's checkpoint, the
    heads it held, the load report); UserError for a folder or checkpoint that cannot be
    used. `config` is the folder's, dropout included (what exported configs record); the
    pretrainer is built without dropout (albert_tf/export/inference.py: what every export
    traces or reads, so no dropout-free copy is needed). A Hugging Face folder or keras-hub
    preset is read through albert_tf.weights (its files: config_file None, checkpoint its
    description)."""
    from albert_tf.model.modeling import AlbertPretrainer
    from albert_tf.weights import checkpoints, foreign_folders, release

    foreign = foreign_folders.open_foreign(albert_directory, "--albert_directory")
    if foreign is not None:
        files = release.ReleaseFiles(
            albert_directory, None, foreign.description, foreign.spm_model_file, None
        )
        config = foreign.config
        model = AlbertPretrainer(inference_config(config))
        model.build()
        try:
            report = checkpoints.load_by_name(
                model, foreign, foreign.description, allow_missing=["^cls/"]
            )
        except checkpoints.CheckpointMismatchError as err:
            raise UserError(f"--albert_directory={albert_directory}: {err}") from None
    else:
        files, config, model, report = _load_release_pretrainer(albert_directory, checkpoint_name)
    absent = set(report.missing_allowed)
    heads = {
        attribute
        for attribute, (scope, _) in _HEADS.items()
        if not any(name.startswith(scope + "/") for name in absent)
    }
    for attribute in sorted(set(_HEADS) - heads):
        _logger.warning("%s holds no %s head: not exported", files.checkpoint, _HEADS[attribute][0])
    return files, config, model, heads, report


def _load_release_pretrainer(albert_directory, checkpoint_name):
    """(release files, config, filled dropout-free AlbertPretrainer, load report) of a
    release folder."""
    from albert_tf.model.config import AlbertConfig
    from albert_tf.model.modeling import AlbertPretrainer
    from albert_tf.weights import checkpoints, release

    try:
        files = release.release_files(albert_directory, checkpoint_name)
    except FileNotFoundError as err:
        raise UserError(f"--albert_directory: {err}") from None
    config = AlbertConfig.from_json_file(files.config_file)
    model = AlbertPretrainer(inference_config(config))
    model.build()
    try:
        report = checkpoints.init_from_checkpoint(model, files.checkpoint, allow_missing=["^cls/"])
    except checkpoints.CheckpointMismatchError as err:
        raise UserError(f"{files.checkpoint}: {str(err).splitlines()[0]} ...") from None
    return files, config, model, report


def export_encoder(
    albert_directory,
    export_path,
    *,
    checkpoint_name=None,
    do_lower_case=True,
    max_seq_length=128,
    digit_comma=DEFAULT_DIGIT_COMMA,
    flag="--export_path",
) -> dict:
    """The pretrained encoder of `albert_directory` (albert_config.json, the checkpoint
    `checkpoint_name` (default model.ckpt-best, else the latest), 30k-clean.model) as a
    TF2 SavedModel at `export_path`, and the raw-text preprocessing model beside it.

    `export_path`: the encoder (EncoderServing; signatures tokens = serving_default,
    sop and mlm where the checkpoint holds those heads, tokenization_info); it loads with
    TensorFlow alone, and `--albert_hub_module_handle` reads it back.
    `export_path/preprocess`: text_a (and text_b) tf.string [None] -> input_ids,
    input_mask, segment_ids int32 [None, max_seq_length] (signatures serving_default and
    pair), tokenized in the graph as FullTokenizer does; it needs `import
    tensorflow_text`. Both folders' assets.extra/export_info.json say what loading needs.
    `export_path` (given as `flag`) is replaced as a whole (albert_tf/run/output_writer.py).
    Returns {"encoder": path, "preprocess": path, "signatures": [...]}.
    """
    files, config, model, heads, _ = load_pretrainer(albert_directory, checkpoint_name)
    if files.config_file is None:
        raise UserError(
            f"--albert_directory={albert_directory}: the SavedModel export takes a release "
            f"folder, not a {files.checkpoint}; convert it with --export_format=checkpoint "
            "first and export that folder"
        )
    if files.spm_model_file is None:
        raise UserError(
            f"--albert_directory={albert_directory}: no SentencePiece model (30k-clean.model "
            "or a single *.model file); the export carries the tokenizer"
        )
    if max_seq_length > config.max_position_embeddings:
        raise UserError(
            f"--max_seq_length={max_seq_length} exceeds max_position_embeddings="
            f"{config.max_position_embeddings} of {files.config_file}: the preprocessing "
            "model's features would not fit the encoder"
        )
    module = EncoderServing(model, heads, files.spm_model_file, files.config_file, do_lower_case)
    preprocessor = TextPreprocessor(
        files.spm_model_file, max_seq_length, do_lower_case, digit_comma
    )
    export_path = os.fspath(export_path).rstrip("/")
    with replace_output(export_path, ENCODER_KIND, flag=flag) as tmp:
        with speed_paths.forced(
            speed_paths.PLAIN
        ):  # no oneDNN-only kernels, no XLA (export_classifier)
            signatures = module.signatures()
            spec = {
                n: tf.TensorSpec([None, None], tf.int32, name=n)
                for n in ("input_ids", "input_mask", "segment_ids")
            }
            for training in (False, True):
                module.__call__.get_concrete_function(spec, training=training)
            tf.saved_model.save(module, tmp, signatures=signatures)
        preprocess_dir = os.path.join(tmp, PREPROCESS_DIR)
        tf.saved_model.save(preprocessor, preprocess_dir, signatures=preprocessor.signatures())
        _write_export_info(
            tmp,
            {
                "model": "albert_tf encoder",
                "checkpoint": files.checkpoint,
                "signatures": sorted(signatures),
                "do_lower_case": bool(do_lower_case),
                "load_imports": list(TENSORFLOW_ONLY),
                "preprocess": PREPROCESS_DIR,
            },
        )
        _write_export_info(
            preprocess_dir,
            {
                "model": "albert_tf raw-text preprocessing",
                "max_seq_length": int(max_seq_length),
                "do_lower_case": bool(do_lower_case),
                "digit_comma": digit_comma,
                "signatures": ["pair", "serving_default"],
                "load_imports": list(WITH_TEXT_OPS),
            },
        )
    preprocess = os.path.join(export_path, PREPROCESS_DIR)
    _logger.info("exported the encoder to %s; it %s", export_path, load_note(TENSORFLOW_ONLY))
    _logger.info(
        "exported the raw-text preprocessing to %s; %s", preprocess, load_note(WITH_TEXT_OPS)
    )
    return {"encoder": export_path, "preprocess": preprocess, "signatures": sorted(signatures)}


__all__ = [
    "ClassifierServing",
    "TextPreprocessor",
    "EncoderServing",
    "export_classifier",
    "export_squad",
    "export_encoder",
    "load_note",
]
