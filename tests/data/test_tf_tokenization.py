"""In-graph tokenizer vs the Python FullTokenizer on the demo SentencePiece model."""

import io
import os
import random

import pytest
import sentencepiece as spm
import tensorflow as tf
import tensorflow_text as tf_text
from sentencepiece import sentencepiece_model_pb2

from albert_tf.data import tokenization as T
from albert_tf.data.tf_tokenization import InGraphTokenizer, pack_inputs

from repo_paths import REPO_ROOT

ROOT = REPO_ROOT
DEMO_SPM = os.path.join(ROOT, "data", "demo", "spm.model")

FIXED = [
    "",
    "   ",
    "x1234, the 1990, cat",
    "Héllo   Wörld\t1,000,000",
    "In 1987, she sold 12,500 sheep,",
    "ΟΔΥΣΣΕΥΣ ΣΑΣ Σ. όδός",
    "a\u00a0b\u2028c \u3000 d",
    "Ça va? naïve café 😀 日本語 русский",
    "٣,٤, ²,",
    "İstanbul ﬁne ㎏",
    "x1234,5,6,",
    '(£12 – €30) "quoted" - dash.',
    "Tom\tand\nJane",
]
# Float32 Viterbi ties in the demo model that tensorflow-text's own SentencePiece (0.1.96) resolves
# differently from the Python package, e.g. "0000" as "000"+"0" instead of "0"+"000".
TIES = ["0000", "9888", "x0000, 0000,", "In 10000, 0000 sheep", "1,0000,", "0000 0000 0000"]


def _varied(n, seed=0):
    rng = random.Random(seed)
    words = [
        "tom",
        "Anna",
        "walked",
        "station",
        "café",
        "naïve",
        "Ωμέγα",
        "ΣΟΦΟΣ",
        "日本",
        "😀",
        "1,000,000",
        "x1234,",
        "12,",
        "1990,",
        "(a)",
        "£5",
        "€7",
        "–",
        "\u00a0",
        "\t",
        "  ",
        "İ",
        "ﬁ",
        "²",
        "٣,",
        "straße",
        "Ǆ",
        "e\u0301",
        "the",
        ",",
        ".",
    ]
    return [
        "".join(rng.choice(words) + rng.choice([" ", "", "  "]) for _ in range(rng.randint(0, 12)))
        for _ in range(n)
    ]


@pytest.mark.parametrize("digit_comma", T.DIGIT_COMMA_MODES)
def test_in_graph_matches_python_lowercase(digit_comma):
    strings = FIXED + TIES + _varied(2500)
    py = T.FullTokenizer(spm_model_file=DEMO_SPM, do_lower_case=True, digit_comma=digit_comma)
    ig = InGraphTokenizer(DEMO_SPM, do_lower_case=True, digit_comma=digit_comma)
    assert ig.exact_ties
    pre = [s.decode("utf-8") for s in ig.preprocess(tf.constant(strings)).numpy()]
    got = ig(tf.constant(strings)).to_list()
    for s, p, g in zip(strings, pre, got):
        assert p == T.preprocess_text(s, lower=True), s
        assert g == py.encode(s), s


def _digit_strings(n, seed):
    rng = random.Random(seed)
    return [
        "".join(rng.choice("0123456789 ,") for _ in range(rng.randint(1, 40))) for _ in range(n)
    ]


def _piece_soup(sp, n, seed):
    """Strings glued from random vocabulary pieces: many competing segmentations."""
    rng = random.Random(seed)
    vocab = [sp.IdToPiece(i).replace(T.SPIECE_UNDERLINE, " ") for i in range(sp.GetPieceSize())]
    return ["".join(rng.choice(vocab) for _ in range(rng.randint(1, 25))) for _ in range(n)]


def _assert_same_ids(model_file, strings):
    py = T.FullTokenizer(spm_model_file=model_file, do_lower_case=True)
    ig = InGraphTokenizer(model_file, do_lower_case=True)
    assert ig.exact_ties
    got = ig(tf.constant(strings)).to_list()
    bad = [s for s, g in zip(strings, got) if g != py.encode(s)]
    assert not bad, bad[:5]


def test_viterbi_ties_demo_model():
    # The bundled op really does break these ties the other way (what the fix is for) ...
    py = T.FullTokenizer(spm_model_file=DEMO_SPM)
    legacy = tf_text.SentencepieceTokenizer(model=open(DEMO_SPM, "rb").read())
    assert legacy.tokenize(tf.constant(["0000"])).to_list()[0] != py.encode("0000")
    # ... and the in-graph tokenizer follows the Python package on all of them.
    ints = [str(i) for i in range(10000)]
    soup = _piece_soup(py.sp_model, 2000, 2)
    _assert_same_ids(DEMO_SPM, TIES + ints + _digit_strings(3000, 1) + soup)


def test_viterbi_ties_trained_model(tmp_path):
    """A second, freshly trained unigram model (own scores, unknown characters, multi-byte
    user-defined symbols)."""
    rng = random.Random(0)
    words = [
        "river",
        "stone",
        "naïve",
        "café",
        "Über",
        "straße",
        "ΣΟΦΟΣ",
        "λόγος",
        "日本語",
        "東京",
        "русский",
        "1,000",
        "2024",
        "000",
        "0000",
        "12,500",
        "x7",
        "–",
        "€",
        "(a)",
        "don't",
        "٣٤",
    ]
    lines = [
        " ".join(
            rng.choice(words) + ("" if rng.random() < 0.7 else str(rng.randint(0, 999)))
            for _ in range(rng.randint(3, 15))
        )
        for _ in range(4000)
    ]
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=buf,
        vocab_size=300,
        model_type="unigram",
        character_coverage=0.995,
        user_defined_symbols=["–", "€"],
        control_symbols=["[CLS]", "[SEP]", "[MASK]"],
        pad_id=0,
        unk_id=1,
        bos_id=-1,
        eos_id=-1,
        num_threads=1,
        minloglevel=2,
    )
    path = tmp_path / "small.model"
    path.write_bytes(buf.getvalue())
    sp = spm.SentencePieceProcessor(model_file=str(path))
    strings = (
        [str(i) for i in range(10000)]
        + _digit_strings(2000, 3)
        + _piece_soup(sp, 2000, 4)
        + FIXED
        + _varied(1000, seed=5)
    )
    _assert_same_ids(str(path), strings)


