"""The command `python -m albert_tf.export`: a pretrained ALBERT as a TF2 SavedModel of the
encoder (albert_tf/export/saved_model.py, the role of the original's export_to_tfhub.py),
a checkpoint without optimizer state (`export_checkpoint`, its export_checkpoints.py; also
the conversion of a Hugging Face folder or keras-hub preset to the original format), a
Hugging Face folder (`export_huggingface`) or a keras-hub preset (`export_keras_hub`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys

import tensorflow as tf

from albert_tf.cpu import speed_paths
from albert_tf.cpu.speed_paths import SpeedPathOptions
from albert_tf.data.tokenization import digit_comma_option
from albert_tf.export.saved_model import ENCODER_KIND, export_encoder, load_pretrainer
from albert_tf.options import REQUIRED, option
from albert_tf.run.output_writer import check_destination, replace_output
from albert_tf.weights import release

_logger = logging.getLogger(__name__)
# What error lines and --help call the command (its module is run as __main__.py).
SCRIPT = "export.py"


# The kinds of output folder each format writes (albert_tf/run/output_writer.py).
CHECKPOINT_KIND = "release folder (checkpoint)"
HUGGINGFACE_KIND = "Hugging Face folder"
KERAS_HUB_KIND = "keras-hub preset"
KINDS = {
    "saved_model": ENCODER_KIND,
    "checkpoint": CHECKPOINT_KIND,
    "huggingface": HUGGINGFACE_KIND,
    "keras_hub": KERAS_HUB_KIND,
}


def checkpoint_place(export_path) -> tuple[str, str]:
    """(the folder, the checkpoint prefix's name) that export_checkpoint writes for
    `export_path`: a folder and model.ckpt-best, or the folder and name of a prefix
    (a name containing "ckpt" that is no folder)."""
    export_path = os.fspath(export_path).rstrip("/")
    if tf.io.gfile.isdir(export_path) or "ckpt" not in os.path.basename(export_path):
        return export_path, release.CHECKPOINT_NAME
    return os.path.dirname(export_path) or ".", os.path.basename(export_path)


def export_checkpoint(albert_directory, export_path, *, checkpoint_name=None) -> dict:
    """What export_checkpoints.py wrote: the checkpoint of `albert_directory` without
    optimizer state, in the original format: the encoder, the pretraining heads the
    checkpoint holds (a missing head is left out, where the original wrote a random one)
    and `global_step` 0, as the original's fresh graph had it. `albert_directory` may also
    be a Hugging Face folder or keras-hub preset (albert_tf/weights): the conversion to
    the original format.

    `export_path`: a folder (then `<folder>/model.ckpt-best`), or the prefix to write
    when its name contains "ckpt" and it is no folder (`checkpoint_place`). The folder is
    written as a whole and replaces an earlier one (albert_tf/run/output_writer.py): its
    `checkpoint` file names the prefix, and albert_config.json (the source's),
    30k-clean.model and 30k-clean.vocab (the source's SentencePiece model) are put beside
    it, so the folder is a release folder (--init_checkpoint=<folder>, the original's
    export_to_tfhub.py). Returns {"checkpoint": prefix, "variables": number written}.
    """
    from albert_tf.weights import checkpoints

    folder, name = checkpoint_place(export_path)
    files, config, model, _, report = load_pretrainer(albert_directory, checkpoint_name)
    inputs = {"--albert_directory": [albert_directory]}
    with replace_output(folder, CHECKPOINT_KIND, flag="--export_path", inputs=inputs) as tmp:
        checkpoints.save_original_checkpoint(
            model, os.path.join(tmp, name), global_step=0, names=report.loaded
        )
        config_target = os.path.join(tmp, release.CONFIG_NAME)
        if files.config_file:
            tf.io.gfile.copy(files.config_file, config_target)
        else:
            config.to_json_file(config_target)
        if files.spm_model_file:
            release.write_tokenizer_files(tmp, files.spm_model_file)
        else:
            _logger.warning("%s has no SentencePiece model: none written", albert_directory)
    prefix = os.path.join(folder, name)
    _logger.info("wrote %s: %d variables, no optimizer state", prefix, len(report.loaded) + 1)
    return {"checkpoint": prefix, "variables": len(report.loaded) + 1}


# Task heads with a Hugging Face class: run_classifier.py's, run_squad.py's SQuAD v1.1.
_HUGGINGFACE_TASK_HEADS = (
    ("output_weights", "output_bias"),
    ("cls/squad/output_weights", "cls/squad/output_bias"),
)


def _task_head_values(files, report) -> dict:
    """The task head of a fine-tuned model's original-format checkpoint (model.ckpt-best
    of run_classifier.py or run_squad.py for SQuAD v1.1), which the pretrainer left
    unread; {} if none."""
    for names in _HUGGINGFACE_TASK_HEADS:
        if all(n in report.ignored for n in names):
            reader = tf.train.load_checkpoint(files.checkpoint)
            return {n: reader.get_tensor(n) for n in names}
    return {}


def export_huggingface(
    albert_directory, export_path, *, checkpoint_name=None, do_lower_case=True
) -> dict:
    """The model of `albert_directory` as a Hugging Face folder (albert_tf/weights/
    huggingface.py): config.json, model.safetensors and the tokenizer (spiece.model,
    tokenizer_config.json) that transformers' from_pretrained and AutoTokenizer load.
    AlbertForPreTraining with the pretraining heads the checkpoint holds; a fine-tuned
    classifier (output_weights/output_bias in the checkpoint) goes out as
    AlbertForSequenceClassification, a SQuAD v1.1 model (cls/squad/*) as
    AlbertForQuestionAnswering instead. An earlier Hugging Face export at `export_path` is
    replaced (albert_tf/run/output_writer.py).
    Returns {"export_path", "architecture", "tensors"}."""
    from albert_tf.weights import huggingface

    files, config, model, _, report = load_pretrainer(albert_directory, checkpoint_name)
    values = _loaded_values(model, report)
    values.update(_task_head_values(files, report))
    export_path = os.fspath(export_path).rstrip("/")
    with replace_output(export_path, HUGGINGFACE_KIND, flag="--export_path") as tmp:
        written = huggingface.write_folder(
            tmp, config, values, files.spm_model_file, do_lower_case=do_lower_case
        )
    _logger.info("exported %s to %s (%s)", files.checkpoint, export_path, written["architecture"])
    return {
        "export_path": export_path,
        "architecture": written["architecture"],
        "tensors": written["tensors"],
    }


def export_keras_hub(albert_directory, export_path, *, checkpoint_name=None) -> dict:
    """The encoder of `albert_directory` as a keras-hub AlbertBackbone preset
    (albert_tf/weights/keras_hub.py): config.json, model.weights.h5, metadata.json and the
    AlbertTokenizer (tokenizer.json, assets/tokenizer/vocabulary.spm), which
    keras_hub.models.AlbertBackbone.from_preset and AlbertTokenizer.from_preset load. The
    pretraining and task heads are not carried (a backbone preset has none). An existing
    `export_path`: absent, empty or an earlier preset, which is replaced
    (albert_tf/run/output_writer.py). Returns {"export_path", "tensors", "left_out"}."""
    from albert_tf.weights import keras_hub

    files, config, model, _, report = load_pretrainer(albert_directory, checkpoint_name)
    values = _loaded_values(model, report)
    export_path = os.fspath(export_path).rstrip("/")
    with replace_output(export_path, KERAS_HUB_KIND, flag="--export_path") as tmp:
        written = keras_hub.write_folder(tmp, config, values, files.spm_model_file)
    if written["left_out"]:
        _logger.warning("not in a keras-hub backbone preset: %s", ", ".join(written["left_out"]))
    return {
        "export_path": export_path,
        "tensors": written["tensors"],
        "left_out": len(written["left_out"]),
    }


def _loaded_values(model, report) -> dict:
    """{original name: array} of the variables the checkpoint filled."""
    from albert_tf.weights.checkpoints import original_variable_map

    variables = original_variable_map(model)
    return {name: variables[name].numpy() for name in report.loaded}


# --------------------------------------------------------------------------------------
# python -m albert_tf.export
# --------------------------------------------------------------------------------------
@dataclasses.dataclass(kw_only=True)
class ExportOptions(SpeedPathOptions):
    """The flags of export_to_tfhub.py and export_checkpoints.py (the same names and
    defaults), plus --export_format choosing between them."""

    albert_directory: str = option(
        REQUIRED,
        "Folder with albert_config.json, the checkpoint and 30k-clean.model (a release, or "
        "a training run's output folder); or a Hugging Face folder or keras-hub preset "
        "(not for saved_model).",
    )
    checkpoint_name: str = option(release.CHECKPOINT_NAME, "Checkpoint in --albert_directory.")
    export_path: str = option(
        REQUIRED,
        "saved_model: the SavedModel folder (the raw-text model goes to its preprocess/); "
        "checkpoint: the folder to write (its model.ckpt-best), or the prefix to write when "
        "its name contains 'ckpt'; "
        "huggingface, keras_hub: the folder to write. It must be absent, empty or an earlier "
        "export of the same format, which is replaced once the new one is complete.",
        output="folder",
    )
    export_format: str = option(
        "saved_model",
        "saved_model: the pretrained encoder as a TF2 SavedModel (export_to_tfhub.py); "
        "checkpoint: the checkpoint without optimizer state (export_checkpoints.py); "
        "huggingface: a transformers folder (safetensors); keras_hub: a keras-hub preset.",
        choices=("saved_model", "checkpoint", "huggingface", "keras_hub"),
    )
    do_lower_case: bool = option(True, "Lower-case the input (tokenization_info, preprocess).")
    max_seq_length: int = option(
        128, "Feature length of the raw-text preprocessing model.", minimum=3
    )
    digit_comma: str = digit_comma_option()
    use_einsum: bool = option(
        True, "Accepted for compatibility: the export's products are plain MatMuls either way."
    )


def run(opts: ExportOptions) -> dict:
    """The export the options ask for (see export_encoder / export_checkpoint)."""
    from albert_tf.options import check

    check(opts)
    speed_paths.use(opts.speed_paths)
    # The export replaces its folder as a whole: only an earlier export of its format,
    # never the folder it reads, "." or a folder a run holds (checked before any work).
    folder = opts.export_path
    if opts.export_format == "checkpoint":
        folder = checkpoint_place(opts.export_path)[0]
    check_destination(
        folder,
        KINDS[opts.export_format],
        flag="--export_path",
        inputs={"--albert_directory": [opts.albert_directory]},
    )
    if opts.export_format == "checkpoint":
        return export_checkpoint(
            opts.albert_directory, opts.export_path, checkpoint_name=opts.checkpoint_name
        )
    if opts.export_format == "huggingface":
        return export_huggingface(
            opts.albert_directory,
            opts.export_path,
            checkpoint_name=opts.checkpoint_name,
            do_lower_case=opts.do_lower_case,
        )
    if opts.export_format == "keras_hub":
        return export_keras_hub(
            opts.albert_directory, opts.export_path, checkpoint_name=opts.checkpoint_name
        )
    return export_encoder(
        opts.albert_directory,
        opts.export_path,
        checkpoint_name=opts.checkpoint_name,
        do_lower_case=opts.do_lower_case,
        max_seq_length=opts.max_seq_length,
        digit_comma=opts.digit_comma,
    )


def _print_result(result: dict) -> None:
    for name, value in result.items():
        print(f"{name}: {value}")


def main(argv=None) -> int:
    """CLI entry (`python -m albert_tf.export`): the exit status of `cli.execute` (0 done
    or --help; 1 after one `<script>: error: ...` line for bad flags or input). The flags
    live in their own FlagValues, so main() can run in a process with other absl flags."""
    from albert_tf import cli

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    return cli.execute(
        ExportOptions,
        run,
        list(argv) if argv is not None else [SCRIPT, *sys.argv[1:]],
        report=_print_result,
        description="Export a pretrained ALBERT: a TF2 SavedModel of the encoder, a "
        "checkpoint without optimizer state, a Hugging Face folder or a keras-hub preset "
        "(docs/checkpoints.md).",
    )


__all__ = [
    "ExportOptions",
    "export_checkpoint",
    "export_huggingface",
    "export_keras_hub",
    "main",
    "run",
]
