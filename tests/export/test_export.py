"""Exports (albert_tf/export/): each SavedModel loaded in a fresh process that imports only
what its export_info.json says, with the outputs of the Keras model; stripped checkpoints."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.data.classifier_data import InputExample, convert_examples_to_features, get_processor
from albert_tf.data.tokenization import FullTokenizer
from albert_tf.export.saved_model import ClassifierServing, export_classifier
from albert_tf.tasks.classifier import AlbertClassifier

from classifier_fixtures import DEMO_SPM, glue_config
from weights_fixtures import randomized

SEQ = 32
PAIRS = [
    ("The cat sat on the mat.", "A cat was sitting on a mat!"),
    ("Ünïcode   SPACES and CAPS", ""),
    ("a very long sentence " * 10, "with a second one " * 6),
]

_CHILD = r"""
import json, sys
import numpy as np
import tensorflow as tf
try:  # what export_info.json says: the raw-text signature needs tensorflow_text's ops
    tf.saved_model.load(sys.argv[1])
    without_text_ops = "loaded"
except Exception as err:
    without_text_ops = str(err)
import tensorflow_text  # registers the SentencePiece ops
loaded = tf.saved_model.load(sys.argv[1])
ids = np.load(sys.argv[2])
sig = loaded.signatures["serving_default"]
by_ids = sig(**{k: tf.constant(ids[k]) for k in ("input_ids", "input_mask", "segment_ids")})
pairs = json.loads(sys.argv[3])
by_text = loaded.signatures["serve_text"](text_a=tf.constant([a for a, _ in pairs]),
                                          text_b=tf.constant([b for _, b in pairs]))
np.savez(sys.argv[4], ids_prob=by_ids["probabilities"].numpy(),
         ids_pred=by_ids["predictions"].numpy(), threshold=by_ids["threshold"].numpy(),
         text_prob=by_text["probabilities"].numpy(), text_pred=by_text["predictions"].numpy(),
         signatures=np.array(sorted(loaded.signatures)), without_text_ops=without_text_ops)
"""


def _python_features(pairs, digit_comma="python3"):
    processor = get_processor("mrpc")
    tokenizer = FullTokenizer(spm_model_file=DEMO_SPM, do_lower_case=True, digit_comma=digit_comma)
    examples = [
        InputExample(
            str(i), processor.process_text(a), processor.process_text(b) if b else None, "0"
        )
        for i, (a, b) in enumerate(pairs)
    ]
    feats = convert_examples_to_features(examples, processor.get_labels(), SEQ, tokenizer)
    return {
        k: np.array([getattr(f, k) for f in feats], np.int32)
        for k in ("input_ids", "input_mask", "segment_ids")
    }


def _saved_ops(export_dir):
    """Op types in a SavedModel's graph and functions, and its XLA-compiled functions."""
    from tensorflow.core.protobuf import saved_model_pb2

    saved = saved_model_pb2.SavedModel()
    with open(os.path.join(export_dir, "saved_model.pb"), "rb") as f:
        saved.ParseFromString(f.read())
    graph = saved.meta_graphs[0].graph_def
    op_types = {n.op for n in graph.node}
    op_types |= {n.op for fn in graph.library.function for n in fn.node_def}
    xla = [fn.signature.name for fn in graph.library.function if fn.attr["_XlaMustCompile"].b]
    return op_types, xla


def test_export_round_trip_in_fresh_process(tmp_path):
    model = AlbertClassifier(glue_config(), 2)
    model.build()
    features = _python_features(PAIRS)
    want = model(features, training=False)
    export_dir = export_classifier(
        model,
        str(tmp_path / "export"),
        SEQ,
        spm_model_file=DEMO_SPM,
        text_pair=True,
        label_list=["0", "1"],
        task_name="mrpc",
        threshold=0.5,
    )
    assert (tmp_path / "export" / "assets.extra" / "labels.txt").read_text() == "0\n1\n"
    info = json.loads((tmp_path / "export" / "assets.extra" / "export_info.json").read_text())
    assert info["load_imports"] == ["tensorflow", "tensorflow_text"]
    # Portable serving graph: no oneDNN-only kernels, no XLA clusters.
    op_types, xla = _saved_ops(export_dir)
    assert "_MklLayerNorm" not in op_types and "MatMul" in op_types
    assert xla == []
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".tmp")]
    np.savez(tmp_path / "ids.npz", **features)
    result = tmp_path / "result.npz"
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            _CHILD,
            export_dir,
            str(tmp_path / "ids.npz"),
            json.dumps(PAIRS),
            str(result),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = np.load(result)
    assert "Op type not registered 'Sentencepiece" in str(got["without_text_ops"])
    assert list(got["signatures"]) == ["serve_text", "serving_default"]
    np.testing.assert_allclose(got["ids_prob"], want["probabilities"].numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got["ids_pred"], want["predictions"].numpy())
    np.testing.assert_allclose(
        got["text_prob"], want["probabilities"].numpy(), rtol=1e-5, atol=1e-6
    )
    np.testing.assert_array_equal(got["text_pred"], want["predictions"].numpy())
    np.testing.assert_allclose(got["threshold"], [0.5] * len(PAIRS))


