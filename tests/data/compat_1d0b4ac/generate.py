"""Writes the compatibility fixtures that tests/test_compat.py reads: small files written by
albert_tf at commit 1d0b4ac, and the outputs that code gave on them (README.md lists them).

Run it ONLY with the code of commit 1d0b4ac, and only to write these files afresh: later
code must read them, not rewrite them (that is what the test checks). From the
repository's root:

    git worktree add ../albert_tf_1d0b4ac 1d0b4ac
    mkdir -p ../albert_tf_1d0b4ac/tests/data/compat_1d0b4ac
    cp tests/data/compat_1d0b4ac/generate.py ../albert_tf_1d0b4ac/tests/data/compat_1d0b4ac/
    cd ../albert_tf_1d0b4ac/tests/data/compat_1d0b4ac
    PYTHONPATH=$PWD/../../.. python3 generate.py

then copy the folder's new files over these. The script must sit in tests/data/<folder>/
of that checkout: it runs the scripts of the checkout it is in.

It writes into a new folder (default: the folder of this script, which then must hold
nothing but README.md and generate.py) and runs every command there, naming the files
relative to it, so the commands it prints (README.md shows them) are the project's own
command lines. Seeds are fixed, data builds use one worker and the signals land at fixed
steps, so a rerun on the same kind of machine writes the same weights.

Changes from what the commands wrote (README.md says why): the absolute path of the
folder in run_record.json files is replaced by `$FIXTURE`; TensorBoard event files,
encoder_saved_model/preprocess/ and scratch/ (runs whose folders are not kept) are
removed.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import unicodedata

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
COMMIT = "1d0b4ac"
SCRATCH = "scratch"
PLACEHOLDER = "$FIXTURE"  # stands for the fixture folder's absolute path in run_record.json

# The tiny model of the suite's tests; initializer_range 0.2 (not 0.02) so that a barely
# trained model still gives each example its own outputs.
CONFIG = {
    "vocab_size": None,  # the SentencePiece model's size
    "embedding_size": 8,
    "hidden_size": 16,
    "num_hidden_layers": 2,
    "num_hidden_groups": 1,
    "num_attention_heads": 2,
    "intermediate_size": 32,
    "inner_group_num": 1,
    "down_scale_factor": 1,
    "hidden_act": "gelu",
    "hidden_dropout_prob": None,  # 0.1 in albert_config.json, 0 in the no_dropout one
    "attention_probs_dropout_prob": None,
    "max_position_embeddings": 32,
    "type_vocab_size": 2,
    "initializer_range": 0.2,
}
SPM_VOCAB_SIZE = 128
CORPUS_DOCUMENTS = 12
GLUE_ROWS = 16

FINAL_STEP = 8
STOPPED_STEP = 4  # on the save schedule: model.ckpt-4 with train_state/state-4
RESUME_POINT_STEP = 5  # between saves: ckpt-5 beside model.ckpt-4 with train_state/state-4
PRETRAIN = [
    "--input_file=inputs/train.tfrecord",
    "--albert_config_file=inputs/albert_config.json",
    "--spm_model_file=inputs/spm.model",
    "--max_seq_length=32",
    "--max_predictions_per_seq=5",
    "--train_batch_size=8",
    f"--num_train_steps={FINAL_STEP}",
    "--num_warmup_steps=2",
    "--learning_rate=0.01",
    "--save_checkpoints_steps=4",
    "--iterations_per_loop=1",
]
GLUE = [
    "--task_name=MRPC",
    "--data_dir=inputs/glue",
    "--max_seq_length=32",
    "--eval_batch_size=8",
    "--predict_batch_size=8",
    "--do_eval",
    "--do_predict",
]
FINETUNE = [
    "--init_checkpoint=release",
    "--do_train",
    "--train_batch_size=8",
    "--learning_rate=1e-3",
    "--train_step=2",
    "--save_checkpoints_steps=2",
]
# The step-0 GLUE runs (no training): how each weights format is passed.
WEIGHTS_FLAGS = {
    "release": ["--init_checkpoint=release"],
    "encoder_saved_model": ["--albert_hub_module_handle=encoder_saved_model"],
    "huggingface": ["--init_checkpoint=huggingface"],
    "keras_hub": ["--init_checkpoint=keras_hub"],
}

# Texts the encoder's preprocessing model turned into the ids the encoder is run on.
TEXTS = [
    ("Rose repaired the narrow broom in the hotel.", "Rose fixed the narrow broom."),
    ("First, she walked to the station.", ""),
    ("At 10:37, Amy left home and walked to the harbor!", "Then she wrote 7 letters."),
]
MLM_POSITIONS = [[1, 2, 3], [2, 4, 5], [1, 3, 9]]

# Sends SIGTERM to the script's own process right after step argv[1] is reported (where a
# user's `kill -TERM` during that step takes effect), then runs the script argv[2:].
_SIGNAL_AT_STEP = r"""
import os, runpy, signal, sys
from albert_tf import training
step = int(sys.argv[1])
report = training.Trainer._report
def _report(self, at, *args):
    report(self, at, *args)
    if at == step:
        os.kill(os.getpid(), signal.SIGTERM)
