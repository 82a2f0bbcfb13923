"""Shared helpers of the classifier tests: tiny config, fixture GLUE TSVs."""

import os
import pathlib

from config_fixtures import tiny_config

DEMO_SPM = str(pathlib.Path(__file__).resolve().parents[1] / "data" / "demo" / "spm.model")

_WORDS = [
    "the",
    "cat",
    "sat",
    "on",
    "mat",
    "dog",
    "ran",
    "to",
    "park",
    "a",
    "big",
    "red",
    "house",
    "small",
    "tree",
    "bird",
    "sang",
    "loud",
    "song",
    "river",
]


def spm_size():
    from albert_tf.data.tokenization import FullTokenizer

    return FullTokenizer(spm_model_file=DEMO_SPM).vocab_size


def glue_config(**overrides):
    """The suite's tiny config for the tasks' tests: the demo SentencePiece vocabulary,
    sequences up to 64."""
    values = dict(
        vocab_size=spm_size(),
        embedding_size=16,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    values.update(overrides)
    return tiny_config(**values)


def _sentence(i, n=6):
    return " ".join(_WORDS[(i * 7 + k * 3) % len(_WORDS)] for k in range(n))


def write_mrpc(data_dir, n_train=24, n_dev=10, n_test=6):
    folder = os.path.join(data_dir, "MRPC")
    os.makedirs(folder, exist_ok=True)
    header = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
    for split, n in (("train", n_train), ("dev", n_dev)):
        with open(os.path.join(folder, f"{split}.tsv"), "w") as f:
            f.write(header)
            for i in range(n):
                same = i % 2
                b = _sentence(i) if same else _sentence(i + 5, 4)
                f.write(f"{same}\t{i}\t{i + 1000}\t{_sentence(i)}\t{b}\n")
    with open(os.path.join(folder, "test.tsv"), "w") as f:
        f.write("index\t#1 ID\t#2 ID\t#1 String\t#2 String\n")
        for i in range(n_test):
            f.write(f"{i}\t{i}\t{i + 1000}\t{_sentence(i + 3)}\t{_sentence(i + 9, 5)}\n")
    return data_dir


def write_stsb(data_dir, n_train=16, n_dev=8, n_test=4):
    folder = os.path.join(data_dir, "STS-B")
    os.makedirs(folder, exist_ok=True)
    cols = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2"
    for split, n in (("train", n_train), ("dev", n_dev), ("test", n_test)):
        with open(os.path.join(folder, f"{split}.tsv"), "w") as f:
            f.write(cols + ("" if split == "test" else "\tscore") + "\n")
            for i in range(n):
                row = [str(i), "g", "f", "2012", str(i), "s", "s", _sentence(i), _sentence(i + 2)]
                if split != "test":
                    row.append(f"{(i * 0.37) % 5:.2f}")
                f.write("\t".join(row) + "\n")
    return data_dir
