"""Check: our model against Hugging Face transformers (PyTorch), both directions.

    python bench/check_transformers.py [--shape tiny|base] [--tolerance 1e-5]
        [--albert_directory DIR]

Needs torch and transformers 5.x (not dependencies of albert_tf; not run in CI). Does:

1. in:  a random transformers AlbertForPreTraining (hidden_act "gelu_new"), saved with
   save_pretrained (safetensors), loaded by albert_tf.weights.checkpoints.load_original_checkpoint
   into an AlbertPretrainer; sequence, pooled, masked-LM and sentence-order outputs of
   both on the same ids.
2. out: a random AlbertPretrainer in a release folder (albert_config.json,
   model.ckpt-best, 30k-clean.model = the demo's SentencePiece model), exported with
   `python -m albert_tf.export --export_format=huggingface`, loaded with
   AlbertForPreTraining.from_pretrained and AlbertModel.from_pretrained; the same
   outputs (with --albert_directory: that folder, e.g. the demo's out/pretrain, instead).
   AutoTokenizer.from_pretrained of the export against our FullTokenizer.
3. out: a random fine-tuned AlbertClassifier (3 labels) exported the same way, loaded with
   AutoModelForSequenceClassification; logits. A random SQuAD v1.1 model, loaded with
   AutoModelForQuestionAnswering; start and end logits of the real tokens.

Prints one line per comparison (max abs difference over real tokens) and exits 1 when
one exceeds --tolerance. Padded positions are left out: there transformers masks with
the dtype's minimum, the original with -10000 on keys only.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
DEMO_SPM = os.path.join(ROOT, "data", "demo", "spm.model")

SHAPES = {
    # L = 3 in G = 2 groups of I = 2 blocks, E != H: every name-table row used.
    "tiny": dict(
        embedding_size=16,
        hidden_size=32,
        num_hidden_layers=3,
        num_hidden_groups=2,
        inner_group_num=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    ),
    "base": dict(
        embedding_size=128,
        hidden_size=768,
        num_hidden_layers=12,
        num_hidden_groups=1,
        inner_group_num=1,
        num_attention_heads=12,
        intermediate_size=3072,
        max_position_embeddings=512,
    ),
}
# Standard deviation of the random weights. Larger weights through 12 layers saturate the
# softmax and amplify float32 rounding (std 0.2 at base size: both libraries ~1e-4 from a
# float64 reference), so the base shape gets the pretrained models' scale.
WEIGHT_SCALE = {"tiny": 0.2, "base": 0.02}
IDS = np.array([[2, 40, 77, 9, 3, 51, 60, 3], [2, 5, 3, 61, 13, 3, 0, 0]], np.int32)
MASK = np.array([[1, 1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 0, 0]], np.int32)
SEGMENTS = np.array([[0, 0, 0, 0, 0, 1, 1, 1], [0, 0, 0, 1, 1, 1, 0, 0]], np.int32)
POSITIONS = np.array([[1, 3, 6], [2, 4, 5]], np.int32)
TEXTS = ["The quick brown fox jumped over the lazy dog.", "ALBERT shares its layers' weights."]


def _vocab_size():
    import sentencepiece as spm

    return spm.SentencePieceProcessor(model_file=DEMO_SPM).get_piece_size()


def _torch_inputs() -> dict:
    """IDS, MASK and SEGMENTS as transformers' keyword arguments (torch int64)."""
    import torch

    return {
        "input_ids": torch.tensor(IDS, dtype=torch.long),
        "attention_mask": torch.tensor(MASK, dtype=torch.long),
        "token_type_ids": torch.tensor(SEGMENTS, dtype=torch.long),
    }


def _export_huggingface(source, exported):
    """export --export_format=huggingface of the release folder `source` into `exported`."""
    from albert_tf.export.command import main

    argv = [f"--albert_directory={source}", f"--export_path={exported}"]
    assert main(["export", *argv, "--export_format=huggingface"]) == 0


