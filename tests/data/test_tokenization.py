"""Tests for albert_tf.data.tokenization (pure Python)."""

import os
import sys

import pytest
import sentencepiece as spm

from albert_tf.data import tokenization as T
from albert_tf.errors import UserError

from repo_paths import REPO_ROOT

ROOT = REPO_ROOT
DEMO_SPM = os.path.join(ROOT, "data", "demo", "spm.model")


def test_tokenization_does_not_import_tensorflow():
    import subprocess

    code = "import sys, albert_tf.data.tokenization; print('tensorflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize(
    "text,lower,expected",
    [
        ("  Hello \t  World\n", False, "Hello World"),
        ("Héllo Wörld", False, "Hello World"),
        ("Héllo Wörld", True, "hello world"),
        ("naïve café", True, "naive cafe"),
        ("a\u00a0b\u3000c", False, "a b c"),  # nbsp / ideographic space are whitespace
        ("ﬁne ²", False, "fine 2"),  # NFKD compatibility mapping
        ("ΟΔΟΣ", True, "οδος"),  # str.lower: final sigma
        ("", True, ""),
    ],
)
def test_preprocess_text(text, lower, expected):
    assert T.preprocess_text(text, lower=lower) == expected


def test_preprocess_text_keep_space_and_bytes():
    assert T.preprocess_text("  a  b ", remove_space=False) == "  a  b "
    assert T.preprocess_text("caf\xe9".encode("latin-1")) == "cafe"  # latin-1 fallback
    with pytest.raises(TypeError):
        T.preprocess_text(12)


class FakeSp:
    """Stand-in processor with a fixed segmentation, to pin the digit-comma rule by hand."""

    table = {
        "x1234, ok": ["▁x", "1234,", "▁ok"],
        "1234": ["▁", "1234"],
        "in 1990, we": ["▁in", "▁1990,", "▁we"],
        "1990": ["▁1990"],
        "a5,": ["▁a", "5,"],
        "5": ["▁5"],
    }

    def EncodeAsPieces(self, text):
        return list(self.table[text])

    def PieceToId(self, piece):
        return len(piece)


def test_encode_pieces_digit_comma_intended_vs_py3():
    sp = FakeSp()
    # Piece without "▁": as written, the re-encoded leading "▁" is removed (dropped when alone).
    intended = "intended"
    assert T.encode_pieces(sp, "x1234, ok", digit_comma=intended) == ["▁x", "1234", ",", "▁ok"]
    assert T.encode_pieces(sp, "a5,", digit_comma=intended) == ["▁a", "5", ","]
    # Under Python 3 the original never removes it; that is the default.
    assert T.encode_pieces(sp, "x1234, ok") == ["▁x", "▁", "1234", ",", "▁ok"]
    assert T.encode_pieces(sp, "a5,", digit_comma="python3") == ["▁a", "▁5", ","]
    # Piece that starts with "▁": both modes agree.
    for mode in T.DIGIT_COMMA_MODES:
        assert T.encode_pieces(sp, "in 1990, we", digit_comma=mode) == ["▁in", "▁1990", ",", "▁we"]
    assert T.encode_ids(sp, "a5,") == [2, 2, 1]
    assert T.encode_ids(sp, "a5,", digit_comma=intended) == [2, 1, 1]
    with pytest.raises(UserError, match="^--digit_comma='py2': expected one of python3, intended"):
        T.encode_pieces(sp, "a5,", digit_comma="py2")
    with pytest.raises(UserError, match="--digit_comma=True"):
        T.FullTokenizer(spm_model_file=DEMO_SPM, digit_comma=True)


def test_encode_pieces_demo_model():
    sp = T.load_spm_model(DEMO_SPM)
    # The demo model segments "x1234," as [.., "34,"]: the rule fires on a piece without "▁".
    assert "34," in sp.EncodeAsPieces("x1234, ok")
    assert T.encode_pieces(sp, "x1234, ok", digit_comma="intended") == [
        "▁",
        "x",
        "12",
        "34",
        ",",
        "▁",
        "ok",
    ]
    assert T.encode_pieces(sp, "x1234, ok") == ["▁", "x", "12", "▁34", ",", "▁", "ok"]
    assert T.encode_pieces(sp, "at 7,") == ["▁at", "▁7", ","]  # piece with "▁": modes agree
    text = T.preprocess_text("In 1987, she sold 12,500 sheep; at 7, 4,", lower=True)
    pieces = T.encode_pieces(sp, text)
    assert "".join(pieces).replace("▁", " ").strip() == text
    assert not any(len(p) > 1 and p.endswith(",") and p[-2].isdigit() for p in pieces)


@pytest.fixture(scope="module")
def spm_tok():
    return T.FullTokenizer(spm_model_file=DEMO_SPM, do_lower_case=True)