def test_inexact_model_warns(tmp_path):
    # A piece containing a character that has no piece of its own ("☃") defeats the
    # unknown-character substitution; the tokenizer must say so and keep working.
    model = sentencepiece_model_pb2.ModelProto()
    model.ParseFromString(open(DEMO_SPM, "rb").read())
    model.pieces.add(piece="zq\u2603", score=-30.0)
    path = tmp_path / "orphan.model"
    path.write_bytes(model.SerializeToString())
    with pytest.warns(UserWarning, match="without their own piece"):
        ig = InGraphTokenizer(str(path))
    assert not ig.exact_ties
    py = T.FullTokenizer(spm_model_file=str(path))
    assert ig(tf.constant(["Tom walked home."])).to_list()[0] == py.encode("Tom walked home.")


def test_in_graph_cased_preprocess_matches():
    strings = FIXED + _varied(500, seed=1)
    ig = InGraphTokenizer(DEMO_SPM, do_lower_case=False)
    pre = [s.decode("utf-8") for s in ig.preprocess(tf.constant(strings)).numpy()]
    assert pre == [T.preprocess_text(s, lower=False) for s in strings]


@pytest.mark.parametrize(
    "digit_comma,expected",
    [
        ("intended", ["▁", "x", "12", "34", ",", "▁", "ok", "▁at", "▁7", ","]),
        ("python3", ["▁", "x", "12", "▁34", ",", "▁", "ok", "▁at", "▁7", ","]),
    ],
)
def test_digit_comma_in_graph(digit_comma, expected):
    ig = InGraphTokenizer(DEMO_SPM, digit_comma=digit_comma)
    pieces = ig.tokenize(tf.constant(["x1234, ok at 7,"])).to_list()[0]
    assert [p.decode() for p in pieces] == expected


def test_pack_inputs_truncation():
    a = tf.ragged.constant([[11, 12, 13, 14, 15], [11], [11, 12, 13]])
    b = tf.ragged.constant([[21, 22, 23], [21, 22], [21, 22, 23]])
    out = pack_inputs(a, b, 8, cls_id=2, sep_id=3)  # budget 5 for a + b
    assert out["input_ids"].numpy().tolist() == [
        [2, 11, 12, 13, 3, 21, 22, 3],  # 5+3: pop a, a, then tie pops b -> 3+2
        [2, 11, 3, 21, 22, 3, 0, 0],  # fits
        [2, 11, 12, 13, 3, 21, 22, 3],  # 3+3: tie pops b -> 3+2
    ]
    assert out["segment_ids"].numpy().tolist()[1] == [0, 0, 0, 1, 1, 1, 0, 0]
    assert out["input_mask"].numpy().tolist()[1] == [1, 1, 1, 1, 1, 1, 0, 0]
    single = pack_inputs(a, None, 4, cls_id=2, sep_id=3)
    assert single["input_ids"].numpy().tolist() == [[2, 11, 12, 3], [2, 11, 3, 0], [2, 11, 12, 3]]
    assert single["input_ids"].dtype == tf.int32


def _reference_truncate(la, lb, budget):
    while la + lb > budget:
        if la > lb:
            la -= 1
        else:
            lb -= 1
    return la, lb


def test_pack_inputs_matches_loop():
    rng = random.Random(3)
    rows = [(rng.randint(0, 12), rng.randint(0, 12)) for _ in range(200)]
    a = tf.ragged.constant([[7] * la for la, _ in rows], dtype=tf.int32, ragged_rank=1)
    b = tf.ragged.constant([[9] * lb for _, lb in rows], dtype=tf.int32, ragged_rank=1)
    ids = pack_inputs(a, b, 11, 2, 3)["input_ids"].numpy()
    for (la, lb), row in zip(rows, ids):
        assert ((row == 7).sum(), (row == 9).sum()) == _reference_truncate(la, lb, 8)


def test_saved_model_signature(tmp_path):
    ig = InGraphTokenizer(DEMO_SPM)

    class Export(tf.Module):
        def __init__(self):
            super().__init__()
            self.tok = ig

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def features(self, text):
            return ig.classifier_features(text, None, 16)

    path = str(tmp_path / "sm")
    m = Export()
    tf.saved_model.save(m, path, signatures={"serving_default": m.features})
    loaded = tf.saved_model.load(path)
    text = ["Tom walked to the station, at 12,500 pounds.", "", "0000 9888 日本"]
    got = loaded.signatures["serving_default"](text=tf.constant(text))["input_ids"].numpy()
    py = T.FullTokenizer(spm_model_file=DEMO_SPM)
    for s, row in zip(text, got):
        ids = [2] + py.encode(s)[:14] + [3]
        assert row.tolist() == ids + [0] * (16 - len(ids))


def test_bad_model_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.model"):
        InGraphTokenizer(str(tmp_path / "missing.model"))
