"""Tokenization for ALBERT: SentencePiece (English models) and WordPiece (Chinese models).

Mirrors `tokenization.py` of the original release (docs/original.md §9). This module must not
import TensorFlow: the data-generation worker processes import it. The in-graph equivalent lives in
`albert_tf.data.tf_tokenization`.

Two behaviours of the original are made explicit here:

* SentencePiece mode does not lower-case or normalize inside `FullTokenizer.tokenize`; every
  caller of the original applies `preprocess_text(text, lower=do_lower_case)` first (quirk 19).
* The digit-comma rule of `encode_pieces` was written for Python 2. Under Python 3 one of its
  comparisons is bytes-vs-str and never true, so a leading "▁" is never stripped from the
  re-encoded piece (quirk 18). `digit_comma` chooses: "python3" (the default) gives the pieces
  the original scripts produce today, so features and pretraining data equal theirs;
  "intended" gives the rule as written (what the original gave under Python 2 and what the
  HuggingFace port does). Every tokenizer of this package (`FullTokenizer`, the batched one of
  `create_pretraining_data`, the in-graph one) takes the same parameter.
"""

from __future__ import annotations

import collections
import logging
import os
import unicodedata
from typing import Iterable, Mapping

import sentencepiece as spm

from albert_tf import fileio
from albert_tf.errors import UserError

logger = logging.getLogger(__name__)

SPIECE_UNDERLINE = "\u2581"  # "▁", SentencePiece's word-start marker.

# Values of `digit_comma` (see the module docstring); the default is the original's behaviour
# under Python 3.
DIGIT_COMMA_MODES = ("python3", "intended")
DEFAULT_DIGIT_COMMA = "python3"

# Special pieces the data/model code needs, by role, for each tokenizer mode.
SPM_SPECIAL_PIECES = {
    "pad": "<pad>",
    "unk": "<unk>",
    "cls": "[CLS]",
    "sep": "[SEP]",
    "mask": "[MASK]",
}
WORDPIECE_SPECIAL_PIECES = {
    "pad": "[PAD]",
    "unk": "[UNK]",
    "cls": "[CLS]",
    "sep": "[SEP]",
    "mask": "[MASK]",
}

__all__ = [
    "SPIECE_UNDERLINE",
    "DIGIT_COMMA_MODES",
    "DEFAULT_DIGIT_COMMA",
    "check_digit_comma",
    "preprocess_text",
    "encode_pieces",
    "split_digit_comma_piece",
    "encode_ids",
    "load_vocab",
    "load_spm_model",
    "check_vocab_fits_config",
    "FullTokenizer",
    "BasicTokenizer",
    "WordpieceTokenizer",
]


# --------------------------------------------------------------------------------------------
# SentencePiece helpers
# --------------------------------------------------------------------------------------------


def preprocess_text(text: str, remove_space: bool = True, lower: bool = False) -> str:
    """Normalizes raw text the way the original does before SentencePiece encoding (§9.1).

    Args:
      text: str. Raw text (bytes are decoded as UTF-8, falling back to Latin-1, as the
        Python-2 branch of the original did).
      remove_space: bool. Strip, split on whitespace (`str.split()` semantics) and re-join with
        single spaces.
      lower: bool. Lower-case after normalization (`str.lower`, so Greek final sigma applies).

    Returns:
      str: NFKD-normalized text with all combining characters (accents) removed.
    """
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            text = text.decode("latin-1")
    if not isinstance(text, str):
        raise TypeError(f"preprocess_text expects str or bytes, got {type(text).__name__}")
    out = " ".join(text.strip().split()) if remove_space else text
    out = unicodedata.normalize("NFKD", out)
    out = "".join(c for c in out if not unicodedata.combining(c))
    if lower:
        out = out.lower()
    return out


def digit_comma_option():
    """The --digit_comma option field: every script and create_pretraining_data declare it
    with this one definition (albert_tf/options.py)."""
    from albert_tf.options import option

    return option(
        DEFAULT_DIGIT_COMMA,
        "SentencePiece pieces like '34,': 'python3' = what the original scripts "
        "produce under Python 3 (default; equal features), 'intended' = the rule as "
        "written (HuggingFace's). See docs/faithfulness.md.",
        choices=DIGIT_COMMA_MODES,
    )


