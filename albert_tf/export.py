"""SavedModel export of a fine-tuned GLUE classifier, and SavedModel + TFLite export of
a SQuAD v1.1 model (`export_squad`, below).

Signatures:
  serving_default: input_ids, input_mask, segment_ids int32 [None, S] ->
    probabilities float32 [None, K] (STS-B: the regression value [None]),
    predictions int32 [None] (STS-B: float32 [None]), and `threshold` (a
    constant) when --threshold_to_export is set (the original's intent, quirk 30).
  serve_text (SentencePiece models only): text_a tf.string [None] (and text_b
    for sentence-pair tasks; an empty text_b gives the single-sentence layout, as
    in Python) -> the same outputs. Tokenization runs in-graph with
    tensorflow-text (albert_tf.tf_tokenization), matching FullTokenizer +
    preprocess_text.

The export folder also holds `assets.extra/labels.txt` (one label per line, in
index order) and `assets.extra/export_info.json`. It is written under a
temporary name and renamed, so a failed export leaves nothing behind.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import uuid

import tensorflow as tf

from albert_tf import fused_elementwise
from albert_tf.tokenization import DEFAULT_DIGIT_COMMA

_logger = logging.getLogger(__name__)


class ClassifierServing(tf.Module):
    """tf.Module wrapping an AlbertClassifier for tf.saved_model.save."""

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
        self.model = model
        self.max_seq_length = int(max_seq_length)
        self.text_pair = bool(text_pair)
        self.threshold = None if threshold is None or math.isnan(threshold) else float(threshold)
        self.tokenizer = None
        if spm_model_file:
            from albert_tf.tf_tokenization import InGraphTokenizer

            self.tokenizer = InGraphTokenizer(
                spm_model_file, do_lower_case=do_lower_case, digit_comma=digit_comma
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
        from albert_tf.tf_tokenization import pack_inputs

        tok = self.tokenizer
        ids_a = tok(text_a)
        single = pack_inputs(ids_a, None, self.max_seq_length, tok.cls_id, tok.sep_id)
        if text_b is None:
            return single
        ids_b = tok(text_b)
        pair = pack_inputs(ids_a, ids_b, self.max_seq_length, tok.cls_id, tok.sep_id)
        has_b = (ids_b.row_lengths() > 0)[:, tf.newaxis]  # "if tokens_b" of the Python path
        return {k: tf.where(has_b, pair[k], single[k]) for k in pair}

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
        if self.tokenizer is not None:
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
) -> str:
    """Writes a SavedModel of `model` (an AlbertClassifier) to `export_dir`.

    `digit_comma`: the tokenizer mode the model was fine-tuned with (serve_text must
    tokenize as training did; albert_tf.tokenization). An existing `export_dir` is
    replaced. Returns export_dir.
    """
    export_dir = os.fspath(export_dir).rstrip("/")
    module = ClassifierServing(
        model, max_seq_length, spm_model_file, do_lower_case, text_pair, threshold, digit_comma
    )
    if spm_model_file is None:
        _logger.warning("no SentencePiece model: exporting without the serve_text signature")
    parent = os.path.dirname(os.path.abspath(export_dir))
    os.makedirs(parent, exist_ok=True)
    tmp = os.path.join(parent, f".tmp-export-{uuid.uuid4().hex}")
    try:
        # Plain ops only: the serving graph must load on builds without oneDNN
        # kernels or XLA (TF Serving, ARM).
        with fused_elementwise.disabled():
            signatures = module.signatures()
            tf.saved_model.save(module, tmp, signatures=signatures)
        extra = os.path.join(tmp, "assets.extra")
        os.makedirs(extra, exist_ok=True)
        if label_list is not None:
            with open(os.path.join(extra, "labels.txt"), "w", encoding="utf-8") as f:
                f.write("".join(f"{label}\n" for label in label_list))
        info = {
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
        }
        with open(os.path.join(extra, "export_info.json"), "w", encoding="utf-8") as f:
            json.dump(info, f, indent=2)
        if os.path.exists(export_dir):
            shutil.rmtree(export_dir)
        os.replace(tmp, export_dir)
    finally:
        if os.path.exists(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
    _logger.info("exported SavedModel to %s", export_dir)
    return export_dir


def _squad_input_specs(max_seq_length):
    return [
        tf.TensorSpec([1, max_seq_length], tf.int32, name=n)
        for n in ("input_ids", "input_mask", "segment_ids")
    ]


def export_squad(model, export_dir, max_seq_length) -> dict:
    """The original run_squad_v1.py --export_dir: a SavedModel under
    `<export_dir>/saved_model/<timestamp>` (serving_default: input_ids, input_mask,
    segment_ids int32 [1, S] -> start_logits, end_logits [1, S]) and a float TFLite
    model `<export_dir>/albert_model.tflite` with the same inputs; its outputs are
    output_0 = start_logits and output_1 = end_logits (TFLite drops the names of a
    frozen function). Both are written under temporary names and renamed. Returns
    {"saved_model": path, "tflite": path}."""
    import time

    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    from albert_tf import fileio

    def serve(input_ids, input_mask, segment_ids):
        out = model(
            {"input_ids": input_ids, "input_mask": input_mask, "segment_ids": segment_ids},
            training=False,
        )
        return {"start_logits": out["start_logits"], "end_logits": out["end_logits"]}

    export_dir = os.fspath(export_dir).rstrip("/")
    saved = os.path.join(export_dir, "saved_model", str(int(time.time())))
    os.makedirs(os.path.dirname(saved), exist_ok=True)
    tmp = os.path.join(os.path.dirname(saved), f".tmp-export-{uuid.uuid4().hex}")
    module = tf.Module()
    module.model = model
    # Plain ops only (see export_classifier); TFLite needs them too.
    with fused_elementwise.disabled():
        module.serve = tf.function(serve, input_signature=_squad_input_specs(max_seq_length))
        concrete = module.serve.get_concrete_function()
        try:
            tf.saved_model.save(module, tmp, signatures={"serving_default": concrete})
            os.replace(tmp, saved)
        finally:
            if os.path.exists(tmp):
                shutil.rmtree(tmp, ignore_errors=True)
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
    tflite = os.path.join(export_dir, "albert_model.tflite")
    with fileio.atomic_path(tflite) as path:
        with open(path, "wb") as f:
            f.write(flatbuffer)
    _logger.info("exported SavedModel to %s and TFLite to %s", saved, tflite)
    return {"saved_model": saved, "tflite": tflite}


__all__ = ["ClassifierServing", "export_classifier", "export_squad"]
