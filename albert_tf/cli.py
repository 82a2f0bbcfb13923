"""What the fine-tuning entry scripts (run_classifier.py, run_squad.py, run_race.py)
share: the flags naming devices and checkpoint keeping, and the main body (flags ->
options dataclass -> run, user errors -> a one-line message and exit status 1)."""

from __future__ import annotations

import dataclasses
import logging
import os
import sys

from absl import app, flags


def prefer_onednn() -> None:
    """Turns on TensorFlow's oneDNN CPU kernels unless TF_ENABLE_ONEDNN_OPTS is set.

    TensorFlow enables them by itself only on AVX-512 CPUs; on AVX2-only CPUs they
    make ALBERT-base about 40% faster (bench/results/model_float32_rounds_avx2_onednn.md)
    and carry our layer-norm kernel. Takes effect only before TensorFlow is imported,
    so every entry script calls it before importing the library's TensorFlow modules.
    """
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")


def define_run_flags() -> None:
    """The original's TPU flags and ours for the strategy, seed, host memory and
    checkpoint count (same names and defaults in every fine-tuning script)."""
    flags.DEFINE_bool("use_tpu", False, "Run on a Cloud TPU (TPUStrategy).")
    flags.DEFINE_string("tpu_name", None, "Cloud TPU name or grpc:// address.")
    flags.DEFINE_string("tpu_zone", None, "GCE zone of the TPU.")
    flags.DEFINE_string("gcp_project", None, "GCP project of the TPU.")
    flags.DEFINE_string("master", None, "TPU master address (alternative to --tpu_name).")
    flags.DEFINE_integer("num_tpu_cores", 8,
                         "Accepted for compatibility; the TPU topology decides.")
    flags.DEFINE_integer("keep_checkpoint_max", 5, "ckpt-<step> files kept (the best is kept "
                         "separately as model.ckpt-best).")
    flags.DEFINE_enum("strategy", "default", ["default", "mirrored", "multi_worker"],
                      "Distribution strategy when not on TPU.")
    flags.DEFINE_integer("random_seed", 12345, "Seed of initialization and data order.")
    flags.DEFINE_enum("host_allocator", "auto", ["auto", "tensorflow", "system"],
                      "CPU tensor memory: TensorFlow's pool (fastest for small models) or "
                      "malloc with a 1 MiB mmap threshold (lowest peak memory: ALBERT-xxlarge "
                      "b2 step 4.8 vs 6.0 GB; ALBERT-base steps ~35% slower); auto = malloc "
                      "from 100M parameters on. See albert_tf/host_memory.py.")


def options_from_flags(options_cls):
    """The options dataclass filled from the flags of the same names."""
    return options_cls(**{f.name: flags.FLAGS[f.name].value
                          for f in dataclasses.fields(options_cls)})


def run_from_flags(script: str, argv, options_cls, run, error_cls) -> dict:
    """The scripts' main: refuses stray arguments, runs `run(options)` and turns a user
    error (error_cls, FileNotFoundError) into `<script>: error: ...` and exit status 1."""
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    logging.getLogger().setLevel(logging.INFO)
    try:
        return run(options_from_flags(options_cls))
    except (error_cls, FileNotFoundError) as err:
        sys.exit(f"{script}: error: {err}")