def check_digit_comma(digit_comma: str) -> str:
    """Returns `digit_comma` if it is one of DIGIT_COMMA_MODES, else raises UserError."""
    if digit_comma not in DIGIT_COMMA_MODES:
        raise UserError(
            f"--digit_comma={digit_comma!r}: expected one of {', '.join(DIGIT_COMMA_MODES)}"
        )
    return digit_comma


def _is_digit_comma_piece(piece: str) -> bool:
    """True for pieces like "▁1990," or "5,": longer than one char, "," after a digit."""
    return len(piece) > 1 and piece[-1] == "," and piece[-2].isdigit()


def encode_pieces(
    sp_model: spm.SentencePieceProcessor,
    text: str,
    sample: bool = False,
    digit_comma: str = DEFAULT_DIGIT_COMMA,
) -> list[str]:
    """Encodes `text` into SentencePiece pieces, splitting "<digits>," pieces (§9.2).

    Every piece that ends in "," preceded by a digit is re-encoded without the comma and without
    "▁" markers, and the comma is appended as its own piece. As written (`digit_comma=
    "intended"`, the original under Python 2), when the original piece did not start with "▁"
    but the re-encoded first piece does, that "▁" is removed (the piece is dropped if it was
    only "▁"): "x1234," gives [..., "4", ","]. Under Python 3 the original never fires this
    strip step (`digit_comma="python3"`, the default): [..., "▁", "4", ","].

    Args:
      sp_model: a loaded `sentencepiece.SentencePieceProcessor`.
      text: str, normally already passed through `preprocess_text`.
      sample: bool. Use subword sampling (nbest 64, alpha 0.1), as the original offers.
      digit_comma: str. "python3" or "intended" (see above).

    Returns:
      list[str] of pieces.
    """
    if sample:
        pieces = sp_model.SampleEncodeAsPieces(text, 64, 0.1)
    else:
        pieces = sp_model.EncodeAsPieces(text)
    out: list[str] = []
    for piece in pieces:
        if _is_digit_comma_piece(piece):
            out.extend(split_digit_comma_piece(sp_model, piece, digit_comma))
        else:
            out.append(piece)
    return out


def split_digit_comma_piece(
    sp_model: spm.SentencePieceProcessor, piece: str, digit_comma: str = DEFAULT_DIGIT_COMMA
) -> list[str]:
    """The pieces that `encode_pieces` puts in place of one "<digit>," piece (see there)."""
    check_digit_comma(digit_comma)
    sub = sp_model.EncodeAsPieces(piece[:-1].replace(SPIECE_UNDERLINE, ""))
    if (
        digit_comma == "intended"
        and not piece.startswith(SPIECE_UNDERLINE)
        and sub
        and sub[0].startswith(SPIECE_UNDERLINE)
    ):
        if len(sub[0]) == 1:
            sub = sub[1:]
        else:
            sub[0] = sub[0][1:]
    return [*sub, ","]


def encode_ids(
    sp_model: spm.SentencePieceProcessor,
    text: str,
    sample: bool = False,
    digit_comma: str = DEFAULT_DIGIT_COMMA,
) -> list[int]:
    """`encode_pieces` followed by `PieceToId` (unknown pieces map to the unk id).

    Returns:
      list[int] of SentencePiece ids.
    """
    pieces = encode_pieces(sp_model, text, sample=sample, digit_comma=digit_comma)
    return [sp_model.PieceToId(p) for p in pieces]


def load_spm_model(spm_model_file: str, flag: str | None = None) -> spm.SentencePieceProcessor:
    """Loads a SentencePiece model, with errors that name the file (as `--<flag>=<path>`
    when the flag that named it is given).

    Raises:
      FileNotFoundError: the file does not exist.
      UserError: the file is not a readable SentencePiece model.
    """
    path = os.fspath(spm_model_file)
    if not fileio.exists(path) and not (fileio.is_local(path) and os.path.islink(path)):
        raise FileNotFoundError(f"SentencePiece model file not found: {path!r}")
    what = f"--{flag}={path}" if flag else repr(path)
    fileio.check_input_file(path, what)  # a folder, FIFO, symlink loop: one line
    sp = spm.SentencePieceProcessor()
    try:
        # From its bytes, as the original did for paths SentencePiece cannot open (gs://).
        sp.LoadFromSerializedProto(fileio.read_bytes(path))
    except (OSError, RuntimeError) as e:
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise UserError(
            f"{what}: not a SentencePiece model (a .model file was expected; {reason})"
        ) from None
    if sp.GetPieceSize() <= 0:
        raise UserError(f"{what}: the SentencePiece model has no pieces")
    return sp


