"""albert_tf.run.model_files: which config, tokenizer and checkpoint files a fine-tuning
run's flags name, and the errors for missing ones."""

from __future__ import annotations

import types

import pytest

from albert_tf.errors import UserError
from albert_tf.run.model_files import resolve_model_files

from classifier_fixtures import DEMO_SPM, glue_config


def _flags(tmp_path, **changes):
    config_file = tmp_path / "albert_config.json"
    glue_config().to_json_file(str(config_file))
    flags = dict(
        albert_hub_module_handle=None,
        init_checkpoint=None,
        albert_config_file=str(config_file),
        spm_model_file=DEMO_SPM,
        vocab_file=None,
        do_lower_case=True,
    )
    return types.SimpleNamespace(**{**flags, **changes})


def test_vocab_file_beside_spm_model_is_not_read(tmp_path):
    """The original run_glue.sh passes --vocab_file=$ALBERT_ROOT/vocab.txt, a file the
    releases do not have, beside --spm_model_file: SentencePiece mode never opens it."""
    placeholder = str(tmp_path / "vocab.txt")
    for require_spm in (False, True):  # run_classifier/run_race, run_squad
        files = resolve_model_files(
            _flags(tmp_path, vocab_file=placeholder), 32, require_spm=require_spm
        )
        assert files.spm_model_file == DEMO_SPM
        assert files.vocab_file is None


def test_missing_files_name_their_flag(tmp_path):
    missing = str(tmp_path / "nothing")
    cases = {
        "vocab_file": _flags(tmp_path, spm_model_file=None, vocab_file=missing),
        "spm_model_file": _flags(tmp_path, spm_model_file=missing, vocab_file=missing),
        "albert_config_file": _flags(tmp_path, albert_config_file=missing),
    }
    for flag, flags in cases.items():
        with pytest.raises(UserError, match=f"^--{flag}={missing}: file not found$"):
            resolve_model_files(flags, 32)


def test_squad_needs_sentencepiece(tmp_path):
    flags = _flags(tmp_path, spm_model_file=None, vocab_file=str(tmp_path / "vocab.txt"))
    with pytest.raises(UserError, match=r"--spm_model_file is required.*--vocab_file is not used"):
        resolve_model_files(flags, 32, require_spm=True)


def test_sentence_pairs_need_two_token_types(tmp_path):
    """type_vocab_size 1 cannot embed the second segment of a pair task (SQuAD, RACE,
    MRPC...); single-sentence tasks (CoLA, SST-2) are fine with it."""
    config_file = tmp_path / "one_type.json"
    glue_config(type_vocab_size=1).to_json_file(str(config_file))
    flags = _flags(tmp_path, albert_config_file=str(config_file))
    assert resolve_model_files(flags, 32, token_types=1).config.type_vocab_size == 1
    with pytest.raises(
        UserError,
        match=rf"^type_vocab_size=1 of {config_file}, but the task's features use segment "
        r"ids 0 to 1 \(sentence pairs\): expected type_vocab_size >= 2$",
    ):
        resolve_model_files(flags, 32)


def test_a_file_that_is_no_sentencepiece_model_is_named_by_its_flag(tmp_path):
    bad = tmp_path / "30k-clean.vocab"
    bad.write_text("<pad>\t0\n<unk>\t0\n")
    with pytest.raises(UserError, match=f"^--spm_model_file={bad}: not a SentencePiece model"):
        resolve_model_files(_flags(tmp_path, spm_model_file=str(bad)), 32)