def test_text_features_match_python_single_sentence():
    model = AlbertClassifier(glue_config(), 2)
    model.build()
    module = ClassifierServing(model, SEQ, DEMO_SPM, text_pair=False)
    sigs = module.signatures()
    assert [s.name for s in sigs["serve_text"].structured_input_signature[0]] == ["text_a"]
    texts = [a for a, _ in PAIRS]
    got = module.text_features(tf.constant(texts))
    want = _python_features([(t, "") for t in texts])
    for k in want:
        np.testing.assert_array_equal(got[k].numpy(), want[k], err_msg=k)


@pytest.mark.parametrize("digit_comma", ["python3", "intended"])
def test_serve_text_tokenizes_with_the_training_digit_comma_mode(digit_comma):
    model = AlbertClassifier(glue_config(), 2)
    model.build()
    module = ClassifierServing(model, SEQ, DEMO_SPM, text_pair=False, digit_comma=digit_comma)
    texts = ["In 1990, sales were 3,500, not 2,000, units.", "Prices rose 4,5,6, then fell."]
    got = module.text_features(tf.constant(texts))
    want = _python_features([(t, "") for t in texts], digit_comma)
    np.testing.assert_array_equal(got["input_ids"].numpy(), want["input_ids"])
    other = _python_features(
        [(t, "") for t in texts], "intended" if digit_comma == "python3" else "python3"
    )
    assert (other["input_ids"] != want["input_ids"]).any(axis=1).all()


# --- the pretrained encoder (export_to_tfhub.py) and stripped checkpoints ------------------
_ENCODER_CHILD = r"""
import json, sys
import numpy as np
import tensorflow as tf
import keras
path, ids_file, out = sys.argv[1:4]
ids = dict(np.load(ids_file))
feed = {k: tf.constant(ids[k]) for k in ("input_ids", "input_mask", "segment_ids")}
loaded = tf.saved_model.load(path)
tokens = loaded.signatures["tokens"](**feed)
sop = loaded.signatures["sop"](**feed)
mlm = loaded.signatures["mlm"](**feed, mlm_positions=tf.constant(ids["mlm_positions"]))
info = loaded.signatures["tokenization_info"]()
called = loaded(feed, training=False)
called_train = loaded(feed, training=True)  # the "train" variant: the export has no dropout
layer = keras.layers.TFSMLayer(path, call_endpoint="__call__")  # Keras 3 users
by_layer = layer(feed)
np.savez(out, sequence_output=tokens["sequence_output"].numpy(),
         pooled_output=tokens["pooled_output"].numpy(), sop=sop["sop_log_probs"].numpy(),
         mlm=mlm["mlm_logits"].numpy(), called=called["pooled_output"].numpy(),
         called_train=called_train["pooled_output"].numpy(),
         layer=by_layer["pooled_output"].numpy(),
         vocab=open(info["vocab_file"].numpy().decode(), "rb").read(),
         lower=info["do_lower_case"].numpy(), signatures=np.array(sorted(loaded.signatures)),
         trainable=len(loaded.trainable_variables), losses=len(loaded.regularization_losses),
         imported=np.array(sorted(m for m in ("albert_tf", "tensorflow_text") if m in sys.modules)))
"""