training.Trainer._report = _report
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""

COMMANDS = []  # (what it wrote, command line) in order, for README.md


def _run(what, args, expect=0, signal_at=None):
    """Runs `python3 <args>` in the current folder; records the command line."""
    shown = "python3 " + " ".join(args).replace(REPO, os.path.relpath(REPO))
    if signal_at is not None:
        shown += f"  # SIGTERM at step {signal_at}"
        args = ["-c", _SIGNAL_AT_STEP, str(signal_at), *args]
    COMMANDS.append((what, shown))
    print(f"$ {shown}", flush=True)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=REPO)
    proc = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True)
    if proc.returncode != expect:
        sys.stderr.write(proc.stderr[-5000:])
        raise SystemExit(f"{shown}: exit status {proc.returncode}, expected {expect}")
    return proc


def _script(name):
    return os.path.join(REPO, name)


def write_inputs():
    """inputs/: a slice of the demo corpus, a tiny SentencePiece model, the configs, the
    pretraining TFRecords and a slice of the demo MRPC."""
    import sentencepiece as spm

    os.makedirs("inputs/glue/MRPC")
    with open(os.path.join(REPO, "data/demo/corpus/part-00000.txt"), encoding="utf-8") as f:
        corpus = f.read()
    with open("inputs/corpus.txt", "w", encoding="utf-8") as f:
        f.write("\n\n".join(corpus.strip().split("\n\n")[:CORPUS_DOCUMENTS]) + "\n")
    # The demo's spm_train options (data/make_demo_data.py) with a small vocabulary and no
    # normalization table (nmt_nfkc's is 240 kB, and every export copies the model); the
    # text is normalized as preprocess_text(lower=True) does.
    lines = []
    for line in corpus.splitlines():
        if line.strip():
            text = unicodedata.normalize("NFKD", " ".join(line.split()))
            lines.append("".join(c for c in text if not unicodedata.combining(c)).lower())
    spm.set_random_generator_seed(12345)
    writer = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=writer,
        vocab_size=SPM_VOCAB_SIZE,
        normalization_rule_name="identity",
        pad_id=0,
        unk_id=1,
        eos_id=-1,
        bos_id=-1,
        control_symbols=["[CLS]", "[SEP]", "[MASK]"],
        user_defined_symbols=["(", ")", '"', "-", ".", "–", "£", "€"],
        shuffle_input_sentence=True,
        input_sentence_size=10000000,
        character_coverage=0.99995,
        model_type="unigram",
        num_threads=1,
        minloglevel=2,
    )
    with open("inputs/spm.model", "wb") as f:
        f.write(writer.getvalue())
    sp = spm.SentencePieceProcessor(model_file="inputs/spm.model")
    with open("inputs/spm.vocab", "w", encoding="utf-8") as f:
        f.writelines(f"{sp.id_to_piece(i)}\t{sp.get_score(i):g}\n" for i in range(len(sp)))
    for name, dropout in (("albert_config.json", 0.1), ("albert_config_no_dropout.json", 0.0)):
        config = dict(CONFIG, vocab_size=len(sp))
        config.update(hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
        with open(f"inputs/{name}", "w") as f:
            json.dump(config, f, indent=2)
            f.write("\n")
    for split in ("train", "dev", "test"):
        with open(os.path.join(REPO, f"data/demo/glue/MRPC/{split}.tsv"), encoding="utf-8") as f:
            rows = f.read().splitlines(keepends=True)
        with open(f"inputs/glue/MRPC/{split}.tsv", "w", encoding="utf-8") as f:
            f.writelines(rows[: GLUE_ROWS + 1])
    _run(
        "inputs/train.tfrecord",
        [
            "-m",
            "albert_tf.data.create_pretraining_data",
            "--input_file=inputs/corpus.txt",
            "--output_file=inputs/train.tfrecord",
            "--spm_model_file=inputs/spm.model",
            "--max_seq_length=32",
            "--max_predictions_per_seq=5",
            "--dupe_factor=1",
            "--num_workers=1",
        ],
    )


def write_pretraining():
    """pretraining/: folders stopped by SIGTERM at a scheduled save and between saves,
    and the last checkpoint of the uninterrupted run with the same flags."""
    script = _script("run_pretraining.py")
    _run(
        f"pretraining/straight/ (the model.ckpt-{FINAL_STEP} of {SCRATCH}/straight)",
        [script, f"--output_dir={SCRATCH}/straight", *PRETRAIN],
    )
    os.makedirs("pretraining/straight")
    for name in os.listdir(f"{SCRATCH}/straight"):
        if name.startswith(f"model.ckpt-{FINAL_STEP}."):
            shutil.copy(f"{SCRATCH}/straight/{name}", "pretraining/straight")
    for step in (STOPPED_STEP, RESUME_POINT_STEP):
        out = f"pretraining/sigterm_at_step{step}"
        _run(f"{out}/", [script, f"--output_dir={out}", *PRETRAIN], expect=143, signal_at=step)
    assert os.path.exists(f"pretraining/sigterm_at_step{STOPPED_STEP}/model.ckpt-4.index")
    assert os.path.exists(f"pretraining/sigterm_at_step{RESUME_POINT_STEP}/ckpt-5.index")


def write_exports():
    """release/ from the last checkpoint of a run without dropout, and three exports of it.

    At 1d0b4ac the encoder SavedModel export fails for a config with dropout (KeyError:
    a captured seed_generator not reachable from the root), so this run has none."""
    no_dropout = [
        a.replace("albert_config.json", "albert_config_no_dropout.json") for a in PRETRAIN
    ]
    _run(
        "(the source of release/)",
        [_script("run_pretraining.py"), f"--output_dir={SCRATCH}/no_dropout", *no_dropout],
    )
    export = ["-m", "albert_tf.export"]
    _run(
        "release/",
        [
            *export,
            f"--albert_directory={SCRATCH}/no_dropout",
            f"--checkpoint_name=model.ckpt-{FINAL_STEP}",
            "--export_format=checkpoint",
            "--export_path=release",
        ],
    )
    _run(
        "encoder_saved_model/",
        [
            *export,
            "--albert_directory=release",
            "--export_path=encoder_saved_model",
            "--max_seq_length=32",
        ],
    )
    for fmt in ("huggingface", "keras_hub"):
        _run(
            f"{fmt}/",
            [
                *export,
                "--albert_directory=release",
                f"--export_format={fmt}",
                f"--export_path={fmt}",
            ],
        )


def glue_outputs(output_dir):
    """{"eval": {name: value} of the last block of eval_results.txt, "test_results":
    the rows of test_results.tsv} of a run_classifier.py output folder."""
    blocks = [{}]
    with open(os.path.join(output_dir, "eval_results.txt")) as f:
        for line in f:
            if line.startswith("====="):
                blocks.append({})
            elif " = " in line:
                name, value = line.strip().split(" = ", 1)
                blocks[-1][name] = float(value)
    with open(os.path.join(output_dir, "test_results.tsv")) as f:
        rows = [[float(p) for p in line.split("\t")] for line in f if line.strip()]
    return {"eval": [b for b in blocks if b][-1], "test_results": rows}


def write_glue(expected):
    """The step-0 GLUE outputs (no training) from each weights format; a fine-tuning
    run's output folder."""
    script = _script("run_classifier.py")
    found = {}
    for name, flags in WEIGHTS_FLAGS.items():
        out = f"{SCRATCH}/glue_{name}"
        _run(f"expected.json glue_step0 ({name})", [script, *GLUE, f"--output_dir={out}", *flags])
        found[name] = glue_outputs(out)
    # The same weights give the same outputs; a keras-hub preset's config has no
    # initializer_range, so the fresh head there is drawn with the default 0.02.
    assert found["encoder_saved_model"] == found["huggingface"] == found["release"], found
    assert found["keras_hub"] != found["release"]
    expected["glue_step0"] = found
    _run("glue_finetuned/", [script, *GLUE, "--output_dir=glue_finetuned", *FINETUNE])
    expected["glue_finetuned"] = glue_outputs("glue_finetuned")


def write_saved_model_outputs(expected):
    """expected.npz: the preprocessing model's ids for TEXTS and the encoder's outputs."""
    import numpy as np
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the preprocessing model's ops)

    arrays = {}
    preprocess = tf.saved_model.load("encoder_saved_model/preprocess")
    ids = preprocess.signatures["pair"](
        text_a=tf.constant([a for a, _ in TEXTS]), text_b=tf.constant([b for _, b in TEXTS])
    )
    inputs = {k: ids[k] for k in ("input_ids", "input_mask", "segment_ids")}
    arrays.update(inputs)
    arrays["mlm_positions"] = np.array(MLM_POSITIONS, np.int32)
    encoder = tf.saved_model.load("encoder_saved_model")
    for signature in ("tokens", "sop", "mlm"):
        args = dict(inputs)
        if signature == "mlm":
            args["mlm_positions"] = tf.constant(arrays["mlm_positions"])
        for name, value in encoder.signatures[signature](**args).items():
            arrays[f"{signature}/{name}"] = value.numpy()
    arrays = {k: np.asarray(v) for k, v in arrays.items()}
    np.savez("expected.npz", **arrays)
    expected["texts"] = TEXTS
    expected["expected_npz"] = {k: [str(v.dtype), list(v.shape)] for k, v in sorted(arrays.items())}


def tidy(folder):
    """What is not kept (see the module docstring); then no absolute path may remain."""
    shutil.rmtree(SCRATCH)
    shutil.rmtree("encoder_saved_model/preprocess")
    for root, dirs, files in os.walk(".", topdown=False):
        for name in files:
            path = os.path.join(root, name)
            if name.startswith("events.out.tfevents."):
                os.remove(path)
            elif name == "run_record.json":
                with open(path) as f:
                    text = f.read()
                with open(path, "w") as f:
                    f.write(text.replace(folder, PLACEHOLDER))
        for name in dirs:
            if not os.listdir(os.path.join(root, name)):
                os.rmdir(os.path.join(root, name))
    for root, _, files in os.walk("."):
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                data = f.read()
            for path in (folder, REPO, os.path.expanduser("~")):
                assert path.encode() not in data, (root, name, path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output_dir", default=os.path.dirname(os.path.abspath(__file__)))
    folder = os.path.abspath(parser.parse_args().output_dir)
    os.makedirs(folder, exist_ok=True)
    present = set(os.listdir(folder)) - {"README.md", "generate.py"}
    if present:
        raise SystemExit(f"{folder}: holds {sorted(present)}; expected a new folder")
    os.chdir(folder)
    expected = {
        "commit": COMMIT,
        "final_step": FINAL_STEP,
        "stopped_step": STOPPED_STEP,
        "resume_point_step": RESUME_POINT_STEP,
        "placeholder": PLACEHOLDER,
        "pretrain_flags": PRETRAIN,
        "glue_flags": GLUE,
        "weights_flags": WEIGHTS_FLAGS,
        "finetune_flags": FINETUNE,
    }
    write_inputs()
    write_pretraining()
    write_exports()
    write_glue(expected)
    write_saved_model_outputs(expected)
    with open("expected.json", "w") as f:
        json.dump(expected, f, indent=1)
        f.write("\n")
    tidy(folder)
    print("\n".join(f"{what}\n    {cmd}" for what, cmd in COMMANDS))


if __name__ == "__main__":
    main()