# --------------------------------------------------------------------------------------------
# WordPiece helpers (Chinese models)
# --------------------------------------------------------------------------------------------


def load_vocab(vocab_file: str) -> "collections.OrderedDict[str, int]":
    """Reads a WordPiece vocabulary: first whitespace field per line, first occurrence wins.

    Ids are assigned in order of first appearance; duplicates are skipped (so ids stay dense); a
    blank line stands for the token " ", as in the original.

    Raises:
      FileNotFoundError: the file does not exist.
      UserError: the file is not UTF-8 or contains no tokens.
    """
    path = os.fspath(vocab_file)
    if not fileio.isfile(path):
        raise FileNotFoundError(f"Vocabulary file not found: {path!r}")
    vocab: "collections.OrderedDict[str, int]" = collections.OrderedDict()
    try:
        # Lines end at "\n" only, as the original read them.
        lines = fileio.read_bytes(path).decode("utf-8").split("\n")
    except UnicodeDecodeError as e:
        raise UserError(f"Vocabulary file {path!r} is not valid UTF-8: {e}") from None
    if lines and not lines[-1]:
        lines.pop()  # after the last newline
    for line in lines:
        stripped = line.strip()
        token = stripped.split()[0] if stripped else " "
        if token not in vocab:
            vocab[token] = len(vocab)
    if not vocab:
        raise UserError(f"Vocabulary file {path!r} is empty")
    return vocab


def _check_wordpiece_vocab(path: str, vocab: Mapping[str, int]) -> None:
    """Refuses a vocabulary without "[UNK]" (WordPiece emits it for every unknown word)."""
    unk = WORDPIECE_SPECIAL_PIECES["unk"]
    if unk in vocab:
        return
    if SPM_SPECIAL_PIECES["unk"] in vocab or any(t.startswith(SPIECE_UNDERLINE) for t in vocab):
        raise UserError(
            f"{path}: a SentencePiece .vocab file, not a WordPiece vocabulary; pass "
            "the SentencePiece .model file as --spm_model_file instead"
        )
    raise UserError(
        f"{path}: not a WordPiece vocabulary (one token per line): it has no {unk} "
        "line (for a SentencePiece model use --spm_model_file)"
    )


def check_vocab_fits_config(tokenizer: "FullTokenizer", vocab_size: int, config_file: str) -> None:
    """Refuses a tokenizer whose ids reach past the model's embedding table.

    Args:
      tokenizer: a FullTokenizer.
      vocab_size: the config's `vocab_size` (rows of the word-embedding table).
      config_file: where `vocab_size` comes from, for the message.
    Raises:
      UserError: naming both files when the tokenizer has more pieces than `vocab_size`
        (the ids past the table would fail inside the model's embedding lookup).
    """
    if tokenizer.vocab_size > vocab_size:
        flag = "--spm_model_file" if tokenizer.spm_mode else "--vocab_file"
        raise UserError(
            f"{flag}={tokenizer.model_file} has {tokenizer.vocab_size} pieces but "
            f"{config_file} has vocab_size {vocab_size}: ids {vocab_size} and above have no "
            "embedding (use the tokenizer the model was trained with)"
        )


def _is_whitespace(char: str) -> bool:
    # Tab/newline/CR are control characters in Unicode but act as spaces here.
    if char in " \t\n\r":
        return True
    return unicodedata.category(char) == "Zs"


def _is_control(char: str) -> bool:
    if char in "\t\n\r":
        return False
    return unicodedata.category(char) in ("Cc", "Cf")


def _is_punctuation(char: str) -> bool:
    cp = ord(char)
    # All non-alphanumeric printable ASCII counts as punctuation ("$", "^", "`" are symbols in
    # Unicode but BERT splits them too).
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(char).startswith("P")


# CJK Unified Ideographs blocks (not Hangul / Kana, which are space-separated scripts).
_CJK_RANGES = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)