_PREPROCESS_CHILD = r"""
import json, sys
import numpy as np
import tensorflow as tf
path, pairs, out = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
try:
    tf.saved_model.load(path)
    without_text_ops = "loaded"
except Exception as err:
    without_text_ops = str(err)
import tensorflow_text
loaded = tf.saved_model.load(path)
pair = loaded.signatures["pair"](text_a=tf.constant([a for a, _ in pairs]),
                                 text_b=tf.constant([b for _, b in pairs]))
single = loaded.signatures["serving_default"](text_a=tf.constant([a for a, _ in pairs]))
np.savez(out, without_text_ops=without_text_ops, albert_tf="albert_tf" in sys.modules,
         **{f"pair_{k}": v.numpy() for k, v in pair.items()},
         **{f"single_{k}": v.numpy() for k, v in single.items()})
"""


def _child(tmp_path, script, *args):
    result = tmp_path / "child.npz"
    proc = subprocess.run(
        [sys.executable, "-c", script, *map(str, args), str(result)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return np.load(result)


# The dropout of the released configs: 0.1 in v1 (but xxlarge), 0 in v2.
RELEASE_DROPOUT = {"v1": 0.1, "v2": 0.0}


def _release_folder(
    folder, heads=("cls/predictions", "cls/seq_relationship"), extra=None, version="v1"
):
    """albert_config.json, 30k-clean.model and model.ckpt-best of a random tiny
    pretrainer (every variable random, the same for every `version`) with the dropout of
    the `version` releases; `extra`: more tensors in the checkpoint (optimizer state).
    Returns (folder, pretrainer)."""
    from albert_tf.model.modeling import AlbertPretrainer
    from albert_tf.weights import checkpoints

    os.makedirs(folder)
    dropout = RELEASE_DROPOUT[version]
    config = glue_config(hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    config.to_json_file(os.path.join(folder, "albert_config.json"))
    shutil.copyfile(DEMO_SPM, os.path.join(folder, "30k-clean.model"))
    model = randomized(AlbertPretrainer(config), 1)
    values = {
        n: v.numpy()
        for n, v in checkpoints.original_variable_map(model).items()
        if n.startswith("bert/") or n.startswith(tuple(h + "/" for h in heads))
    }
    values.update(extra or {})
    names = sorted(values)
    tf.raw_ops.SaveV2(
        prefix=os.path.join(folder, "model.ckpt-best"),
        tensor_names=names,
        shape_and_slices=[""] * len(names),
        tensors=[tf.constant(values[n]) for n in names],
    )
    return str(folder), model


def test_encoder_export_refuses_features_longer_than_the_positions(tmp_path):
    from albert_tf.errors import UserError
    from albert_tf.export.saved_model import export_encoder

    folder, model = _release_folder(tmp_path / "albert")
    positions = model.config.max_position_embeddings
    with pytest.raises(UserError, match=f"^--max_seq_length={positions + 1} exceeds"):
        export_encoder(folder, str(tmp_path / "hub"), max_seq_length=positions + 1)
    assert not (tmp_path / "hub").exists()


def test_encoder_export_reloads_in_fresh_processes(tmp_path):
    from albert_tf.export.saved_model import export_encoder
    from albert_tf.model.modeling import AlbertModel
    from albert_tf.weights import hub

    folder, model = _release_folder(tmp_path / "albert")
    paths = export_encoder(folder, str(tmp_path / "hub"), max_seq_length=SEQ)
    assert paths["signatures"] == ["mlm", "serving_default", "sop", "tokenization_info", "tokens"]
    info = json.loads((tmp_path / "hub" / "assets.extra" / "export_info.json").read_text())
    assert info["load_imports"] == ["tensorflow"] and info["preprocess"] == "preprocess"
    pre_info = json.loads(
        (tmp_path / "hub" / "preprocess" / "assets.extra" / "export_info.json").read_text()
    )
    assert pre_info["load_imports"] == ["tensorflow", "tensorflow_text"]
    op_types, xla = _saved_ops(paths["encoder"])
    assert not [op for op in op_types if "entencepiece" in op] and xla == []

    features = _python_features(PAIRS)
    positions = np.array([[1, 3], [2, 0], [5, 4]], np.int32)
    np.savez(tmp_path / "ids.npz", **features, mlm_positions=positions)
    got = _child(tmp_path, _ENCODER_CHILD, paths["encoder"], tmp_path / "ids.npz")
    assert list(got["imported"]) == []  # TensorFlow alone
    assert list(got["signatures"]) == paths["signatures"]
    want = model({**features, "masked_lm_positions": positions}, training=False)
    close = dict(rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got["sequence_output"], want["sequence_output"], **close)
    np.testing.assert_allclose(got["pooled_output"], want["pooled_output"], **close)
    for key in ("called", "called_train", "layer"):
        np.testing.assert_allclose(got[key], want["pooled_output"], **close)
    np.testing.assert_allclose(got["sop"], tf.nn.log_softmax(want["sop_logits"]), **close)
    np.testing.assert_allclose(got["mlm"], tf.reshape(want["mlm_logits"], [6, -1]), **close)
    assert bytes(got["vocab"]) == open(DEMO_SPM, "rb").read() and bool(got["lower"])
    assert int(got["trainable"]) == 32 and int(got["losses"]) == 0

    # --albert_hub_module_handle reads the export back by name.
    module = hub.open_module(paths["encoder"])
    assert module.kind == hub.ALBERT_TF and module.do_lower_case is True
    assert hub.module_config(module)[0] == model.config  # the release's, dropout 0.1
    encoder = AlbertModel(glue_config())
    assert len(hub.load_module(encoder, module).loaded) == 25
    np.testing.assert_array_equal(
        encoder(features)["pooled_output"], model.albert(features)["pooled_output"]
    )

    pre = _child(tmp_path, _PREPROCESS_CHILD, paths["preprocess"], json.dumps(PAIRS))
    assert "Op type not registered" in str(pre["without_text_ops"])
    assert not bool(pre["albert_tf"])
    single = _python_features([(a, "") for a, _ in PAIRS])
    for k in features:
        np.testing.assert_array_equal(pre[f"pair_{k}"], features[k], err_msg=k)
        np.testing.assert_array_equal(pre[f"single_{k}"], single[k], err_msg=k)


def test_encoder_signatures_follow_the_heads_the_checkpoint_held():
    from albert_tf.export.saved_model import EncoderServing
    from albert_tf.model.modeling import AlbertPretrainer

    model = AlbertPretrainer(glue_config())
    model.build()
    module = EncoderServing(model, {"masked_lm"}, DEMO_SPM, DEMO_SPM, True)
    assert sorted(module.signatures()) == [
        "mlm",
        "serving_default",
        "tokenization_info",
        "tokens",
    ]
    assert not [n for n in module.original_variables if not n.startswith(("bert/", "cls/pred"))]
    assert len(module.original_variables) == 30 and len(module.trainable_variables) == 30


def _assert_best_checkpoint_holds(out, model, keep=lambda name: True) -> dict:
    """model.ckpt-best in `out` holds global_step and exactly the variables of `model`
    whose original names `keep` passes, bit-exact; returns its values."""
    from albert_tf.weights import checkpoints

    values = checkpoints.read_checkpoint_values(str(out / "model.ckpt-best"))
    want = {n: v.numpy() for n, v in checkpoints.original_variable_map(model).items() if keep(n)}
    assert sorted(values) == sorted([*want, "global_step"])
    for name, value in want.items():
        np.testing.assert_array_equal(values[name], value, err_msg=name)
    return values


def test_export_checkpoint_cli_strips_optimizer_state(tmp_path, capsys):
    from albert_tf.export.command import main
    from albert_tf.weights import release

    slots = {"bert/pooler/dense/kernel/adam_m": np.ones((32, 32), np.float32)}
    folder, model = _release_folder(
        tmp_path / "trained",
        heads=("cls/predictions",),
        extra={**slots, "global_step": np.array(800, np.int64)},
    )
    out = tmp_path / "exported"
    out.mkdir()
    status = main(
        [
            "export",
            f"--albert_directory={folder}",
            f"--export_path={out}",
            "--export_format=checkpoint",
        ]
    )
    assert status == 0
    assert f"checkpoint: {out / 'model.ckpt-best'}" in capsys.readouterr().out
    # cls/seq_relationship: absent from the source, so left out.
    values = _assert_best_checkpoint_holds(
        out, model, lambda n: not n.startswith("cls/seq_relationship/")
    )
    assert int(values["global_step"]) == 0  # as the original's fresh graph
    # The folder is a release folder now.
    files = release.release_files(str(out))
    assert files.checkpoint == str(out / "model.ckpt-best") and files.spm_model_file


def test_export_cli_errors_are_one_line(tmp_path, capsys):
    from albert_tf.export.command import main

    assert main(["export", f"--albert_directory={tmp_path / 'none'}", "--export_path=x"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("export: error: --albert_directory: release folder")
    assert err.count("\n") == 1
    assert main(["export", "--export_path=x"]) == 1
    assert "--albert_directory" in capsys.readouterr().err
    assert main(["export", "--help"]) == 0
    assert "--export_format" in capsys.readouterr().out
    # The export replaces --export_path: never the folder it reads.
    (tmp_path / "release").mkdir()
    kept = tmp_path / "release" / "albert_config.json"
    kept.write_text("{}")
    for target in (tmp_path / "release", tmp_path):
        argv = ["export", f"--albert_directory={tmp_path / 'release'}", f"--export_path={target}"]
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"export: error: --export_path={target} ")
        assert f"an input of this run (--albert_directory={tmp_path / 'release'})" in err
    assert kept.read_text() == "{}"


def _export(folder, out, export_format, *extra):
    from albert_tf.export.command import main

    argv = [f"--albert_directory={folder}", f"--export_path={out}"]
    return main(["export", *argv, f"--export_format={export_format}", *extra])


def test_huggingface_export_converts_back_to_a_release_folder_bit_exact(tmp_path, capsys):
    """ours -> Hugging Face -> original format (export --export_format=checkpoint of the
    Hugging Face folder): every variable bit-exact, and a release folder comes out."""
    from albert_tf.model.config import AlbertConfig
    from albert_tf.weights import release

    folder, model = _release_folder(tmp_path / "release")
    hf = tmp_path / "hf"
    assert _export(folder, hf, "huggingface") == 0
    assert "architecture: AlbertForPreTraining" in capsys.readouterr().out
    assert sorted(os.listdir(hf)) == [
        ".albert_tf_output.json",
        "config.json",
        "model.safetensors",
        "special_tokens_map.json",
        "spiece.model",
        "tokenizer_config.json",
    ]
    out = tmp_path / "converted"
    assert _export(hf, out, "checkpoint") == 0
    _assert_best_checkpoint_holds(out, model)
    assert AlbertConfig.from_json_file(str(out / "albert_config.json")) == model.config
    files = release.release_files(str(out))
    assert files.spm_model_file == str(out / "30k-clean.model")
    assert (out / "30k-clean.model").read_bytes() == open(DEMO_SPM, "rb").read()
    vocab = (out / "30k-clean.vocab").read_text(encoding="utf-8").splitlines()
    assert vocab[:3] == ["<pad>\t0", "<unk>\t0", "[CLS]\t0"] and len(vocab) == 1211
    # The SavedModel export needs a release folder: one line saying how to get one.
    assert _export(hf, tmp_path / "sm", "saved_model") == 1
    assert "convert it with --export_format=checkpoint first" in capsys.readouterr().err


def test_fine_tuned_classifier_exports_as_sequence_classification(tmp_path):
    from safetensors.numpy import load_file

    from albert_tf.export.command import export_huggingface

    head = {"output_weights": np.ones([3, 32], np.float32), "output_bias": np.ones([3], np.float32)}
    folder, _ = _release_folder(tmp_path / "glue", extra=head)
    result = export_huggingface(folder, str(tmp_path / "hf"))
    assert result["architecture"] == "AlbertForSequenceClassification"
    stored = load_file(str(tmp_path / "hf" / "model.safetensors"))
    assert stored["classifier.weight"].tolist() == head["output_weights"].tolist()
    assert not [n for n in stored if n.startswith(("predictions.", "sop_classifier."))]
    with open(tmp_path / "hf" / "config.json") as f:
        assert json.load(f)["id2label"] == {"0": "LABEL_0", "1": "LABEL_1", "2": "LABEL_2"}


def test_keras_hub_export_converts_back_to_a_release_folder_bit_exact(tmp_path, capsys):
    """ours -> keras-hub preset -> original format: the encoder bit-exact (a backbone
    preset has no heads: the converted folder has none either)."""

    folder, model = _release_folder(tmp_path / "release")
    preset = tmp_path / "preset"
    assert _export(folder, preset, "keras_hub") == 0
    assert "left_out: 7" in capsys.readouterr().out  # the MLM (5) and SOP (2) heads
    assert sorted(os.listdir(preset)) == [
        ".albert_tf_output.json",
        "assets",
        "config.json",
        "metadata.json",
        "model.weights.h5",
        "tokenizer.json",
    ]
    out = tmp_path / "converted"
    assert _export(preset, out, "checkpoint") == 0
    _assert_best_checkpoint_holds(out, model, lambda n: n.startswith("bert/"))
    assert (out / "30k-clean.model").read_bytes() == open(DEMO_SPM, "rb").read()


# --- every format writes through albert_tf/run/output_writer.py -----------------------
def _user_files(folder):
    (folder / "sub").mkdir(parents=True)
    (folder / "notes.txt").write_bytes(b"mine \x00\n")
    (folder / "sub" / "results.csv").write_bytes(b"a,b\n1,2\n")
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _one_line_error(capsys, start):
    err = capsys.readouterr().err
    assert err.startswith(f"export: error: {start}") and err.count("\n") == 1, err
    return err


@pytest.mark.parametrize("export_format", ["saved_model", "checkpoint", "huggingface", "keras_hub"])
def test_no_format_writes_over_user_files_the_current_folder_or_a_link(
    tmp_path, capsys, monkeypatch, export_format
):
    """Refused before any work: the source is never even read (it holds a config only)."""
    source = tmp_path / "release"
    source.mkdir()
    glue_config().to_json_file(str(source / "albert_config.json"))
    user = tmp_path / "user"
    kept = _user_files(user)
    assert _export(source, user, export_format) == 1
    _one_line_error(capsys, f"--export_path={user}: holds files this program did not write")
    (tmp_path / "link").symlink_to(user)
    assert _export(source, tmp_path / "link", export_format) == 1
    _one_line_error(capsys, f"--export_path={tmp_path / 'link'}: a symbolic link (to {user})")
    monkeypatch.chdir(user)
    assert _export(source, ".", export_format) == 1
    _one_line_error(capsys, "--export_path=.: the current folder")
    assert {p: p.read_bytes() for p in user.rglob("*") if p.is_file()} == kept
    assert sorted(os.listdir(tmp_path)) == ["link", "release", "user"]


def test_checkpoint_export_refuses_a_folder_a_training_holds_or_with_a_foreign_config(
    tmp_path, capsys
):
    import socket

    source = tmp_path / "release"
    source.mkdir()
    glue_config().to_json_file(str(source / "albert_config.json"))
    training = tmp_path / "training"
    training.mkdir()
    lock = {"host": socket.gethostname(), "pid": os.getppid(), "started": "t0"}
    (training / ".albert_tf.lock").write_text(json.dumps(lock))
    for target in (training, training / "model.ckpt-9"):
        assert _export(source, target, "checkpoint") == 1
        _one_line_error(capsys, f"--export_path={training}: another run writes in it")
    assert os.listdir(training) == [".albert_tf.lock"]
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "albert_config.json").write_text('{"num_hidden_layers": 48}')
    assert _export(source, tmp_path / "other", "checkpoint") == 1
    _one_line_error(capsys, f"--export_path={tmp_path / 'other'}: holds files this program")
    assert (tmp_path / "other" / "albert_config.json").read_text() == '{"num_hidden_layers": 48}'


def test_checkpoint_export_replaces_an_earlier_one_with_the_sources_config(tmp_path):
    from albert_tf.run.output_writer import MARKER

    folder, model = _release_folder(tmp_path / "release")
    out = tmp_path / "exported"
    assert _export(folder, out, "checkpoint") == 0
    listing = sorted(os.listdir(out))
    (out / "albert_config.json").write_text('{"num_hidden_layers": 48}')
    assert _export(folder, out, "checkpoint") == 0
    assert sorted(os.listdir(out)) == listing and MARKER in listing
    assert (out / "albert_config.json").read_bytes() == open(
        os.path.join(folder, "albert_config.json"), "rb"
    ).read()
    _assert_best_checkpoint_holds(out, model)
    assert sorted(os.listdir(tmp_path)) == ["exported", "release"]


# --- dropout: a v1-shaped model (dropout 0.1) exports as its weights without dropout ------
def _encoder_outputs(paths, features, positions) -> dict:
    """Every output of an export_encoder export on `features`: the signatures, the
    `__call__` of both tags, and the preprocessing model's."""
    import tensorflow_text  # noqa: F401  (the preprocessing model's SentencePiece ops)

    loaded = tf.saved_model.load(paths["encoder"])
    feed = {k: tf.constant(v) for k, v in features.items()}
    out = {f"tokens_{k}": v for k, v in loaded.signatures["tokens"](**feed).items()}
    out.update({f"sop_{k}": v for k, v in loaded.signatures["sop"](**feed).items()})
    mlm = loaded.signatures["mlm"](**feed, mlm_positions=tf.constant(positions))
    out.update({f"mlm_{k}": v for k, v in mlm.items()})
    for training in (False, True):
        out.update({f"call{training}_{k}": v for k, v in loaded(feed, training=training).items()})
    pre = tf.saved_model.load(paths["preprocess"])
    text = {
        "text_a": tf.constant([a for a, _ in PAIRS]),
        "text_b": tf.constant([b for _, b in PAIRS]),
    }
    out.update({f"pair_{k}": v for k, v in pre.signatures["pair"](**text).items()})
    return {k: np.asarray(v) for k, v in out.items()}


def test_every_format_of_a_v1_release_equals_its_weights_without_dropout(tmp_path, capsys):
    """A v1-shaped release (dropout 0.1) exports in every format of `python -m
    albert_tf.export`; each export gives the outputs (or holds the tensors) of the same
    weights' v2-shaped (dropout 0) export; the written configs keep each release's
    dropout."""
    import keras_hub
    from safetensors.numpy import load_file

    from albert_tf.weights import checkpoints

    v1, model = _release_folder(tmp_path / "v1")
    v2, _ = _release_folder(tmp_path / "v2", version="v2")
    features = _python_features(PAIRS)
    positions = np.array([[1, 3], [2, 0], [5, 4]], np.int32)
    want = model({**features, "masked_lm_positions": positions}, training=False)
    got = {}
    for version, folder in (("v1", v1), ("v2", v2)):
        out = tmp_path / f"{version}_out"
        for export_format in ("saved_model", "huggingface", "keras_hub", "checkpoint"):
            extra = [f"--max_seq_length={SEQ}"] if export_format == "saved_model" else []
            assert _export(folder, out / export_format, export_format, *extra) == 0, export_format
        paths = {
            "encoder": str(out / "saved_model"),
            "preprocess": str(out / "saved_model" / "preprocess"),
        }
        outputs = _encoder_outputs(paths, features, positions)
        hf_config = json.loads((out / "huggingface" / "config.json").read_text())
        backbone = keras_hub.models.AlbertBackbone.from_preset(str(out / "keras_hub"))
        by_backbone = backbone(
            {
                "token_ids": features["input_ids"],
                "padding_mask": features["input_mask"],
                "segment_ids": features["segment_ids"],
            },
            training=False,
        )
        got[version] = {
            "outputs": outputs,
            "hf_tensors": load_file(str(out / "huggingface" / "model.safetensors")),
            "hf_dropout": (
                hf_config["hidden_dropout_prob"],
                hf_config["attention_probs_dropout_prob"],
            ),
            "keras_hub_pooled": np.asarray(by_backbone["pooled_output"]),
            "keras_hub_dropout": json.loads((out / "keras_hub" / "config.json").read_text())[
                "config"
            ]["dropout"],
            "checkpoint": checkpoints.read_checkpoint_values(
                str(out / "checkpoint" / "model.ckpt-best")
            ),
            "checkpoint_config": json.loads(
                (out / "checkpoint" / "albert_config.json").read_text()
            ),
        }
    capsys.readouterr()
    v1_got, v2_got = got["v1"], got["v2"]
    # The v1 export computes the model at inference.
    close = dict(rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        v1_got["outputs"]["tokens_pooled_output"], want["pooled_output"], **close
    )
    np.testing.assert_allclose(
        v1_got["outputs"]["callTrue_pooled_output"], want["pooled_output"], **close
    )
    np.testing.assert_allclose(
        v1_got["outputs"]["sop_sop_log_probs"], tf.nn.log_softmax(want["sop_logits"]), **close
    )
    np.testing.assert_allclose(
        v1_got["outputs"]["mlm_mlm_logits"], tf.reshape(want["mlm_logits"], [6, -1]), **close
    )
    np.testing.assert_allclose(v1_got["keras_hub_pooled"], want["pooled_output"], **close)
    # ... and equals the dropout-0 export bit for bit.
    assert sorted(v1_got["outputs"]) == sorted(v2_got["outputs"])
    for key, value in v1_got["outputs"].items():
        np.testing.assert_array_equal(value, v2_got["outputs"][key], err_msg=key)
    np.testing.assert_array_equal(v1_got["keras_hub_pooled"], v2_got["keras_hub_pooled"])
    for kind in ("hf_tensors", "checkpoint"):
        assert sorted(v1_got[kind]) == sorted(v2_got[kind])
        for name, value in v1_got[kind].items():
            np.testing.assert_array_equal(value, v2_got[kind][name], err_msg=f"{kind} {name}")
    # The configs say how each release was trained.
    assert v1_got["hf_dropout"] == (0.1, 0.1) and v2_got["hf_dropout"] == (0.0, 0.0)
    assert v1_got["keras_hub_dropout"] == 0.1 and v2_got["keras_hub_dropout"] == 0.0
    assert v1_got["checkpoint_config"]["hidden_dropout_prob"] == 0.1
    assert v2_got["checkpoint_config"]["hidden_dropout_prob"] == 0.0


def test_fine_tuned_exports_with_dropout_equal_their_weights_without_dropout(tmp_path):
    """run_classifier.py's and run_squad.py's --export_dir (SavedModels, TFLite) of models
    with dropout 0.1 (encoder and heads): the outputs of the same weights without dropout."""
    import tensorflow_text  # noqa: F401  (serve_text's SentencePiece ops)

    from albert_tf.export.saved_model import export_squad
    from albert_tf.tasks.squad import AlbertSquadV1

    features = _python_features(PAIRS)
    feed = {k: tf.constant(v) for k, v in features.items()}
    text = {
        "text_a": tf.constant([a for a, _ in PAIRS]),
        "text_b": tf.constant([b for _, b in PAIRS]),
    }
    got = {}
    for dropout in (0.1, 0.0):
        config = glue_config(hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
        classifier = randomized(AlbertClassifier(config, 2, classifier_dropout=dropout), 3)
        path = export_classifier(
            classifier, str(tmp_path / f"glue_{dropout}"), SEQ, spm_model_file=DEMO_SPM
        )
        loaded = tf.saved_model.load(path)
        outputs = {f"ids_{k}": v for k, v in loaded.signatures["serving_default"](**feed).items()}
        outputs.update({f"text_{k}": v for k, v in loaded.signatures["serve_text"](**text).items()})
        squad = randomized(AlbertSquadV1(config), 4)
        paths = export_squad(squad, str(tmp_path / f"squad_{dropout}"), SEQ)
        one = {k: tf.constant(v[:1]) for k, v in features.items()}
        served = tf.saved_model.load(paths["saved_model"]).signatures["serving_default"](**one)
        outputs.update({f"squad_{k}": v for k, v in served.items()})
        interpreter = tf.lite.Interpreter(model_path=paths["tflite"])
        runner = interpreter.get_signature_runner()
        outputs.update({f"tflite_{k}": v for k, v in runner(**one).items()})
        want = {
            "classifier": classifier(features, training=False),
            "squad": squad(one, training=False),
        }
        got[dropout] = ({k: np.asarray(v) for k, v in outputs.items()}, want)
    outputs, want = got[0.1]
    close = dict(rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        outputs["ids_probabilities"], want["classifier"]["probabilities"], **close
    )
    np.testing.assert_allclose(
        outputs["text_probabilities"], want["classifier"]["probabilities"], **close
    )
    for key in ("start_logits", "end_logits"):
        np.testing.assert_allclose(outputs[f"squad_{key}"], want["squad"][key], **close)
    np.testing.assert_allclose(outputs["tflite_output_0"], want["squad"]["start_logits"], **close)
    np.testing.assert_allclose(outputs["tflite_output_1"], want["squad"]["end_logits"], **close)
    assert sorted(outputs) == sorted(got[0.0][0])
    for key, value in outputs.items():
        np.testing.assert_array_equal(value, got[0.0][0][key], err_msg=key)