def test_full_tokenizer_spm(spm_tok):
    assert spm_tok.spm_mode and spm_tok.sp_model is not None
    assert spm_tok.special_ids() == {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
    assert spm_tok.vocab_size == spm_tok.sp_model.GetPieceSize() == len(spm_tok.inv_vocab)
    # tokenize does not lower-case: callers run preprocess_text (quirk 19).
    assert spm_tok.tokenize("Tom") != spm_tok.tokenize("tom")
    pieces = spm_tok.tokenize(spm_tok.preprocess("Tom walked to the station."))
    ids = spm_tok.convert_tokens_to_ids(pieces)
    assert spm_tok.convert_ids_to_tokens(ids) == pieces
    assert ids == spm_tok.encode("Tom walked to the station.")
    assert spm_tok.convert_tokens_to_ids(["not-a-piece-at-all"]) == [1]
    with pytest.raises(IndexError, match="outside the vocabulary"):
        spm_tok.convert_ids_to_tokens([spm_tok.vocab_size])


def test_spm_missing_special_piece(tmp_path):
    inp = tmp_path / "t.txt"
    inp.write_text("\n".join(["the cat sat on the mat"] * 50 + ["a dog ran"] * 50))
    spm.SentencePieceTrainer.train(
        input=str(inp),
        model_prefix=str(tmp_path / "m"),
        vocab_size=17,
        model_type="unigram",
        minloglevel=2,
    )
    tok = T.FullTokenizer(spm_model_file=str(tmp_path / "m.model"))
    with pytest.raises(ValueError, match=r"m\.model.*<pad>.*\[CLS\]"):
        tok.special_ids()


def test_errors(tmp_path):
    with pytest.raises(ValueError, match="neither"):
        T.FullTokenizer()
    with pytest.raises(FileNotFoundError, match="nope.model"):
        T.FullTokenizer(spm_model_file=str(tmp_path / "nope.model"))
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        T.FullTokenizer(vocab_file=str(tmp_path / "nope.txt"))
    bad = tmp_path / "bad.model"
    bad.write_bytes(b"this is not a model")
    with pytest.raises(ValueError, match=f"^'{bad}': not a SentencePiece model"):
        T.FullTokenizer(spm_model_file=str(bad))
    with pytest.raises(ValueError, match=f"^--spm_model_file={bad}: not a SentencePiece model"):
        T.load_spm_model(str(bad), flag="spm_model_file")
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(ValueError, match="empty.txt"):
        T.load_vocab(str(empty))


@pytest.fixture
def wp_vocab(tmp_path):
    words = [
        "[PAD]",
        "[UNK]",
        "[CLS]",
        "[SEP]",
        "[MASK]",
        "un",
        "##aff",
        "##able",
        "runn",
        "##ing",
        "the",
        "the",
        ",",
        "!",
        "中",
        "国",
        "hello",
        "cafe",
        "\tweird 7",
        "x",
    ]
    p = tmp_path / "vocab.txt"
    p.write_text("\n".join(words) + "\n", encoding="utf-8")
    return p


def test_load_vocab(wp_vocab):
    v = T.load_vocab(str(wp_vocab))
    assert list(v)[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert v["the"] == 10 and v[","] == 11  # duplicate skipped, ids stay dense
    assert v["weird"] == 17  # first whitespace field only
    assert list(v.values()) == list(range(len(v)))


def test_wordpiece_tokenizer(wp_vocab):
    tok = T.FullTokenizer(vocab_file=str(wp_vocab), do_lower_case=True)
    assert not tok.spm_mode and tok.sp_model is None
    assert tok.tokenize("UNaffable running!") == ["un", "##aff", "##able", "runn", "##ing", "!"]
    assert tok.tokenize("中国hello,Café") == ["中", "国", "hello", ",", "cafe"]
    assert tok.tokenize("unknownword x") == ["[UNK]", "x"]
    assert tok.tokenize("x" * 201) == ["[UNK]"]
    assert tok.tokenize("a\x00b\u200b") == ["[UNK]"]  # control chars removed -> "ab"
    assert tok.special_ids() == {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
    ids = tok.convert_tokens_to_ids(["un", "##aff"])
    assert ids == [5, 6] and tok.convert_ids_to_tokens(ids) == ["un", "##aff"]
    with pytest.raises(KeyError, match="vocab.txt"):
        tok.convert_tokens_to_ids(["zzz"])
    cased = T.FullTokenizer(vocab_file=str(wp_vocab), do_lower_case=False)
    assert cased.tokenize("Café") == ["[UNK]"]


def test_wordpiece_missing_special(tmp_path):
    p = tmp_path / "v.txt"
    p.write_text("[UNK]\n[CLS]\nhello\n")
    with pytest.raises(ValueError, match=r"v\.txt.*\[PAD\].*\[SEP\].*\[MASK\]"):
        T.FullTokenizer(vocab_file=str(p)).special_ids()


def test_spm_vocab_as_wordpiece_vocab_is_refused(tmp_path):
    """A SentencePiece .vocab ("piece<TAB>score" lines) failed later with KeyError: '[UNK]'."""
    spm_vocab = os.path.join(ROOT, "data", "demo", "spm.vocab")
    with pytest.raises(
        UserError,
        match=rf"^{spm_vocab}: a SentencePiece .vocab file, not a "
        r"WordPiece vocabulary; pass the SentencePiece .model file as "
        r"--spm_model_file instead$",
    ):
        T.FullTokenizer(vocab_file=spm_vocab)
    other = tmp_path / "words.txt"
    other.write_text("[CLS]\n[SEP]\nhello\n")
    with pytest.raises(
        UserError,
        match=r"words.txt: not a WordPiece vocabulary \(one token per "
        r"line\): it has no \[UNK\] line",
    ):
        T.FullTokenizer(vocab_file=str(other))


def test_vocab_must_fit_the_config(wp_vocab):
    spm_tok = T.FullTokenizer(spm_model_file=DEMO_SPM)
    size = spm_tok.vocab_size
    for vocab_size in (size, 30000):
        T.check_vocab_fits_config(spm_tok, vocab_size, "albert_config.json")
    with pytest.raises(
        UserError,
        match=rf"^--spm_model_file={DEMO_SPM} has {size} pieces but "
        r"cfg/albert_config.json has vocab_size 100: ids 100 and above have no "
        r"embedding",
    ):
        T.check_vocab_fits_config(spm_tok, 100, "cfg/albert_config.json")
    wp_tok = T.FullTokenizer(vocab_file=str(wp_vocab))
    with pytest.raises(UserError, match=rf"^--vocab_file={wp_vocab} has 19 pieces but c.json"):
        T.check_vocab_fits_config(wp_tok, 18, "c.json")