def _is_cjk(cp: int) -> bool:
    return any(lo <= cp <= hi for lo, hi in _CJK_RANGES)


class BasicTokenizer:
    """BERT basic tokenization: cleanup, CJK splitting, optional lower/accent strip, punctuation.

    Args:
      do_lower_case: bool. Lower-case and strip accents (NFD, drop category Mn).
    """

    def __init__(self, do_lower_case: bool = True):
        self.do_lower_case = do_lower_case

    def tokenize(self, text: str) -> list[str]:
        """Returns the list of basic tokens (str) of `text`."""
        chars = []
        for c in text:
            cp = ord(c)
            if cp == 0 or cp == 0xFFFD or _is_control(c):
                continue
            if _is_whitespace(c):
                chars.append(" ")
            elif _is_cjk(cp):
                chars.extend((" ", c, " "))
            else:
                chars.append(c)
        out: list[str] = []
        # str.split() (not split(" ")): the original splits on every Python whitespace char.
        for token in "".join(chars).split():
            if self.do_lower_case:
                token = token.lower()
                token = "".join(
                    c
                    for c in unicodedata.normalize("NFD", token)
                    if unicodedata.category(c) != "Mn"
                )
            out.extend(self._split_on_punctuation(token))
        return [t for t in out if t]

    @staticmethod
    def _split_on_punctuation(token: str) -> list[str]:
        pieces: list[str] = []
        current = []
        for c in token:
            if _is_punctuation(c):
                if current:
                    pieces.append("".join(current))
                    current = []
                pieces.append(c)
            else:
                current.append(c)
        if current:
            pieces.append("".join(current))
        return pieces


class WordpieceTokenizer:
    """Greedy longest-match-first WordPiece with "##" continuations.

    Args:
      vocab: mapping or set of pieces.
      unk_token: str emitted for a word that cannot be covered (the whole word becomes unk).
      max_input_chars_per_word: int. Longer words become `unk_token`.
    """

    def __init__(
        self,
        vocab: Mapping[str, int],
        unk_token: str = "[UNK]",
        max_input_chars_per_word: int = 200,
    ):
        self.vocab = vocab
        self.unk_token = unk_token
        self.max_input_chars_per_word = max_input_chars_per_word

    def tokenize(self, text: str) -> list[str]:
        """Splits whitespace-separated words of `text` into pieces (list[str])."""
        out: list[str] = []
        for word in text.split():
            if len(word) > self.max_input_chars_per_word:
                out.append(self.unk_token)
                continue
            pieces = []
            start = 0
            while start < len(word):
                end = len(word)
                match = None
                while end > start:
                    candidate = word[start:end]
                    if start > 0:
                        candidate = "##" + candidate
                    if candidate in self.vocab:
                        match = candidate
                        break
                    end -= 1
                if match is None:
                    pieces = [self.unk_token]
                    break
                pieces.append(match)
                start = end
            out.extend(pieces)
        return out


# --------------------------------------------------------------------------------------------
# FullTokenizer
# --------------------------------------------------------------------------------------------