def _through_huggingface(model, folder, what, auto_class):
    """`model` saved as a release folder `folder`, exported as a Hugging Face folder
    (`folder`_hf) and loaded with transformers' `auto_class`: (its outputs, `model`'s) on
    IDS."""
    import torch

    source = _release_folder(folder, model)
    exported = folder + "_hf"
    _export_huggingface(source, exported)
    hf = auto_class.from_pretrained(exported).eval()
    print(f"out: {what} loads as {type(hf).__name__}")
    with torch.no_grad():
        theirs = hf(**_torch_inputs())
    return theirs, model({"input_ids": IDS, "input_mask": MASK, "segment_ids": SEGMENTS})


def _torch_outputs(model, with_heads=True):
    import torch

    with torch.no_grad():
        kwargs = _torch_inputs()
        if not with_heads:
            out = model(**kwargs)
            return {
                "sequence_output": out.last_hidden_state.numpy(),
                "pooled_output": out.pooler_output.numpy(),
            }
        out = model(**kwargs, output_hidden_states=True)
        sequence = out.hidden_states[-1].numpy()
        pooled = model.albert.pooler_activation(model.albert.pooler(out.hidden_states[-1][:, 0]))
        logits = out.prediction_logits.numpy()
        return {
            "sequence_output": sequence,
            "pooled_output": pooled.numpy(),
            "mlm_logits": np.take_along_axis(logits, POSITIONS[:, :, None], axis=1),
            "sop_logits": out.sop_logits.numpy(),
        }


def _our_outputs(model):
    out = model(
        {
            "input_ids": IDS,
            "input_mask": MASK,
            "segment_ids": SEGMENTS,
            "masked_lm_positions": POSITIONS,
        },
        training=False,
    )
    result = {k: np.asarray(out[k]) for k in ("sequence_output", "pooled_output", "sop_logits")}
    result["mlm_logits"] = np.asarray(out["mlm_logits"]).reshape(
        IDS.shape[0], POSITIONS.shape[1], -1
    )
    return result


def _report(label, ours, theirs, tolerance, failures):
    for key in theirs:
        a, b = np.asarray(ours[key], np.float64), np.asarray(theirs[key], np.float64)
        if key == "sequence_output":
            real = MASK.astype(bool)
            a, b = a[real], b[real]
        diff = float(np.max(np.abs(a - b)))
        ok = diff <= tolerance
        failures += [] if ok else [f"{label} {key}"]
        print(f"{label:<44} {key:<16} max|diff| {diff:.3e}  {'ok' if ok else 'FAIL'}")


def check_in(shape, tolerance, failures, work):
    import torch
    from transformers import AlbertConfig as HFConfig
    from transformers import AlbertForPreTraining

    from albert_tf.model.modeling import AlbertPretrainer
    from albert_tf.weights import checkpoints, foreign_folders

    torch.manual_seed(0)
    scale = WEIGHT_SCALE[shape]
    hf_config = HFConfig(
        vocab_size=_vocab_size(), hidden_act="gelu_new", initializer_range=scale, **SHAPES[shape]
    )
    hf_model = AlbertForPreTraining(hf_config).eval()
    with torch.no_grad():  # no parameter left at 0 or 1: a mix-up would show
        for parameter in hf_model.parameters():
            parameter.add_(torch.randn_like(parameter) * scale / 4)
    folder = os.path.join(work, "hf_saved")
    hf_model.save_pretrained(folder)
    print(f"save_pretrained wrote: {sorted(os.listdir(folder))}")
    config = foreign_folders.open_foreign(folder, tensors=False).config
    model = AlbertPretrainer(config)
    report = checkpoints.load_original_checkpoint(model, folder)
    print(f"loaded {len(report.loaded)} variables, ignored {report.ignored}")
    _report(
        "in: transformers save_pretrained -> ours",
        _our_outputs(model),
        _torch_outputs(hf_model),
        tolerance,
        failures,
    )


def _release_folder(folder, model):
    import shutil

    from albert_tf.weights import checkpoints, release

    os.makedirs(folder)
    model.config.to_json_file(os.path.join(folder, release.CONFIG_NAME))
    shutil.copyfile(DEMO_SPM, os.path.join(folder, release.SPM_MODEL_NAME))
    checkpoints.save_original_checkpoint(model, os.path.join(folder, release.CHECKPOINT_NAME))
    return folder


