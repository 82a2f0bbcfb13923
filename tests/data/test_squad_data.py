"""SQuAD data: reading, piece/character alignment, windows, features, TFRecords."""

import json
import os
import re

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.data import squad_data, tokenization
from albert_tf.data.squad_data import (
    SquadDataError,
    SquadExample,
    align_pieces,
    convert_examples_to_features,
    doc_spans,
    max_context_span,
    read_squad_examples,
)

from record_fixtures import assert_records_sorted_by_feature_name
from repo_paths import REPO_ROOT
from tokenizer_fixtures import IDS_A, IDS_B, TEXT_A, TEXT_B

ROOT = REPO_ROOT
DEMO = os.path.join(ROOT, "data", "demo")
SPM = os.path.join(DEMO, "spm.model")


@pytest.fixture(scope="module")
def tokenizer():
    return tokenization.FullTokenizer(spm_model_file=SPM, do_lower_case=True)


def _write_json(tmp_path, document, name="squad.json"):
    path = tmp_path / name
    path.write_text(json.dumps(document, indent=1))
    return str(path)


def _doc(context, qas):
    return {
        "version": "1.1",
        "data": [{"title": "t", "paragraphs": [{"context": context, "qas": qas}]}],
    }


# --------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------
def test_reads_the_demo_files():
    train = read_squad_examples(os.path.join(DEMO, "squad", "train-v1.1.json"), True)
    dev = read_squad_examples(os.path.join(DEMO, "squad", "dev-v1.1.json"), False)
    assert len(train) == 300 and dev
    for e in train:
        assert e.paragraph_text[e.start_position :][: len(e.orig_answer_text)] == e.orig_answer_text
    assert all(e.start_position is None and e.orig_answer_text is None for e in dev)
    v2 = read_squad_examples(os.path.join(DEMO, "squad", "train-v2.0.json"), True)
    impossible = [e for e in v2 if e.is_impossible]
    assert impossible and all(
        e.start_position == -1 and e.orig_answer_text == "" for e in impossible
    )