class FullTokenizer:
    """End-to-end tokenizer in SentencePiece mode (`spm_model_file`) or WordPiece mode.

    SentencePiece mode (used whenever `spm_model_file` is given, as in the original):
    `tokenize(text)` is `encode_pieces(sp_model, text)` only. It does NOT normalize or lower-case:
    callers must pass `preprocess_text(text, lower=tokenizer.do_lower_case)`, exactly like the
    original's data processors. `do_lower_case` is only stored for them.

    WordPiece mode (`vocab_file` only; Chinese ALBERT models): BERT basic tokenization (honours
    `do_lower_case`) followed by greedy WordPiece. Its input needs no `preprocess_text`.

    Args:
      vocab_file: str or None. WordPiece vocabulary (ignored in SentencePiece mode).
      do_lower_case: bool.
      spm_model_file: str or None. SentencePiece model.
      digit_comma: str. "python3" (default: the original scripts as they run today) or
        "intended" (the rule as written, as the HuggingFace port); see `encode_pieces`.

    Attributes:
      vocab: dict[str, int] piece -> id. inv_vocab: dict[int, str].
      sp_model: SentencePieceProcessor or None (WordPiece mode). spm_mode: bool.
      do_lower_case: bool. digit_comma: str. vocab_size (property): int.
    """

    def __init__(
        self,
        vocab_file: str | None = None,
        do_lower_case: bool = True,
        spm_model_file: str | None = None,
        digit_comma: str = DEFAULT_DIGIT_COMMA,
    ):
        self.do_lower_case = bool(do_lower_case)
        self.digit_comma = check_digit_comma(digit_comma)
        self.sp_model = None
        if spm_model_file:
            self.spm_mode = True
            self.model_file = os.fspath(spm_model_file)
            self.sp_model = load_spm_model(self.model_file)
            self.vocab = {
                self.sp_model.IdToPiece(i): i for i in range(self.sp_model.GetPieceSize())
            }
            logger.info(
                "Loaded SentencePiece model %s (%d pieces)", self.model_file, len(self.vocab)
            )
        elif vocab_file:
            self.spm_mode = False
            self.model_file = os.fspath(vocab_file)
            self.vocab = dict(load_vocab(self.model_file))
            _check_wordpiece_vocab(self.model_file, self.vocab)
            self._basic = BasicTokenizer(do_lower_case=self.do_lower_case)
            self._wordpiece = WordpieceTokenizer(self.vocab)
        else:
            raise UserError(
                "FullTokenizer needs spm_model_file (SentencePiece mode) or "
                "vocab_file (WordPiece mode); neither was given"
            )
        self.inv_vocab = {i: p for p, i in self.vocab.items()}

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def tokenize(self, text: str) -> list[str]:
        """Splits `text` into pieces (list[str]); see the class docstring for preprocessing."""
        if self.spm_mode:
            return encode_pieces(self.sp_model, text, digit_comma=self.digit_comma)
        out = []
        for token in self._basic.tokenize(text):
            out.extend(self._wordpiece.tokenize(token))
        return out

    def convert_tokens_to_ids(self, tokens: Iterable[str]) -> list[int]:
        """Maps pieces to ids. SentencePiece: unknown pieces -> unk id. WordPiece: KeyError."""
        if self.spm_mode:
            return [self.sp_model.PieceToId(t) for t in tokens]
        ids = []
        for t in tokens:
            try:
                ids.append(self.vocab[t])
            except KeyError:
                raise KeyError(f"token {t!r} is not in vocabulary {self.model_file!r}") from None
        return ids

    def convert_ids_to_tokens(self, ids: Iterable[int]) -> list[str]:
        """Maps ids to pieces; raises IndexError for ids outside [0, vocab_size)."""
        out = []
        for i in ids:
            i = int(i)
            if i not in self.inv_vocab:
                raise IndexError(
                    f"id {i} is outside the vocabulary of {self.model_file!r} "
                    f"(size {self.vocab_size})"
                )
            out.append(self.inv_vocab[i])
        return out

    def special_ids(self) -> dict[str, int]:
        """Ids of the special pieces: keys "pad", "unk", "cls", "sep", "mask".

        Pieces: SentencePiece `<pad>`, `<unk>`, `[CLS]`, `[SEP]`, `[MASK]`; WordPiece `[PAD]`,
        `[UNK]`, `[CLS]`, `[SEP]`, `[MASK]`.

        Raises:
          UserError: naming the model/vocab file and the missing pieces.
        """
        wanted = SPM_SPECIAL_PIECES if self.spm_mode else WORDPIECE_SPECIAL_PIECES
        missing = [p for p in wanted.values() if p not in self.vocab]
        if missing:
            kind = "SentencePiece model" if self.spm_mode else "vocabulary"
            raise UserError(
                f"{kind} {self.model_file!r} lacks the special piece(s) "
                f"{', '.join(missing)}; expected all of {', '.join(wanted.values())}"
            )
        return {role: self.vocab[piece] for role, piece in wanted.items()}

    def preprocess(self, text: str) -> str:
        """What callers apply before `tokenize`: `preprocess_text(lower=do_lower_case)` in
        SentencePiece mode, identity in WordPiece mode (the basic tokenizer normalizes)."""
        if self.spm_mode:
            return preprocess_text(text, lower=self.do_lower_case)
        return text

    def encode(self, text: str) -> list[int]:
        """Raw text -> ids, including `preprocess`. Returns list[int]."""
        return self.convert_tokens_to_ids(self.tokenize(self.preprocess(text)))