def _randomize(model, seed, scale):
    model.build()
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        variable.assign(rng.normal(0, scale, variable.shape).astype(np.float32))
    return model


def check_out(shape, tolerance, failures, work, albert_directory=None):
    from transformers import (
        AlbertForPreTraining,
        AlbertModel,
        AutoModelForSequenceClassification,
        AutoTokenizer,
    )

    from albert_tf.data import tokenization
    from albert_tf.model.config import AlbertConfig
    from albert_tf.model.modeling import AlbertPretrainer
    from albert_tf.tasks.classifier import AlbertClassifier

    config = AlbertConfig(vocab_size=_vocab_size(), **SHAPES[shape])
    if albert_directory:
        from albert_tf.weights.release import load_release

        _, ours, _ = load_release(albert_directory, model_cls=AlbertPretrainer)
        source = albert_directory
    else:
        ours = _randomize(AlbertPretrainer(config), 1, WEIGHT_SCALE[shape])
        source = _release_folder(os.path.join(work, "release"), ours)
    exported = os.path.join(work, "hf_export")
    _export_huggingface(source, exported)
    mine = _our_outputs(ours)
    theirs = _torch_outputs(AlbertForPreTraining.from_pretrained(exported).eval())
    _report("out: ours -> AlbertForPreTraining", mine, theirs, tolerance, failures)
    base = _torch_outputs(AlbertModel.from_pretrained(exported).eval(), with_heads=False)
    _report("out: ours -> AlbertModel", mine, base, tolerance, failures)

    hf_tokenizer = AutoTokenizer.from_pretrained(exported)
    full = tokenization.FullTokenizer(None, do_lower_case=True, spm_model_file=DEMO_SPM)
    for text in TEXTS:
        # The original lower-cases in its data processors (preprocess_text), transformers'
        # AlbertTokenizer itself (do_lower_case).
        want = full.convert_tokens_to_ids(
            full.tokenize(tokenization.preprocess_text(text, lower=True))
        )
        got = hf_tokenizer(text, add_special_tokens=False)["input_ids"]
        same = got == want
        failures += [] if same else [f"tokenizer {text!r}"]
        verdict = "same ids" if same else f"{got} != {want}"
        print(f"out: AutoTokenizer ({type(hf_tokenizer).__name__}) {text!r}: {verdict}")

    classifier = _randomize(AlbertClassifier(config, num_labels=3), 2, WEIGHT_SCALE[shape])
    theirs, out = _through_huggingface(
        classifier, os.path.join(work, "glue"), "classifier", AutoModelForSequenceClassification
    )
    _report(
        "out: classifier -> SequenceClassification",
        {"logits": np.asarray(out["logits"])},
        {"logits": theirs.logits.numpy()},
        tolerance,
        failures,
    )

    from transformers import AutoModelForQuestionAnswering

    from albert_tf.tasks.squad import AlbertSquadV1

    squad = _randomize(AlbertSquadV1(config), 3, WEIGHT_SCALE[shape])
    spans, out = _through_huggingface(
        squad, os.path.join(work, "squad"), "SQuAD v1.1 model", AutoModelForQuestionAnswering
    )
    real = MASK.astype(bool)
    _report(
        "out: SQuAD v1.1 -> QuestionAnswering",
        {k: np.asarray(out[k])[real] for k in ("start_logits", "end_logits")},
        {
            "start_logits": spans.start_logits.numpy()[real],
            "end_logits": spans.end_logits.numpy()[real],
        },
        tolerance,
        failures,
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    parser.add_argument("--tolerance", type=float, default=1e-5)
    parser.add_argument("--albert_directory", help="a release folder to export (default: random)")
    args = parser.parse_args(argv)
    try:
        import torch
        import transformers
    except ImportError as err:
        print(f"skipped: {err} (pip install torch transformers)")
        return 0
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, shape {args.shape}")
    failures = []
    with tempfile.TemporaryDirectory() as work:
        check_in(args.shape, args.tolerance, failures, work)
        check_out(args.shape, args.tolerance, failures, work, args.albert_directory)
    print("FAILED: " + ", ".join(failures) if failures else "all within tolerance")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
