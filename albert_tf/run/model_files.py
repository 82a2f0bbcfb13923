"""Which model a fine-tuning run starts from: the flags naming the config, the tokenizer
and the initial checkpoint, and their validation.

A release folder given as --init_checkpoint (an unpacked released model, or a folder
run_pretraining.py wrote) supplies albert_config.json and the SentencePiece model unless
they are given (albert_tf/weights/release.py); so do a Hugging Face folder and a keras-hub preset
(albert_tf/weights: their config translated, their SentencePiece model). A TF-Hub
module folder given as --albert_hub_module_handle (albert_tf/weights/hub.py) supplies the
initial weights, the SentencePiece model and do_lower_case, as the original's
from_hub_module did, and the config (--albert_config_file, else the module's own, else
the released shape its variables match).
"""

from __future__ import annotations

import dataclasses
import logging

from albert_tf import fileio
from albert_tf.data.tokenization import digit_comma_option
from albert_tf.errors import UserError
from albert_tf.options import Options, option
from albert_tf.weights import checkpoints, foreign_folders

_logger = logging.getLogger(__name__)


@dataclasses.dataclass(kw_only=True)
class ModelFileOptions(Options):
    """The original fine-tuning scripts' flags naming the model and tokenizer."""

    albert_config_file: str | None = option(
        None, "albert_config.json of the pretrained model (default: the release folder's)."
    )
    spm_model_file: str | None = option(None, "SentencePiece model (30k-clean.model).")
    vocab_file: str | None = option(None, "WordPiece vocabulary (only without --spm_model_file).")
    albert_hub_module_handle: str | None = option(
        None,
        "Folder of a downloaded, unpacked TF-Hub ALBERT module (TF1 Hub format, or a TF2 "
        "SavedModel of albert_tf or the Model Garden): initial weights, tokenizer, config.",
    )
    do_lower_case: bool = option(True, "Lower-case the input.")
    digit_comma: str = digit_comma_option()


@dataclasses.dataclass
class ModelFiles:
    """The resolved files: config (parsed) and its file, SentencePiece model, WordPiece
    vocabulary (None in SentencePiece mode, where it is not read)."""

    config: object  # AlbertConfig
    spm_model_file: str | None
    vocab_file: str | None
    config_file: str = ""


def resolve_model_files(
    opts, max_seq_length: int, require_spm: bool = False, token_types: int = 2
) -> ModelFiles:
    """Validates the model flags of `opts` (ModelFileOptions fields and init_checkpoint;
    UserError naming the flag and file); nothing is written. `token_types`: how many
    segment ids the task's features use (2 with sentence pairs, 1 without)."""
    from albert_tf.weights import hub, release

    if opts.albert_hub_module_handle:
        return _resolve_hub_module(opts, max_seq_length, token_types)
    init = opts.init_checkpoint
    if init and hub.is_hub_module(init):
        raise UserError(
            f"--init_checkpoint={init}: a TF-Hub module folder; pass it as "
            "--albert_hub_module_handle"
        )
    config_file, spm, vocab = opts.albert_config_file, opts.spm_model_file, opts.vocab_file
    foreign = foreign_folders.describe_foreign(init, "--init_checkpoint") if init else None
    if foreign is not None:
        return _resolve_foreign(opts, foreign, max_seq_length, require_spm, token_types)
    is_release = bool(init) and release.is_release_folder(init)
    if is_release:
        try:
            files = release.release_files(init)
        except FileNotFoundError as err:
            raise UserError(f"--init_checkpoint: {err}") from None
        config_file = config_file or files.config_file
        if not spm and not vocab:
            spm = files.spm_model_file
            vocab = None if spm else files.vocab_file
    if not config_file:
        raise UserError(
            "--albert_config_file is required (or pass a release folder holding "
            "albert_config.json as --init_checkpoint)"
        )
    config = _read_config(config_file)
    if require_spm and not spm:
        raise UserError(
            "--spm_model_file is required: SQuAD features are SentencePiece only, "
            "as the original's" + (" (--vocab_file is not used)" if vocab else "")
        )
    if not spm and not vocab:
        raise UserError("--spm_model_file (or --vocab_file) is required")
    if spm:
        # SentencePiece mode never opens the vocabulary (as the original's FullTokenizer),
        # so a placeholder --vocab_file beside --spm_model_file (the original run_glue.sh
        # passes one) must not stop the run.
        vocab = None
    _check_tokenizer_files(spm, vocab)
    _check_config_fits(config, config_file, max_seq_length, token_types)
    if init and not is_release:
        try:
            checkpoints.resolve_checkpoint_path(init)
        except FileNotFoundError as err:
            raise UserError(f"--init_checkpoint={init}: {err}") from None
    return ModelFiles(config, spm, vocab, config_file)