def test_reading_errors_name_file_and_field(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.json"):
        read_squad_examples(str(tmp_path / "nope.json"), False)
    bad = tmp_path / "bad.json"
    bad.write_text('{"data": [\n  {"paragraphs": ]}')
    with pytest.raises(SquadDataError, match=r"bad.json: invalid JSON at line 2 column"):
        read_squad_examples(str(bad), False)
    path = _write_json(tmp_path, _doc("ctx", [{"id": "q1", "answers": []}]))
    with pytest.raises(
        SquadDataError,
        match=r"data\[0\].paragraphs\[0\].qas\[0\] has no "
        r"'question' field",
    ):
        read_squad_examples(path, False)
    two = [{"id": "q1", "question": "?", "answers": [{"text": "c", "answer_start": 0}] * 2}]
    path = _write_json(tmp_path, _doc("ctx", two))
    read_squad_examples(path, False)  # prediction ignores answers
    with pytest.raises(SquadDataError, match="q1.*2 answers"):
        read_squad_examples(path, True)
    outside = [{"id": "q1", "question": "?", "answers": [{"text": "tx", "answer_start": 2}]}]
    with pytest.raises(SquadDataError, match=r"answers\[0\]: answer_start=2 .* does not lie"):
        read_squad_examples(_write_json(tmp_path, _doc("ctx", outside)), True)
    typed = [{"id": "q1", "question": "?", "answers": [{"text": "c", "answer_start": "0"}]}]
    with pytest.raises(SquadDataError, match=r"answer_start is str, expected int"):
        read_squad_examples(_write_json(tmp_path, _doc("ctx", typed)), True)


# --------------------------------------------------------------------------------------
# Alignment
# --------------------------------------------------------------------------------------
def _full_lcs(a, b):
    """Plain O(n m) LCS length (reference for the banded DP)."""
    f = np.zeros((len(a) + 1, len(b) + 1), dtype=np.int64)
    for i in range(len(a)):
        for j in range(len(b)):
            f[i + 1, j + 1] = f[i, j] + 1 if a[i] == b[j] else max(f[i, j + 1], f[i + 1, j])
    return int(f[-1, -1])


@pytest.mark.parametrize(
    "raw,cat", [("the  café, 1912", " the cafe, 1912"), ("abcdef", "abXdef"), ("Rose.", " rose.")]
)
def test_banded_lcs_equals_full_lcs_when_the_band_is_wide(raw, cat):
    chars = [tokenization.preprocess_text(c, lower=True, remove_space=False) for c in raw]
    score, back = squad_data._banded_lcs(chars, cat, abs(len(raw) - len(cat)) + 5)
    assert score == _full_lcs(chars, list(cat))
    assert (len(raw) - 1, len(cat) - 1) in back


def test_banded_lcs_ignores_cells_outside_the_band():
    # The only matches lie 3 columns right of the diagonal: a band of 2 cannot see them.
    raw, cat = list("abc"), "xxxabc"
    assert squad_data._banded_lcs(raw, cat, 2)[0] == 0
    assert squad_data._banded_lcs(raw, cat, 4)[0] == 3


def test_convert_index_rules():
    conv = squad_data._convert_index
    index = [None, 5, None, None, 9, None]
    assert conv(index, 1) == 5  # filled: unchanged
    assert conv(index, 2, is_start=True) == 6 and conv(index, 2, is_start=False) == 8
    assert conv(index, 0, is_start=True) == 0 and conv(index, 0, is_start=False) == 4
    assert conv(index, 5, 12, is_start=True) == 10 and conv(index, 5, 12, is_start=False) == 11
    assert conv(index, 5) == 9  # no target length: the front value
    assert conv([None, 0], 0, is_start=False) == 0  # rear value 0: returned as is
    tight = [3, None, 4]
    assert conv(tight, 1, is_start=True) == 4 and conv(tight, 1, is_start=False) == 3


def test_every_piece_maps_to_its_raw_characters(tokenizer):
    raw = "  Quentin bought  the CAFÉ for 74,250 pounds in 1912. "
    pieces = tokenization.encode_pieces(
        tokenizer.sp_model, tokenization.preprocess_text(raw, lower=True)
    )
    alignment = align_pieces(raw, pieces, do_lower_case=True)
    assert alignment is not None
    for piece, s, e in zip(pieces, alignment.tok_start_to_orig, alignment.tok_end_to_orig):
        text = piece.replace(tokenization.SPIECE_UNDERLINE, "")
        if text:
            got = tokenization.preprocess_text(raw[s : e + 1], lower=True).replace(" ", "")
            assert got == text, (piece, raw[s : e + 1])


def test_unalignable_paragraph_is_dropped(tokenizer, caplog, monkeypatch):
    assert align_pieces("abc", ["▁x", "y", "z", "w", "v"], True) is None
    assert align_pieces("", ["▁x"], True) is None
    monkeypatch.setattr(squad_data, "align_pieces", lambda *a: None)
    example = SquadExample("q1", "who?", "Rose lives here.")
    with caplog.at_level("INFO"):
        assert list(convert_examples_to_features([example], tokenizer, 32, 8, 8, False)) == []
    assert "q1" in caplog.text and "MISMATCH" in caplog.text


# --------------------------------------------------------------------------------------
# Windows and features
# --------------------------------------------------------------------------------------
def test_doc_spans_and_max_context():
    assert doc_spans(10, 4, 3) == [(0, 4), (3, 4), (6, 4)]
    assert doc_spans(3, 4, 3) == [(0, 3)]
    assert doc_spans(9, 4, 5) == [(0, 4), (4, 4), (8, 1)]  # stride capped by the length
    # The original's example: "bought" (position 7) has context (4 left, 0 right) in
    # span B = (3, 5) and (1, 3) in span C = (6, 5): C owns it.
    spans = [(0, 5), (3, 5), (6, 5)]
    assert max_context_span(spans, 7) == 2
    assert max_context_span(spans, 4) == 1
    assert max_context_span([(0, 5), (2, 5)], 3) == 0  # tie (1 vs 1): the first
    assert max_context_span([(0, 5), (2, 6)], 3) == 1  # the longer window breaks it
    assert max_context_span(spans, 20) is None


def test_feature_layout_and_training_positions(tokenizer):
    examples = read_squad_examples(os.path.join(DEMO, "squad", "train-v1.1.json"), True)[:40]
    seq, query_max = 48, 12
    features = list(convert_examples_to_features(examples, tokenizer, seq, 16, query_max, True))
    assert [f.unique_id for f in features] == list(range(1000000000, 1000000000 + len(features)))
    answered = 0
    for f in features:
        assert len(f.input_ids) == len(f.input_mask) == len(f.segment_ids) == len(f.p_mask) == seq
        assert f.example_index is None
        sep = f.tokens.index("[SEP]")
        assert f.tokens[0] == "[CLS]" and f.tokens[-1] == "[SEP]" and sep <= query_max + 1
        real = f.paragraph_len
        assert f.input_mask == [1] * real + [0] * (seq - real)
        assert f.segment_ids == [0] * (sep + 1) + [1] * (real - sep - 1) + [0] * (seq - real)
        assert f.p_mask == [0] + [1] * sep + [0] * (real - sep - 2) + [1] * (seq - real + 1)
        assert sorted(f.token_is_max_context) == list(range(sep + 1, real - 1))
        assert len(f.tok_start_to_orig_index) == real - sep - 2
        if f.is_impossible:
            assert f.start_position == f.end_position == 0
            continue
        answered += 1
        assert sep < f.start_position <= f.end_position < real - 1
    assert answered >= len(examples)  # every answer lies in at least one window


def test_answers_round_trip_to_raw_text(tokenizer):
    # Positions -> raw characters through the window's maps gives the gold text back.
    for name in ("train-v1.1.json", "train-v2.0.json"):
        for e in read_squad_examples(os.path.join(DEMO, "squad", name), True):
            feats = list(convert_examples_to_features([e], tokenizer, 64, 24, 16, True))
            hits = []
            for f in feats:
                if f.is_impossible:
                    continue
                offset = f.tokens.index("[SEP]") + 1
                s = f.tok_start_to_orig_index[f.start_position - offset]
                t = f.tok_end_to_orig_index[f.end_position - offset]
                hits.append(e.paragraph_text[s : t + 1].strip())
            if e.is_impossible:
                assert not hits and all(f.start_position == 0 for f in feats)
            else:
                assert hits and all(h == e.orig_answer_text for h in hits), (e.qas_id, hits)


def test_prediction_features_keep_example_index_and_cover_every_token(tokenizer):
    examples = read_squad_examples(os.path.join(DEMO, "squad", "dev-v1.1.json"), False)[:10]
    feats = list(convert_examples_to_features(examples, tokenizer, 40, 8, 10, False))
    for i in range(len(examples)):
        mine = [f for f in feats if f.example_index == i]
        assert [f.doc_span_index for f in mine] == list(range(len(mine)))
        owned = sum(sum(f.token_is_max_context.values()) for f in mine)
        pieces = tokenization.encode_pieces(
            tokenizer.sp_model, tokenization.preprocess_text(examples[i].paragraph_text, lower=True)
        )
        assert owned == len(pieces)  # each paragraph piece has exactly one owner
        assert all(f.start_position is None for f in mine)


def test_window_without_the_answer_is_kept_as_impossible(tokenizer):
    context = " ".join(["filler"] * 30) + " Rose lives here."
    example = SquadExample("q1", "Who lives here?", context, "Rose", context.index("Rose"))
    feats = list(convert_examples_to_features([example], tokenizer, 24, 8, 8, True))
    assert len(feats) > 2
    assert feats[0].is_impossible and feats[0].start_position == feats[0].end_position == 0
    assert not feats[-1].is_impossible
    assert feats[-1].tokens[feats[-1].start_position].replace("▁", "") == "rose"


def test_bad_settings_are_rejected(tokenizer):
    with pytest.raises(ValueError, match="must exceed max_query_length"):
        list(convert_examples_to_features([], tokenizer, 10, 4, 7, False))
    wordpiece = tokenization.FullTokenizer.__new__(tokenization.FullTokenizer)
    wordpiece.sp_model = None
    with pytest.raises(ValueError, match="SentencePiece"):
        list(convert_examples_to_features([], wordpiece, 64, 4, 8, False))


# --------------------------------------------------------------------------------------
# TFRecords
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("is_training", [True, False])
def test_tfrecord_round_trip(tokenizer, tmp_path, is_training):
    name = "train-v1.1.json" if is_training else "dev-v1.1.json"
    examples = read_squad_examples(os.path.join(DEMO, "squad", name), is_training)[:12]
    out = str(tmp_path / "features.tf_record")
    feats = squad_data.write_features(
        convert_examples_to_features(examples, tokenizer, 48, 16, 12, is_training), out, is_training
    )
    assert os.listdir(tmp_path) == ["features.tf_record"]  # no temporary left behind
    assert_records_sorted_by_feature_name(out)
    batches = list(squad_data.squad_dataset(out, 48, 5, is_training=False, labelled=is_training))
    assert all(len(b["unique_ids"]) == 5 for b in batches)  # the last one padded
    got = {k: np.concatenate([b[k].numpy() for b in batches]) for k in batches[0]}
    padding = got["unique_ids"] == 0
    assert padding.sum() == -len(feats) % 5 and not got["input_mask"][padding].any()
    got = {k: v[~padding] for k, v in got.items()}
    assert all(v.dtype == np.int32 for v in got.values())
    np.testing.assert_array_equal(got["unique_ids"], [f.unique_id for f in feats])
    for key in ("input_ids", "input_mask", "segment_ids", "p_mask"):
        np.testing.assert_array_equal(got[key], [getattr(f, key) for f in feats])
    if is_training:
        np.testing.assert_array_equal(got["start_positions"], [f.start_position for f in feats])
        np.testing.assert_array_equal(got["is_impossible"], [f.is_impossible for f in feats])
    else:
        assert "start_positions" not in got
        spec = squad_data.feature_spec(48, True)
        with pytest.raises(tf.errors.InvalidArgumentError):
            next(
                iter(
                    tf.data.TFRecordDataset(out).map(lambda r: tf.io.parse_single_example(r, spec))
                )
            )


def test_default_features_equal_the_originals_python3_ids(tmp_path, tokenizer):
    """Digit-comma pieces: the original's ids under Python 3 with data/demo/spm.model, which
    keep the "▁" (13) that re-encoding "0", "5", "6" adds (e.g. "50", "▁", "0", ",")."""
    context = TEXT_A
    path = _write_json(
        tmp_path,
        _doc(
            context,
            [
                {
                    "id": "q1",
                    "question": TEXT_B,
                    "answers": [{"text": "3,500", "answer_start": 20}],
                }
            ],
        ),
    )
    [feature] = convert_examples_to_features(
        read_squad_examples(path, False), tokenizer, 64, 128, 32, is_training=False
    )
    question = IDS_B
    paragraph = IDS_A
    want = [2, *question, 3, *paragraph, 3]
    assert feature.input_ids == want + [0] * (64 - len(want))


def test_answer_differing_from_the_context_is_kept_and_counted(tmp_path, tokenizer, caplog):
    """The original keeps such an answer: the target is the span of the text's length at
    answer_start. One warning gives the count and the first id."""
    context = "The cat sat on the mat."
    qas = [
        {"id": "ok", "question": "Who sat?", "answers": [{"text": "cat", "answer_start": 4}]},
        {"id": "bad1", "question": "Who sat?", "answers": [{"text": "dog", "answer_start": 4}]},
        {"id": "bad2", "question": "Where?", "answers": [{"text": "Mat", "answer_start": 19}]},
    ]
    path = _write_json(tmp_path, _doc(context, qas))
    with caplog.at_level("WARNING", logger="albert_tf.data.squad_data"):
        examples = read_squad_examples(path, True)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == [
        f"{path}: 2 training answer(s) differ from the context at answer_start "
        "(first: id bad1); kept as the original does: the answer is the context "
        "span from answer_start with the text's length"
    ]
    assert [e.start_position for e in examples] == [4, 4, 19]
    ok, bad, _ = convert_examples_to_features(examples, tokenizer, 64, 128, 16, True)
    assert (bad.start_position, bad.end_position) == (ok.start_position, ok.end_position)
    caplog.clear()
    read_squad_examples(_write_json(tmp_path, _doc(context, qas[:1])), True)
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


def test_unreadable_files_are_named(tmp_path):
    """A byte that is not UTF-8 and a directory: one SquadDataError naming the file."""
    path = tmp_path / "latin1.json"
    path.write_bytes(b'{"data": [\n  {"x": "caf\xe9"}]}')
    with pytest.raises(
        SquadDataError,
        match=rf"^{re.escape(str(path))}: not UTF-8 \(byte 0xe9 at offset 23, line 2\); "
        "expected a UTF-8 encoded SQuAD JSON file$",
    ):
        read_squad_examples(str(path), False)
    with pytest.raises(
        SquadDataError, match=rf"^{re.escape(str(tmp_path))}: a directory, expected a SQuAD JSON"
    ):
        read_squad_examples(str(tmp_path), True)


@pytest.mark.parametrize("value", ["false", "yes", 1, None])
def test_is_impossible_must_be_a_json_boolean(tmp_path, value):
    """bool("false") is true: only true and false are read, in either mode."""
    qa = {"id": "q7", "question": "?", "answers": [], "is_impossible": value}
    path = _write_json(tmp_path, _doc("ctx", [qa]))
    message = (
        rf"data\[0\].paragraphs\[0\].qas\[0\] \(id q7\): is_impossible is "
        rf"{type(value).__name__}, expected bool \(true or false\)"
    )
    for is_training in (True, False):
        with pytest.raises(SquadDataError, match=message):
            read_squad_examples(path, is_training)
    with pytest.raises(SquadDataError, match=message):
        squad_data.v2_question(path)


def test_questions_to_predict_need_distinct_ids(tmp_path):
    """predictions.json is keyed by id: a repeated one would silently lose a question.
    Training ignores ids."""
    answer = [{"text": "c", "answer_start": 0}]
    qas = [{"id": i, "question": "?", "answers": answer} for i in ("a", "b", "a")]
    path = _write_json(tmp_path, _doc("ctx", qas))
    with pytest.raises(
        SquadDataError,
        match=r"data\[0\].paragraphs\[0\].qas\[2\] repeats the id a of "
        r"data\[0\].paragraphs\[0\].qas\[0\]; expected a distinct id per question",
    ):
        read_squad_examples(path, False)
    assert len(read_squad_examples(path, True)) == 3
    qas[2]["id"] = 1  # ids are compared as the strings predictions.json holds
    qas[1]["id"] = "1"
    with pytest.raises(SquadDataError, match="qas\\[2\\] repeats the id 1 of"):
        read_squad_examples(_write_json(tmp_path, _doc("ctx", qas)), False)


def test_v2_question(tmp_path):
    """The first question a v1.1 run cannot score: is_impossible true, or no answers in a
    file that has answers (a file without any is a v1.1 test set, only predicted)."""
    assert squad_data.v2_question(os.path.join(DEMO, "squad", "dev-v1.1.json")) is None
    assert squad_data.v2_question(os.path.join(DEMO, "squad", "train-v1.1.json")) is None
    first = squad_data.v2_question(os.path.join(DEMO, "squad", "dev-v2.0.json"))
    assert first.endswith(": is_impossible true") or first.endswith(": no answers")
    answered = {"question": "?", "answers": [{"text": "c", "answer_start": 0}]}
    unanswered = {"question": "?", "answers": []}
    cases = [
        ([dict(answered, id="a"), dict(answered, id="b", is_impossible=False)], None),
        ([dict(unanswered, id="a"), dict(unanswered, id="b")], None),
        ([dict(answered, id="a"), dict(unanswered, id="b")], "id b: no answers"),
        (
            [dict(answered, id="a"), dict(answered, id="b", is_impossible=True)],
            "id b: is_impossible true",
        ),
        ([dict(unanswered, id="a", is_impossible=True)], "id a: is_impossible true"),
    ]
    for qas, want in cases:
        assert squad_data.v2_question(_write_json(tmp_path, _doc("ctx", qas))) == want
    with pytest.raises(FileNotFoundError, match="nope.json"):
        squad_data.v2_question(str(tmp_path / "nope.json"))
