"""Tests of the pretraining tf.data pipeline: shapes/dtypes, drop_remainder, sharding,
determinism + iterator checkpointing, and dynamic-vs-static masking statistics."""

import random

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.data import example_serialization as es
from albert_tf.data import input_pipeline as ip
from albert_tf.data import pretraining_instances as pi
from albert_tf.errors import UserError

S, P, V, MASK = 64, 10, 3000, 4


def _synthetic_builder(cfg, seed):
    r = random.Random(seed)
    docs, t = [], 0
    for _ in range(150):
        doc = []
        for _ in range(r.randint(1, 8)):
            n = r.randint(2, 30)
            doc.append([10 + (t + k) % (V - 10) for k in range(n)])
            t += n
        docs.append(doc)
    pieces = ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"] + [
        ("\u2581w%d" % i) if (i * 7919) % 10 < 6 else "xy" for i in range(5, V)
    ]
    return (
        pi.Corpus.from_documents(docs),
        pi.Vocab.from_pieces(pieces, spm_mode=True),
        random.Random(seed),
        np.random.default_rng(seed),
    )


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Two static-masked files and one unmasked file with the same instances (same seeds)."""
    d = tmp_path_factory.mktemp("pipe")
    out = {}
    for name, seed in (("s0", 1), ("s1", 2)):
        corpus, vocab, rng, nrng = _synthetic_builder(None, seed)
        cfg = pi.MaskingConfig(max_seq_length=S, max_predictions_per_seq=P)
        insts = pi.InstanceBuilder(cfg, vocab, rng, nrng).create_instances(corpus, 2)
        for kind, masked in ((name, True), ("u" + name[1], False)):
            path = str(d / f"{kind}.tfrecord")
            with tf.io.TFRecordWriter(path) as w:
                for inst in insts:
                    if not masked:  # the unmasked twin: same instance, original tokens restored
                        ids = inst.input_ids.copy()
                        ids[inst.masked_lm_positions] = inst.masked_lm_ids
                        inst = pi.Instance(
                            ids,
                            inst.segment_ids,
                            inst.token_boundary,
                            inst.masked_lm_positions,
                            inst.masked_lm_ids,
                            inst.next_sentence_label,
                        )
                    w.write(es.serialize_example(inst, S, P, with_masks=masked))
            out[kind] = (path, len(insts))
    return out


def _collect(ds, key="input_ids"):
    return np.concatenate([b[key].numpy() for b in ds])


def test_shapes_dtypes_and_drop_remainder(files):
    path, n = files["s0"]
    ds = ip.pretraining_dataset(path, 7, S, P, is_training=False, repeat=False)
    batches = list(ds)
    assert len(batches) == n // 7
    b = batches[0]
    for k in ("input_ids", "input_mask", "segment_ids"):
        assert b[k].shape == (7, S) and b[k].dtype == tf.int32
    for k in ("masked_lm_positions", "masked_lm_ids"):
        assert b[k].shape == (7, P) and b[k].dtype == tf.int32
    assert b["masked_lm_weights"].dtype == tf.float32 and b["masked_lm_weights"].shape == (7, P)
    assert b["next_sentence_labels"].shape == (7,) and b["next_sentence_labels"].dtype == tf.int32
    assert ds.element_spec["input_ids"].shape == (7, S)


def test_sharding_reads_disjoint_parts(files):
    paths = [files["s0"][0], files["s1"][0]]

    def read(i, pattern):
        ctx = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=i)
        return _collect(
            ip.pretraining_dataset(pattern, 1, S, P, False, input_context=ctx, repeat=False)
        )

    for pattern in (paths, paths[:1]):  # file-level and (one file) record-level sharding
        a, b = read(0, pattern), read(1, pattern)
        full = _collect(ip.pretraining_dataset(pattern, 1, S, P, False, repeat=False))
        ka, kb = {r.tobytes() for r in a}, {r.tobytes() for r in b}
        assert not ka & kb and len(a) + len(b) == len(full)


def test_seeded_training_is_deterministic_and_checkpointable(files, tmp_path):
    pat = [files["s0"][0], files["s1"][0]]
    mk = lambda: ip.pretraining_dataset(
        pat, 4, S, P, True, seed=5, dynamic_masking=True, masking_options=ip.MaskingOptions(V, MASK)
    )
    first = [b["input_ids"].numpy() for b in mk().take(6)]
    again = [b["input_ids"].numpy() for b in mk().take(6)]
    np.testing.assert_array_equal(np.stack(first), np.stack(again))
    it = iter(mk())
    for _ in range(3):
        next(it)
    ckpt = tf.train.Checkpoint(iterator=it)
    prefix = ckpt.save(str(tmp_path / "it"))
    expected = [next(it)["input_ids"].numpy() for _ in range(3)]
    it2 = iter(mk())
    tf.train.Checkpoint(iterator=it2).restore(prefix)
    got = [next(it2)["input_ids"].numpy() for _ in range(3)]
    np.testing.assert_array_equal(np.stack(expected), np.stack(got))


def _mask_stats(ds, n_batches):
    """Masked fraction, 80/10/10 split and the histogram of masked run lengths."""
    tot = masked = is_mask = kept = 0
    runs = np.zeros(8)
    for b in ds.take(n_batches):
        w = b["masked_lm_weights"].numpy()
        pos = b["masked_lm_positions"].numpy()
        lab = b["masked_lm_ids"].numpy()
        ids = b["input_ids"].numpy()
        tot += b["input_mask"].numpy().sum()
        for r in range(w.shape[0]):
            m = int(w[r].sum())
            p = pos[r, :m]
            out = ids[r, p]
            masked += m
            is_mask += int((out == MASK).sum())
            kept += int((out == lab[r, :m]).sum())
            # run lengths of consecutive masked positions (SEP breaks runs)
            run = 1
            for a, c in zip(p[:-1], p[1:]):
                if c == a + 1:
                    run += 1
                else:
                    runs[min(run, 7)] += 1
                    run = 1
            if m:
                runs[min(run, 7)] += 1
    return masked / tot, is_mask / masked, kept / masked, runs / runs.sum()


def test_dynamic_masking_matches_static_statistics(files):
    mo = ip.MaskingOptions(V, MASK)
    static = _mask_stats(ip.pretraining_dataset(files["s0"][0], 32, S, P, True, seed=1), 60)
    dyn_static_file = _mask_stats(
        ip.pretraining_dataset(
            files["s0"][0], 32, S, P, True, seed=1, dynamic_masking=True, masking_options=mo
        ),
        60,
    )
    dyn_unmasked = _mask_stats(
        ip.pretraining_dataset(
            files["u0"][0], 32, S, P, True, seed=1, dynamic_masking=True, masking_options=mo
        ),
        60,
    )
    for dyn in (dyn_static_file, dyn_unmasked):
        assert abs(dyn[0] - static[0]) < 0.01  # masked fraction of tokens
        assert abs(dyn[1] - 0.8) < 0.03 and abs(dyn[2] - 0.1) < 0.03
        np.testing.assert_allclose(dyn[3][1:5], static[3][1:5], atol=0.04)  # run-length histogram


def test_dynamic_masking_restores_original_tokens(files):
    """Labels drawn from a static file (masks undone) are the tokens of the unmasked twin."""
    mo = ip.MaskingOptions(V, MASK)
    a = ip.pretraining_dataset(
        files["s0"][0],
        1,
        S,
        P,
        False,
        repeat=False,
        dynamic_masking=True,
        masking_options=mo,
        seed=3,
    )
    spec = {"input_ids": tf.io.FixedLenFeature([S], tf.int64)}
    u = tf.data.TFRecordDataset(files["u0"][0]).map(
        lambda r: {"input_ids": tf.io.parse_example(r[None], spec)["input_ids"]}
    )
    for x, y in zip(a.take(200), u.take(200)):
        m = int(x["masked_lm_weights"].numpy().sum())
        pos = x["masked_lm_positions"].numpy()[0, :m]
        np.testing.assert_array_equal(
            x["masked_lm_ids"].numpy()[0, :m], y["input_ids"].numpy()[0, pos]
        )
        keep = np.ones(S, bool)
        keep[pos] = False
        np.testing.assert_array_equal(
            x["input_ids"].numpy()[0, keep], y["input_ids"].numpy()[0, keep]
        )


def test_dynamic_masking_requires_vocab():
    with pytest.raises(ValueError, match="vocab_size"):
        ip.pretraining_dataset("x", 1, S, P, True, dynamic_masking=True)


def test_missing_files_error(tmp_path):
    with pytest.raises(ValueError, match="matches no file"):
        ip.pretraining_dataset(str(tmp_path / "none-*.tfrecord"), 1, S, P, True)


def _write(path, examples):
    with tf.io.TFRecordWriter(str(path)) as w:
        for features in examples:
            w.write(
                tf.train.Example(
                    features=tf.train.Features(
                        feature={
                            name: tf.train.Feature(float_list=tf.train.FloatList(value=v))
                            if isinstance(v[0], float)
                            else tf.train.Feature(int64_list=tf.train.Int64List(value=v))
                            for name, v in features.items()
                        }
                    )
                ).SerializeToString()
            )
    return str(path)


def test_check_tfrecords_accepts_what_the_writers_write(files, tmp_path):
    """The spec tables match the records our writers produce (and so the readers' specs)."""
    from albert_tf.data import classifier_data, race_data, squad_data, tokenization

    from classifier_fixtures import DEMO_SPM

    static, unmasked = files["s0"][0], files["u0"][0]
    assert ip.check_tfrecords(static, ip.pretraining_feature_spec(S, P), "--input_file") == [static]
    for path in (static, unmasked):  # dynamic masking reads both
        ip.check_tfrecords(path, ip.pretraining_feature_spec(S, P, dynamic_masking=True), "f")
    with pytest.raises(
        UserError,
        match=rf"^--input_file {unmasked}: the first record has no "
        r"feature 'masked_lm_positions' \(expected 10 int64 values; it has "
        r"input_ids, input_mask, next_sentence_labels, segment_ids, "
        r"token_boundary\)$",
    ):
        ip.check_tfrecords(unmasked, ip.pretraining_feature_spec(S, P), "--input_file")

    tokenizer = tokenization.FullTokenizer(spm_model_file=DEMO_SPM)
    glue = str(tmp_path / "glue.tf_record")
    classifier_data.file_based_convert_examples_to_features(
        [classifier_data.InputExample("g", "a b", "c d", "1")], ["0", "1"], 16, tokenizer, glue
    )
    ip.check_tfrecords(glue, classifier_data.feature_spec(16), "--train_file")
    race = str(tmp_path / "race.tf_record")
    race_data.write_features(
        [race_data.RaceExample("r", "text", ["a", "b", "c", "d"], 1)], tokenizer, 16, 4, race
    )
    ip.check_tfrecords(race, classifier_data.feature_spec(race_data.record_length(16)), "race")
    squad = str(tmp_path / "squad.tf_record")
    window = dict(input_ids=[2] * 16, input_mask=[1] * 16, segment_ids=[0] * 16, p_mask=[0] * 16)
    squad_data.write_features(
        [
            squad_data.SquadFeature(
                1000000000,
                None,
                0,
                [],
                [],
                {},
                [],
                paragraph_len=1,
                start_position=0,
                end_position=0,
                **window,
            )
        ],
        squad,
        is_training=True,
    )
    ip.check_tfrecords(squad, squad_data.feature_spec(16, is_training=True), "--train_file")
    with pytest.raises(
        UserError,
        match=r"feature 'input_ids' of the first record has 16 int64 "
        r"values, expected 64 int64 values$",
    ):
        ip.check_tfrecords(squad, classifier_data.feature_spec(race_data.record_length(16)), "x")


def test_check_tfrecords_names_file_and_feature(tmp_path):
    spec = {
        "input_ids": tf.io.FixedLenFeature([4], tf.int64),
        "label_ids": tf.io.FixedLenFeature([], tf.float32),
        "optional": tf.io.FixedLenFeature([2], tf.int64, default_value=[0, 0]),
    }
    good = _write(tmp_path / "good.tfrecord", [{"input_ids": [1, 2, 3, 4], "label_ids": [0.5]}])
    assert ip.check_tfrecords(good, spec, "--f") == [good]
    cases = {
        "long": (
            {"input_ids": [1] * 8, "label_ids": [0.5]},
            "feature 'input_ids' of the first record has 8 int64 values, expected 4 int64 values",
        ),
        "int_label": (
            {"input_ids": [1] * 4, "label_ids": [1]},
            "feature 'label_ids' of the first record has 1 int64 value, expected 1 float32 value",
        ),
        "bad_optional": (
            {"input_ids": [1] * 4, "label_ids": [0.5], "optional": [1]},
            "feature 'optional' of the first record has 1 int64 value, expected 2",
        ),
        "other_names": (
            {"ids": [1] * 4},
            r"the first record has no feature 'input_ids' \(expected 4 int64 values; "
            r"it has ids\)",
        ),
    }
    for name, (features, message) in cases.items():
        path = _write(tmp_path / f"{name}.tfrecord", [features])
        with pytest.raises(UserError, match=f"^--f {path}: {message}"):
            ip.check_tfrecords(path, spec, "--f")
    garbage = tmp_path / "garbage.tfrecord"
    garbage.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(
        UserError,
        match=rf"^--f {garbage}: not a readable TFRecord file "
        r"\(corrupted record at 0 \(Is this even a TFRecord file\?\)\)$",
    ):
        ip.check_tfrecords(str(garbage), spec, "--f")
    not_example = tmp_path / "strings.tfrecord"
    with tf.io.TFRecordWriter(str(not_example)) as w:
        w.write(b"\xff\xff\xff")
    with pytest.raises(UserError, match="strings.tfrecord: the first record is not a tf.train"):
        ip.check_tfrecords(str(not_example), spec, "--f")
    with pytest.raises(UserError, match=f"^--f {tmp_path}: not a readable TFRecord file"):
        ip.check_tfrecords(str(tmp_path), spec, "--f")


def test_check_tfrecords_refuses_empty_inputs(tmp_path, caplog):
    spec = {"input_ids": tf.io.FixedLenFeature([1], tf.int64)}
    empty = tmp_path / "empty-0.tfrecord"
    empty.write_bytes(b"")
    # The reader would repeat an empty file forever without a word.
    with pytest.raises(UserError, match=f"^--input_file {empty}: the file holds no record$"):
        ip.check_tfrecords(str(empty), spec, "--input_file")
    (tmp_path / "empty-1.tfrecord").write_bytes(b"")
    with pytest.raises(UserError, match="^--input_file: none of the 2 files holds a record"):
        ip.check_tfrecords(str(tmp_path / "empty-*"), spec, "--input_file")
    good = _write(tmp_path / "good.tfrecord", [{"input_ids": [7]}])
    with caplog.at_level("WARNING"):
        files = ip.check_tfrecords(f"{tmp_path}/empty-*,{good}", spec, "--input_file")
    assert len(files) == 3 and "--input_file: 2 of 3 files hold no record, e.g." in caplog.text
    with pytest.raises(UserError, match=r"^--input_file: input pattern '.*none-\*' matches no"):
        ip.check_tfrecords(f"{good},{tmp_path}/none-*", spec, "--input_file")