def _resolve_foreign(opts, foreign, max_seq_length, require_spm, token_types) -> ModelFiles:
    """ModelFiles of a Hugging Face folder or keras-hub preset as --init_checkpoint: its
    config unless --albert_config_file is given, its SentencePiece model unless
    --spm_model_file is."""

    config, config_file = foreign.config, foreign.config_file
    if opts.albert_config_file:
        config_file = opts.albert_config_file
        config = _read_config(config_file)
    if foreign.do_lower_case is not None and foreign.do_lower_case != opts.do_lower_case:
        raise UserError(
            f"--do_lower_case={opts.do_lower_case}, but the tokenizer of {foreign.description} "
            f"says do_lower_case={foreign.do_lower_case}; pass --do_lower_case="
            f"{foreign.do_lower_case}"
        )
    spm = opts.spm_model_file or foreign.spm_model_file
    vocab = None if spm else opts.vocab_file
    if not spm and not vocab:
        raise UserError(
            f"--spm_model_file is required: {foreign.description} holds no SentencePiece model"
        )
    if require_spm and not spm:
        raise UserError("--spm_model_file is required: SQuAD features are SentencePiece only")
    _check_tokenizer_files(spm, vocab)
    _check_config_fits(config, config_file, max_seq_length, token_types)
    return ModelFiles(config, spm, vocab, config_file)


def _read_config(config_file):
    """The AlbertConfig of --albert_config_file; UserError naming the flag otherwise."""
    from albert_tf.model.config import AlbertConfig

    fileio.check_input_file(config_file, f"--albert_config_file={config_file}")
    try:
        return AlbertConfig.from_json_file(config_file)
    except (ValueError, TypeError, KeyError) as err:
        raise UserError(f"--albert_config_file={config_file}: {err}") from None


def _check_tokenizer_files(spm, vocab) -> None:
    """UserError naming the flag unless the files exist and a local `spm` is a
    SentencePiece model."""
    from albert_tf.data import tokenization

    for flag, path in (("spm_model_file", spm), ("vocab_file", vocab)):
        if path:
            fileio.check_input_file(path, f"--{flag}={path}")
    if spm and "://" not in spm:  # a local file: is it a SentencePiece model?
        tokenization.load_spm_model(spm, flag="spm_model_file")


def _check_config_fits(config, config_file, max_seq_length: int, token_types: int) -> None:
    """UserError unless the config takes the task's features: max_seq_length positions and
    `token_types` segment ids."""
    if max_seq_length > config.max_position_embeddings:
        raise UserError(
            f"--max_seq_length={max_seq_length} exceeds max_position_embeddings="
            f"{config.max_position_embeddings} of {config_file}"
        )
    if config.type_vocab_size < token_types:
        raise UserError(
            f"type_vocab_size={config.type_vocab_size} of {config_file}, but the task's "
            f"features use segment ids 0 to {token_types - 1} (sentence pairs): expected "
            f"type_vocab_size >= {token_types}"
        )


def _resolve_hub_module(opts, max_seq_length: int, token_types: int) -> ModelFiles:
    """ModelFiles of --albert_hub_module_handle. As the original's from_hub_module, the
    tokenizer is the module's SentencePiece model: --spm_model_file only has to be set
    (it chose SentencePiece mode there) and, like --vocab_file, is not read, so the
    original's run_glue.sh commands run unchanged."""
    from albert_tf.weights import hub

    handle = opts.albert_hub_module_handle
    if opts.init_checkpoint:
        raise UserError(
            f"--init_checkpoint={opts.init_checkpoint} and --albert_hub_module_handle="
            f"{handle}: both name the initial weights; give one"
        )
    module = hub.open_module(handle)
    config, config_file = hub.module_config(module, opts.albert_config_file)
    if module.spm_model_file is None and module.kind == hub.KERAS_HUB and opts.spm_model_file:
        # A keras-hub export carries no tokenizer: the flag's model is the one.
        module = dataclasses.replace(module, spm_model_file=opts.spm_model_file)
    if module.spm_model_file is None:
        raise UserError(
            f"--albert_hub_module_handle={handle}: the module has no SentencePiece model "
            "(assets/*.model)" + (": pass --spm_model_file" if module.kind == hub.KERAS_HUB else "")
        )
    if module.do_lower_case is not None and module.do_lower_case != opts.do_lower_case:
        raise UserError(
            f"--do_lower_case={opts.do_lower_case}, but the module {handle} was made with "
            f"do_lower_case={module.do_lower_case} (its tokenization_info); pass "
            f"--do_lower_case={module.do_lower_case}"
        )
    for flag in ("spm_model_file", "vocab_file"):
        if getattr(opts, flag):
            _logger.info(
                "--%s=%s not read: the module's tokenizer %s is used, as the original did",
                flag,
                getattr(opts, flag),
                module.spm_model_file,
            )
    _check_config_fits(config, config_file, max_seq_length, token_types)
    return ModelFiles(config, module.spm_model_file, None, config_file)


def make_tokenizer(opts, files: ModelFiles):
    """The FullTokenizer the options ask for, checked against the config's vocabulary."""
    from albert_tf.data import tokenization

    tokenizer = tokenization.FullTokenizer(
        vocab_file=files.vocab_file,
        do_lower_case=opts.do_lower_case,
        spm_model_file=files.spm_model_file,
        digit_comma=opts.digit_comma,
    )
    tokenization.check_vocab_fits_config(tokenizer, files.config.vocab_size, files.config_file)
    return tokenizer


__all__ = ["ModelFileOptions", "ModelFiles", "resolve_model_files", "make_tokenizer"]
