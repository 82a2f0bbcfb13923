"""Loading the unpacked folder of a released ALBERT model.

A release (e.g. `albert_base_v2.tar.gz`, unpacked) holds `albert_config.json`,
`model.ckpt-best.{index,data-*,meta}` (original TF1 variable names),
`30k-clean.model` (SentencePiece) and `30k-clean.vocab`. The folder written by
run_pretraining.py (albert_config.json + checkpoints) is accepted too.

    config, model, tokenizer = load_release("albert_base", model_cls=AlbertClassifier,
                                            num_labels=2)

The encoder must be complete in the checkpoint; task heads the checkpoint does
not hold (e.g. a classifier head on a pretraining release) keep their fresh
initialization.
"""

from __future__ import annotations

import dataclasses
import logging
import os

from albert_tf import fileio
from albert_tf.weights import checkpoints

_logger = logging.getLogger(__name__)

CONFIG_NAME = "albert_config.json"
SPM_MODEL_NAME = "30k-clean.model"
VOCAB_NAME = "30k-clean.vocab"
CHECKPOINT_NAME = checkpoints.BEST_NAME
# Heads may be missing from a release; the encoder (`bert/`) may not.
HEAD_ALLOW_MISSING = (r"^(?!bert/)",)


@dataclasses.dataclass
class ReleaseFiles:
    """Paths found in a release folder (None where absent)."""

    folder: str
    config_file: str
    checkpoint: str
    spm_model_file: str | None
    vocab_file: str | None


def is_release_folder(path) -> bool:
    """Whether `path` is a directory holding an `albert_config.json`."""
    return bool(path) and fileio.isdir(path) and fileio.isfile(os.path.join(path, CONFIG_NAME))


def release_files(folder, checkpoint_name: str | None = None) -> ReleaseFiles:
    """Finds config, checkpoint and tokenizer files of a release folder.

    The checkpoint is `checkpoint_name` (default `model.ckpt-best`, else the
    folder's latest checkpoint); the SentencePiece model is `30k-clean.model`,
    else the folder's only `*.model` file. Raises FileNotFoundError naming
    what is missing.
    """
    folder = os.fspath(folder)
    if not fileio.isdir(folder):
        raise FileNotFoundError(f"release folder {folder!r} does not exist")
    config_file = os.path.join(folder, CONFIG_NAME)
    if not fileio.isfile(config_file):
        raise FileNotFoundError(f"release folder {folder!r} has no {CONFIG_NAME}")
    name = checkpoint_name or CHECKPOINT_NAME
    if fileio.isfile(os.path.join(folder, name + ".index")):
        checkpoint = os.path.join(folder, name)
    elif checkpoint_name:
        raise FileNotFoundError(
            f"release folder {folder!r} has no checkpoint {name!r} ({name}.index missing)"
        )
    else:
        try:
            checkpoint = checkpoints.resolve_checkpoint_path(folder)
        except FileNotFoundError:
            raise FileNotFoundError(
                f"release folder {folder!r} has no checkpoint "
                f"({CHECKPOINT_NAME}.index or another *.index)"
            ) from None
    spm = os.path.join(folder, SPM_MODEL_NAME)
    if not fileio.isfile(spm):
        models = fileio.glob(os.path.join(folder, "*.model"))
        spm = models[0] if len(models) == 1 else None
    vocab = os.path.join(folder, VOCAB_NAME)
    return ReleaseFiles(
        folder, config_file, checkpoint, spm, vocab if fileio.isfile(vocab) else None
    )


def _vocab_text(spm_model_file) -> str:
    """The `.vocab` SentencePiece writes beside a model: a piece, a tab, its score per id."""
    import sentencepiece as spm
    import tensorflow as tf

    with tf.io.gfile.GFile(spm_model_file, "rb") as f:
        processor = spm.SentencePieceProcessor(model_proto=f.read())
    return "".join(
        f"{processor.id_to_piece(i)}\t{processor.get_score(i):g}\n"
        for i in range(processor.get_piece_size())
    )


def write_tokenizer_files(folder, spm_model_file) -> list[str]:
    """Puts the SentencePiece model into `folder` as a release has it: 30k-clean.model
    (a copy) and 30k-clean.vocab (the `.vocab` file beside the model, else written from
    the model). What the original's export_to_tfhub.py opens; files already there with
    the same bytes are left alone. Returns the paths written."""
    import tensorflow as tf

    from albert_tf import fileio

    def read(path):
        with tf.io.gfile.GFile(path, "rb") as f:
            return f.read()

    model = read(spm_model_file)
    stem = os.path.splitext(os.fspath(spm_model_file))[0]
    beside = stem + ".vocab"
    vocab = read(beside) if tf.io.gfile.exists(beside) else _vocab_text(spm_model_file).encode()
    written = []
    for name, data in ((SPM_MODEL_NAME, model), (VOCAB_NAME, vocab)):
        target = os.path.join(os.fspath(folder), name)
        if tf.io.gfile.exists(target) and read(target) == data:
            continue
        with fileio.atomic_path(target) as tmp:
            with tf.io.gfile.GFile(tmp, "wb") as f:
                f.write(data)
        written.append(target)
    return written


def load_release(
    folder,
    model_cls=None,
    *,
    albert_config_file=None,
    spm_model_file=None,
    vocab_file=None,
    do_lower_case=True,
    checkpoint_name=None,
    allow_missing=HEAD_ALLOW_MISSING,
    **model_kwargs,
):
    """Builds a model from a release folder and fills it from the release checkpoint.

    Args:
      folder: the unpacked release (or a run_pretraining.py output folder).
      model_cls: AlbertModel (default), AlbertPretrainer, AlbertClassifier, ...:
        called as `model_cls(config, **model_kwargs)`.
      albert_config_file, spm_model_file, vocab_file: override the folder's files.
      do_lower_case: for the tokenizer (releases are uncased: True).
      checkpoint_name: checkpoint prefix inside the folder (default model.ckpt-best).
      allow_missing: regexes of model variables (original names) that may be absent
        from the checkpoint; default: everything outside the encoder.
    Returns:
      (AlbertConfig, built and filled model, FullTokenizer or None when the folder
      has no tokenizer file and none was given).
    Raises:
      FileNotFoundError: missing folder or files.
      albert_tf.weights.checkpoints.CheckpointMismatchError: the checkpoint cannot fill the model.
    """
    from albert_tf.data import tokenization
    from albert_tf.model.config import AlbertConfig
    from albert_tf.model.modeling import AlbertModel

    files = release_files(folder, checkpoint_name)
    config = AlbertConfig.from_json_file(albert_config_file or files.config_file)
    model = (model_cls or AlbertModel)(config, **model_kwargs)
    model.build()
    checkpoints.init_from_checkpoint(model, files.checkpoint, allow_missing=allow_missing)
    spm = spm_model_file or files.spm_model_file
    vocab = vocab_file or (None if spm else files.vocab_file)
    tokenizer = None
    if spm or vocab:
        tokenizer = tokenization.FullTokenizer(
            vocab_file=vocab, do_lower_case=do_lower_case, spm_model_file=spm
        )
    else:
        _logger.warning("release folder %s has no tokenizer model; returning no tokenizer", folder)
    return config, model, tokenizer


__all__ = [
    "load_release",
    "release_files",
    "is_release_folder",
    "ReleaseFiles",
    "write_tokenizer_files",
    "CONFIG_NAME",
    "SPM_MODEL_NAME",
    "VOCAB_NAME",
    "CHECKPOINT_NAME",
]
