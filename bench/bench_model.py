"""Benchmark: ALBERT-base encoder throughput on CPU, ours vs keras-hub vs HF transformers.

    python bench/bench_model.py [--runs 5] [--quick] [--seq 128] [--infer_batch 32]
        [--train_batch 16] [--only ours,keras_hub] [--dtypes float32] [--xla_modes 0]
        [--rounds 5] [--out bench/results/model.md]

Measures sequences/s (median of --runs timed calls after warm-up) of
`albert_tf.model.config.preset("albert_base_v2")` with random weights at seq 128:

  * inference  (forward, batch 32): a tf.function returning sequence and pooled output;
  * training   (forward+backward, batch 16): gradients of sum(sequence_output) w.r.t.
    all trainable variables, in one tf.function (torch: autograd);

for float32 and mixed_bfloat16 (Keras global policy set before building), with
tf.function(jit_compile=False) and jit_compile=True (XLA). Peers, measured in the same
run with the same sizes and random weights:

  * keras-hub `AlbertBackbone`, TensorFlow backend (KERAS_BACKEND=tensorflow);
  * HF transformers' PyTorch `AlbertModel` (hidden_act "gelu_new", the tanh GELU),
    torch.set_num_threads(nproc); bfloat16 via torch.autocast("cpu"); no XLA column.

A peer that is not installed is skipped with a note. Every configuration runs in its own
subprocess so that thread pools, XLA caches and the global dtype policy of one cannot
disturb another. The machine's matmul peak (tf.matmul 2048^3, float32 and bfloat16,
median) is measured the same way, and model FLOPs utilisation (MFU) is

    MFU = analytic model FLOP/s / measured matmul peak of the same dtype,

with forward FLOPs counted as 2 * (matmul parameters) per token plus the attention
score and context products (2 * 2 * S * H per token per layer), and forward+backward
= 3 x forward. Embedding gathers, softmax, layer norms and GELU are not counted.
Writes a Markdown table to --out.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

IMPLS = ("ours", "keras_hub", "hf_torch")
DTYPES = ("float32", "mixed_bfloat16")
MODES = ("infer", "train")


# ---------------------------------------------------------------------------------------------
# FLOP count
# ---------------------------------------------------------------------------------------------


def model_flops(cfg, batch, seq, train):
    """Analytic matmul FLOPs of one call (forward, or forward+backward = 3x forward)."""
    h, f, e, l = cfg.hidden_size, cfg.intermediate_size, cfg.embedding_size, cfg.num_hidden_layers
    per_token_layer = 2 * (4 * h * h + 2 * h * f) + 2 * 2 * seq * h  # dense + QK^T, PV
    per_token = l * per_token_layer + (2 * e * h if e != h else 0)  # + embedding projection
    fwd = batch * seq * per_token + batch * 2 * h * h  # + pooler on [CLS]
    return 3 * fwd if train else fwd


# ---------------------------------------------------------------------------------------------
# Workers (run in a subprocess each; print one JSON line)
# ---------------------------------------------------------------------------------------------


def _time_calls(fn, warmup, runs):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def _random_inputs(batch, seq, vocab, seed=0):
    import numpy as np

    rng = np.random.default_rng(seed)
    ids = rng.integers(0, vocab, size=(batch, seq)).astype(np.int32)
    mask = np.ones((batch, seq), np.int32)
    seg = np.zeros((batch, seq), np.int32)
    seg[:, seq // 2 :] = 1
    return ids, mask, seg


def worker_matmul(args):
    """The tf.matmul peaks, and what oneDNN ran them with (`onednn_summary`)."""
    log = []
    with _onednn_verbose_log(log):
        out = _matmul_peaks(args)
    print("RESULT " + json.dumps({"peak": out, "onednn": onednn_summary("".join(log))}))


@contextlib.contextmanager
def _onednn_verbose_log(log):
    """Appends oneDNN's verbose lines (ONEDNN_VERBOSE=1) of the block to the list `log`.

    oneDNN writes them to the process's stdout from C++, so file descriptor 1 itself
    is redirected; oneDNN reads the variable when its first primitive runs."""
    previous = os.environ.get("ONEDNN_VERBOSE")
    os.environ["ONEDNN_VERBOSE"] = "1"
    saved = os.dup(1)
    with tempfile.TemporaryFile("w+") as file:
        sys.stdout.flush()
        os.dup2(file.fileno(), 1)
        try:
            yield
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)
            if previous is None:
                del os.environ["ONEDNN_VERBOSE"]
            else:
                os.environ["ONEDNN_VERBOSE"] = previous
            file.seek(0)
            log.append(file.read())


def onednn_summary(verbose_text):
    """oneDNN's version, the ISA it detected and the implementation of each matrix
    product it ran, by source dtype (e.g. bf16 -> brg_matmul:avx10_1_512_amx, the AMX
    kernel), from its verbose lines; None without any (oneDNN off)."""
    version = isa = None
    impls = {}
    for line in verbose_text.splitlines():
        if not line.startswith(("onednn_verbose,", "dnnl_verbose,")):
            continue
        fields = line.split(",")
        if "info" in fields[:3]:
            text = ",".join(fields[fields.index("info") + 1 :])
            if text.startswith("oneDNN v"):
                version = text.split()[1]
            elif text.startswith("cpu,isa:"):
                isa = text[len("cpu,isa:") :]
        elif "exec" in fields[:4]:
            i = fields.index("exec")
            kind, impl, descs = fields[i + 2], fields[i + 3], fields[i + 5]
            src = re.search(r"src[:_]([a-z0-9]+)", descs)
            if kind in ("matmul", "gemm_api", "inner_product") and src:
                impls.setdefault(src.group(1), set()).add(f"{kind}:{impl}" if impl else kind)
    if version is None and not impls:
        return None
    products = "; ".join(
        f"{dt} products: {', '.join(sorted(v))}" for dt, v in sorted(impls.items())
    )
    return f"oneDNN {version or '?'}, ISA: {isa or '?'}; {products}"


def _matmul_peaks(args):
    import tensorflow as tf

    n, reps = 2048, args.matmul_reps
    out = {}
    for dtype in ("float32", "bfloat16"):
        # Distinct operands per product, passed as arguments: identical products would be
        # merged by Grappler's common-subexpression pass, and captured constants folded.
        a = tf.cast(tf.random.normal([n, n]), dtype)
        bs = [tf.cast(tf.random.normal([n, n]), dtype) for _ in range(reps)]

        @tf.function(jit_compile=False)
        def chain(a, bs):
            # Independent products, one scalar of each fetched.
            return tf.add_n([tf.cast(tf.matmul(a, b)[0, 0], tf.float32) for b in bs])

        times = _time_calls(lambda: chain(a, bs).numpy(), 1, args.runs)
        out[dtype] = 2 * n**3 * reps / statistics.median(times)
    return out


def peak_dtype(policy):
    """The tf.matmul dtype whose peak a Keras dtype policy's products run at."""
    return "bfloat16" if policy == "mixed_bfloat16" else "float32"


def matmul_probe(dtype, m, k, n, reps=2):
    """(zero-argument call, its FLOPs): `reps` chained tf.matmul [m, k] x [k, n] in
    `dtype`, a peak probe that can be timed in the same rotation as a model's calls."""
    import tensorflow as tf

    a = tf.cast(tf.random.normal([m, k]), dtype)
    bs = [tf.cast(tf.random.normal([k, n]), dtype) for _ in range(reps)]

    @tf.function(jit_compile=False)
    def chain(a, bs):
        return tf.add_n([tf.cast(tf.matmul(a, b)[0, 0], tf.float32) for b in bs])

    return (lambda: chain(a, bs).numpy()), 2 * m * k * n * reps


def _local_peak(dtype, runs=3, reps=2, n=2048):
    """A short tf.matmul peak probe (FLOP/s), taken next to a model's timed calls.

    On a shared machine the available compute drifts by 2x or more within minutes;
    MFU against a probe taken at the same time is far more meaningful than
    against the one global peak measured at the start.
    """
    call, flops = matmul_probe(dtype, n, n, n, reps)
    return flops / statistics.median(_time_calls(call, 1, runs))


def hf_albert_config(cfg, **overrides):
    """transformers' AlbertConfig with the sizes of an AlbertConfig: the original's GELU
    (tanh form, "gelu_new"), no dropout unless `overrides` say otherwise."""
    from transformers import AlbertConfig as HFConfig

    fields = dict(
        vocab_size=cfg.vocab_size,
        embedding_size=cfg.embedding_size,
        hidden_size=cfg.hidden_size,
        num_hidden_layers=cfg.num_hidden_layers,
        num_hidden_groups=cfg.num_hidden_groups,
        num_attention_heads=cfg.num_attention_heads,
        intermediate_size=cfg.intermediate_size,
        inner_group_num=cfg.inner_group_num,
        hidden_act="gelu_new",
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        max_position_embeddings=cfg.max_position_embeddings,
        type_vocab_size=cfg.type_vocab_size,
        initializer_range=cfg.initializer_range,
    )
    return HFConfig(**{**fields, **overrides})


def keras_hub_backbone(cfg):
    """keras-hub's AlbertBackbone with the sizes of an AlbertConfig (random weights)."""
    import keras_hub

    return keras_hub.models.AlbertBackbone(
        vocabulary_size=cfg.vocab_size,
        num_layers=cfg.num_hidden_layers,
        num_heads=cfg.num_attention_heads,
        embedding_dim=cfg.embedding_size,
        hidden_dim=cfg.hidden_size,
        intermediate_dim=cfg.intermediate_size,
        num_groups=cfg.num_hidden_groups,
        num_inner_repetitions=cfg.inner_group_num,
        dropout=0.0,
        max_sequence_length=cfg.max_position_embeddings,
        num_segments=cfg.type_vocab_size,
    )


def classifier_inputs(batch, seq, vocab):
    """(ids, mask, segments) int32 [batch, seq]: random ids with a realistic mask (3/4 of
    each sequence real, its second half of that a second segment)."""
    import numpy as np

    rng = np.random.default_rng(0)
    ids = rng.integers(5, vocab, size=(batch, seq)).astype("int32")
    mask = np.zeros((batch, seq), "int32")
    mask[:, : seq * 3 // 4] = 1
    segments = np.zeros((batch, seq), "int32")
    segments[:, seq // 2 : seq * 3 // 4] = 1
    return ids * mask, mask, segments


def classifier_call(impl, cfg, dtype, batch, seq, labels=2):
    """A GLUE classifier's eval call of `impl` ("ours": `AlbertClassifier`, the body of
    albert_tf.tasks.classifier.predict_arrays' loop; "keras_hub": `AlbertTextClassifier` with
    `preprocessor=None` and a softmax) as a zero-argument callable: class probabilities
    for `batch` `classifier_inputs` of length `seq`, config `cfg` with random weights,
    under the Keras dtype policy `dtype`, through a tf.function."""
    import keras
    import tensorflow as tf

    keras.mixed_precision.set_global_policy(dtype)
    ids, mask, seg = (tf.constant(x) for x in classifier_inputs(batch, seq, cfg.vocab_size))
    if impl == "ours":
        from albert_tf.tasks.classifier import AlbertClassifier

        model = AlbertClassifier(cfg, labels)
        model.build()
        feats = {"input_ids": ids, "input_mask": mask, "segment_ids": seg}
        step = tf.function(lambda f: model(f, training=False)["probabilities"])
    elif impl == "keras_hub":
        import keras_hub

        model = keras_hub.models.AlbertTextClassifier(
            backbone=keras_hub_backbone(cfg),
            num_classes=labels,
            preprocessor=None,
            activation="softmax",
            dropout=0.1,
        )
        feats = {"token_ids": ids, "padding_mask": mask, "segment_ids": seg}
        step = tf.function(lambda f: model(f, training=False))
    else:
        raise ValueError(f"no classifier call for {impl!r}")
    return lambda: step(feats).numpy()


def model_call(impl, dtype, xla, mode, batch, seq, threads):
    """One benchmark call of `impl` ("ours", "keras_hub", "hf_torch") as a zero-argument
    callable: inference (mode "infer") or forward+backward ("train") of ALBERT-base with
    random weights, `batch` sequences of length `seq`, `dtype` "float32" or
    "mixed_bfloat16", under XLA if `xla` (TensorFlow peers); or a GLUE classifier's eval
    ("classify", `classifier_call`; TensorFlow peers, no XLA)."""
    if mode == "classify":
        from albert_tf.model import config as albert_config

        return classifier_call(impl, albert_config.preset("albert_base_v2"), dtype, batch, seq)
    train = mode == "train"
    if impl in ("ours", "keras_hub"):
        import keras
        import tensorflow as tf

        keras.mixed_precision.set_global_policy(dtype)
        from albert_tf.model import config as albert_config

        cfg = albert_config.preset("albert_base_v2")
        ids, mask, seg = _random_inputs(batch, seq, cfg.vocab_size)
        if impl == "ours":
            from albert_tf.model.modeling import AlbertModel

            model = AlbertModel(cfg)
            inputs = {
                "input_ids": tf.constant(ids),
                "input_mask": tf.constant(mask),
                "segment_ids": tf.constant(seg),
            }
        else:
            model = keras_hub_backbone(cfg)
            inputs = {
                "token_ids": tf.constant(ids),
                "padding_mask": tf.constant(mask),
                "segment_ids": tf.constant(seg),
            }
        model(inputs)  # build eagerly (random weights)
        variables = model.trainable_variables

        if train:

            @tf.function(jit_compile=xla)
            def step(inputs):
                with tf.GradientTape() as tape:
                    out = model(inputs, training=True)
                    loss = tf.reduce_sum(tf.cast(out["sequence_output"], tf.float32))
                grads = tape.gradient(loss, variables)
                # Touch every gradient so nothing is pruned (IndexedSlices -> values).
                total = tf.add_n(
                    [
                        tf.reduce_sum(
                            tf.cast(g.values if isinstance(g, tf.IndexedSlices) else g, tf.float32)
                        )
                        for g in grads
                        if g is not None
                    ]
                )
                return loss, total
        else:

            @tf.function(jit_compile=xla)
            def step(inputs):
                out = model(inputs, training=False)
                return out["sequence_output"], out["pooled_output"]

        def call():
            result = step(inputs)
            result[0].numpy()
            result[1].numpy()
    else:
        import torch
        from transformers import AlbertModel as HFAlbert

        from albert_tf.model import config as albert_config

        torch.set_num_threads(threads)
        torch.manual_seed(0)
        cfg = albert_config.preset("albert_base_v2")
        hf_cfg = hf_albert_config(cfg)
        model = HFAlbert(hf_cfg)
        ids, mask, seg = _random_inputs(batch, seq, cfg.vocab_size)
        kw = dict(
            input_ids=torch.from_numpy(ids).long(),
            attention_mask=torch.from_numpy(mask).long(),
            token_type_ids=torch.from_numpy(seg).long(),
        )
        autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "mixed_bfloat16")
        params = [p for p in model.parameters() if p.requires_grad]
        if train:
            model.train()  # dropout rates are 0

            def call():
                with autocast:
                    out = model(**kw)
                    loss = out.last_hidden_state.float().sum()
                grads = torch.autograd.grad(loss, params, allow_unused=True)
                float(loss)
                return grads
        else:
            model.eval()

            def call():
                with torch.inference_mode(), autocast:
                    out = model(**kw)
                float(out.pooler_output.float().sum())

    return call


def worker_model(args):
    impl, dtype, xla, mode = args.impl, args.dtype, bool(args.xla), args.mode
    batch = args.train_batch if mode == "train" else args.infer_batch
    call = model_call(impl, dtype, xla, mode, batch, args.seq, args.threads)

    t0 = time.perf_counter()
    call()  # first call: tracing / compilation
    first = time.perf_counter() - t0
    probe_dtype = peak_dtype(dtype)
    peak_before = _local_peak(probe_dtype)
    times = _time_calls(call, args.warmup, args.runs)
    peak_after = _local_peak(probe_dtype)
    med = statistics.median(times)
    print(
        "RESULT "
        + json.dumps(
            {
                "impl": impl,
                "dtype": dtype,
                "xla": xla,
                "mode": mode,
                "batch": batch,
                "first_call_s": first,
                "times": times,
                "local_peak": (peak_before + peak_after) / 2,
                "local_peaks": [peak_before, peak_after],
                "median_s": med,
                "seq_per_s": batch / med,
            }
        )
    )


# ---------------------------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------------------------


def _peer_available(impl):
    import importlib.util

    mods = {
        "ours": ["albert_tf"],
        "keras_hub": ["keras_hub"],
        "hf_torch": ["torch", "transformers"],
    }[impl]
    missing = [m for m in mods if importlib.util.find_spec(m) is None]
    return None if not missing else "not installed (" + ", ".join(missing) + ")"


def worker_env(**extra) -> dict:
    """The environment of a benchmark subprocess: TensorFlow backend for keras-hub, quiet
    logs, this checkout importable, and oneDNN on for every peer unless the caller set
    TF_ENABLE_ONEDNN_OPTS (TensorFlow enables it by itself only on AVX-512 CPUs; the entry
    scripts turn it on too, see albert_tf.cli.prefer_onednn)."""
    env = dict(
        os.environ,
        KERAS_BACKEND="tensorflow",
        TF_CPP_MIN_LOG_LEVEL="2",
        TF_ENABLE_ONEDNN_OPTS=onednn_setting(),
        PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )
    env.update(extra)
    return env


# What a CPU without AVX-512 runs, emulated on one that has it (bench_paired --emulate):
# oneDNN's kernels, XLA's loops and our C++ kernels each held to AVX2 (and FMA).
EMULATED_ISAS = {
    "avx2": {
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "XLA_FLAGS": "--xla_cpu_max_isa=AVX2",
        "ALBERT_TF_KERNEL_FLAGS": "-mno-avx512f",
    },
}


def add_emulate_flag(parser):
    """--emulate (bench_paired.py, bench_products.py)."""
    parser.add_argument(
        "--emulate",
        choices=sorted(EMULATED_ISAS),
        help="run as on a CPU with that ISA only: oneDNN, XLA and our C++ kernels held to it "
        "(bench_model.EMULATED_ISAS); an emulation on this CPU's units, not such a CPU",
    )


def emulated_note(name) -> list:
    """The lines a result file gives an --emulate run (none without one)."""
    if not name:
        return []
    settings = " ".join(f"{k}={v}" for k, v in EMULATED_ISAS[name].items())
    return [f"Emulated: {name} only, in the environment {settings}.", ""]


def run_emulated(name):
    """For a bench that measures in its own process: where --emulate asks for an ISA whose
    settings this process lacks, runs this command again with them (they must be there
    before TensorFlow loads)."""
    if name and any(os.environ.get(k) != v for k, v in EMULATED_ISAS[name].items()):
        env = dict(os.environ, **EMULATED_ISAS[name])
        os.execve(sys.executable, [sys.executable, *sys.argv], env)


def onednn_setting() -> str:
    return os.environ.get("TF_ENABLE_ONEDNN_OPTS", "1")


def _run_sub(extra, args, timeout):
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--worker",
        "--runs",
        str(args.runs),
        "--warmup",
        str(args.warmup),
        "--seq",
        str(args.seq),
        "--infer_batch",
        str(args.infer_batch),
        "--train_batch",
        str(args.train_batch),
        "--threads",
        str(args.threads),
        "--matmul_reps",
        str(args.matmul_reps),
    ] + extra
    try:
        proc = subprocess.run(
            cmd, env=worker_env(), capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return None, "timed out"
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :]), None
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
    return None, "failed: " + tail[0][:200]


# The CPU flags that decide which oneDNN kernels run (AVX2, AVX-512, its VNNI, BF16 and
# FP16 extensions, AMX tiles with bf16/int8).
ISA_FLAGS = (
    "avx2",
    "avx512f",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
)


def commit_measured() -> str:
    """The short hash of HEAD, marked where tracked files have uncommitted changes."""

    def git(*args):
        return subprocess.run(["git", *args], capture_output=True, text=True).stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + (" (with uncommitted changes)" if git("status", "--porcelain", "-uno") else "")


def cpu_description() -> str:
    """'<model name> family F model M, N cores' of this machine."""
    info = cpuinfo()
    family = (
        f" family {info['cpu family']} model {info.get('model')}" if "cpu family" in info else ""
    )
    return f"{info.get('model name', 'unknown CPU')}{family}, {os.cpu_count()} cores"


def cpuinfo() -> dict:
    """{field: value} of the first processor in /proc/cpuinfo ({} where there is none)."""
    info = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                info.setdefault(key.strip(), value.strip())  # the first processor's
    except OSError:
        pass
    return info


def _machine():
    """(CPU model with family/model/stepping, nproc, ISA flags present, load average)."""
    info = cpuinfo()
    model = info.get("model name", "unknown")
    if "cpu family" in info:  # virtual machines often show a generic model name
        model += (
            f" (family {info['cpu family']}, model {info.get('model', '?')}, "
            f"stepping {info.get('stepping', '?')})"
        )
    flags = set(info.get("flags", "").split())
    isa = [x for x in ISA_FLAGS if x in flags]
    try:
        load = "%.2f %.2f %.2f" % os.getloadavg()
    except OSError:
        load = "n/a"
    return model, os.cpu_count(), isa, load


def _versions():
    out = []
    for mod in ("tensorflow", "keras", "keras_hub", "torch", "transformers"):
        try:
            m = __import__(mod)
            out.append(f"{mod} {m.__version__}")
        except Exception:  # noqa: BLE001 - a missing peer is fine here
            out.append(f"{mod} (not installed)")
    return ", ".join(out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=5, help="timed calls per configuration")
    p.add_argument("--warmup", type=int, default=1, help="untimed calls after the first")
    p.add_argument(
        "--quick",
        action="store_true",
        help="3 runs, no extra warm-up, skip the XLA columns of keras-hub",
    )
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--infer_batch", type=int, default=32)
    p.add_argument("--train_batch", type=int, default=16)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--matmul_reps", type=int, default=8)
    p.add_argument("--only", default="", help="comma list of impls to run (default all)")
    add_plan_flags(p)
    p.add_argument("--out", default=os.path.join(HERE, "results", "model.md"))
    p.add_argument("--timeout", type=int, default=900, help="per-configuration seconds")
    # worker-only
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--impl", help=argparse.SUPPRESS)
    p.add_argument("--dtype", help=argparse.SUPPRESS)
    p.add_argument("--xla", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--mode", help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    if args.worker:
        return worker_matmul(args) if args.impl == "matmul" else worker_model(args)

    if args.quick:
        args.runs, args.warmup = min(args.runs, 3), 0
    impls = [i for i in IMPLS if not args.only or i in args.only.split(",")]
    start = time.perf_counter()
    args.load_start = _machine()[3]

    peak_args = argparse.Namespace(**{**vars(args), "runs": max(args.runs, 5)})
    peak, err = _run_sub(["--impl", "matmul"], peak_args, args.timeout)
    args.onednn = peak.get("onednn") if peak else None
    peak = peak["peak"] if peak else {}
    print(f"matmul peak: {peak or err}; {args.onednn}", flush=True)

    from albert_tf.model import config as albert_config

    cfg = albert_config.preset("albert_base_v2")
    results, notes = {}, {}
    for impl in impls:
        missing = _peer_available(impl)
        if missing:
            notes[impl] = missing
            print(f"{impl}: skipped, {missing}", flush=True)
    # Most important configurations first (float32 without XLA, all models), and the
    # table rewritten after each one, so that an interrupted run still leaves results.
    dtypes, xla_modes = planned_settings(args)
    plan = [
        (impl, dtype, xla, mode)
        for xla in xla_modes
        for dtype in dtypes
        for impl in impls
        for mode in MODES
        if impl not in notes
        and not (xla and impl == "hf_torch")
        and not (xla and args.quick and impl == "keras_hub")
    ]
    for round_index in range(args.rounds):
        for key in plan:
            if key in notes:
                continue
            impl, dtype, xla, mode = key
            r, err = _run_sub(
                ["--impl", impl, "--dtype", dtype, "--xla", str(xla), "--mode", mode],
                args,
                args.timeout,
            )
            if r is None:
                notes[key] = err
                results.pop(key, None)
                print(f"{key}: {err}", flush=True)
            else:
                results.setdefault(key, []).append(r)
                print(
                    f"round {round_index + 1}/{args.rounds} {key}: "
                    f"{r['seq_per_s']:.2f} seq/s (median of {len(r['times'])}, "
                    f"first call {r['first_call_s']:.1f}s)",
                    flush=True,
                )
            _write(cfg, args, argv, results, notes, peak, impls, start, final=False)
    _write(cfg, args, argv, results, notes, peak, impls, start, final=True)
    return 0


def _write(cfg, args, argv, results, notes, peak, impls, start, final):
    elapsed = time.perf_counter() - start
    table = _table(cfg, args, results, notes, peak, impls)
    model, ncpu, isa, load = _machine()
    cmd = "python bench/bench_model.py " + " ".join(argv if argv is not None else sys.argv[1:])
    text = "\n".join(
        [
            "# ALBERT-base encoder throughput (CPU)",
            "",
            f"Command: `{cmd.strip()}` (total wall time {elapsed / 60:.1f} min"
            f"{'' if final else ', PARTIAL: run still in progress or interrupted'})",
            "",
            f"Machine: {model}, nproc {ncpu}, ISA flags {' '.join(isa)}, "
            f"TF_ENABLE_ONEDNN_OPTS={onednn_setting()} for every peer "
            f"({args.onednn or 'oneDNN not seen in the peak probe'}), "
            f"load average (1/5/15 min) at start {args.load_start}, at end {load} (shared machine: "
            f"other jobs were running); {platform.python_version()}; {_versions()}.",
            "",
            f"Config `albert_base_v2` (L=12 shared, H=768, E=128, F=3072, heads 12), random "
            f"weights, seq {args.seq}; inference batch {args.infer_batch}, forward+backward batch "
            f"{args.train_batch} (gradients of sum(sequence_output) w.r.t. all trainable "
            f"variables). Sequences/s = batch / median of {args.runs} timed calls after warm-up; "
            f"each configuration in its own process"
            + (
                f"; {args.rounds} rounds, the plan run once per round: seq/s is the median over "
                f"rounds (range in brackets), 'vs' ratios the median of the per-round ratios"
                if args.rounds > 1
                else ""
            )
            + f". MFU = analytic matmul FLOP/s / measured "
            f"tf.matmul 2048^3 peak of the same dtype: 'local' = mean of two short probes taken "
            f"in the same process right before and after the timed calls; 'start' = the peak "
            f"measured once at the start "
            f"(float32 {peak.get('float32', float('nan')) / 1e9:.1f} GFLOP/s, "
            f"bfloat16 {peak.get('bfloat16', float('nan')) / 1e9:.1f} GFLOP/s).",
            "",
            table,
            "",
        ]
    )
    if final:
        print(text)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            f.write(text)


def paired_seconds(calls, pairs, warm=0):
    """{name: [seconds of each timed call]}: `pairs` rounds of one call of each, the
    order alternating from round to round (ABBA...), after `warm` untimed calls of each
    (tracing, caches)."""
    for call in list(calls.values()) * warm:
        call()
    names = list(calls)
    seconds = {name: [] for name in names}
    for i in range(pairs):
        for name in names if i % 2 == 0 else names[::-1]:
            start = time.perf_counter()
            calls[name]()
            seconds[name].append(time.perf_counter() - start)
    return seconds


def paired_row(name, ours, other, pairs):
    """A result table's row "| name | ours ms | other ms | ratio (range) |" from `pairs`
    paired calls of the zero-argument callables `ours` and `other` (after two untimed
    calls of each): median milliseconds per call, and the median of the per-pair ratios
    other time / our time with their range."""
    seconds = paired_seconds({"ours": ours, "other": other}, pairs, warm=2)
    ratios = [o / u for o, u in zip(seconds["other"], seconds["ours"])]
    return (
        f"| {name} | {statistics.median(seconds['ours']) * 1e3:.2f} "
        f"| {statistics.median(seconds['other']) * 1e3:.2f} "
        f"| {statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) |"
    )


def write_paired_table(args, argv, script, title, description, columns, pairs):
    """Writes args.out: the result header, `description`, and a table of `columns` (the
    first column's name, ours, the other side) with a `paired_row` of args.pairs pairs for
    each (name, ours, other) in `pairs` (args: the script's parsed flags, with `out`,
    `pairs` and `emulate`)."""
    load_start = _machine()[3]
    rows = [paired_row(name, ours, other, args.pairs) for name, ours, other in pairs]
    first, ours, other = columns
    write_markdown(
        args.out,
        [
            *result_header(title, script, argv, load_start, args.emulate),
            description,
            "",
            f"| {first} | {ours} ms | {other} ms | ratio (range) |",
            "|---|---:|---:|---|",
            *rows,
        ],
    )


def result_header(title, script, argv, load_start, emulate=None):
    """The first lines of a result file: its title, the command that wrote it (`script`
    in bench/ with `argv`, None for this process's), and the machine (CPU, ISA flags,
    oneDNN setting, load average at `load_start` and now, versions; the ISA `emulate`d,
    if any)."""
    model, nproc, isa, load = _machine()
    command = shlex.join(sys.argv[1:] if argv is None else argv)
    return [
        f"# {title}",
        "",
        f"Command: `python bench/{script} {command}`",
        "",
        f"Commit measured: {commit_measured()}",
        "",
        f"Machine: {model}, nproc {nproc}, ISA flags {' '.join(isa)}, "
        f"TF_ENABLE_ONEDNN_OPTS={onednn_setting()}, load average at start {load_start}, "
        f"at end {load}; {_versions()}.",
        "",
        *emulated_note(emulate),
    ]


def write_markdown(path, lines):
    """Writes `lines` to `path` as one Markdown file (its folder made if missing; the old
    file replaced only once the new one is whole) and prints them."""
    text = "\n".join(lines) + "\n"
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)
    print(text, end="")


def add_plan_flags(parser):
    """--dtypes, --xla_modes and --rounds (shared with bench_pretraining.py)."""
    parser.add_argument("--dtypes", default=",".join(DTYPES), help="comma list of dtypes to run")
    parser.add_argument(
        "--xla_modes", default="0,1", help="XLA settings to run: 0 (off), 1 (jit_compile), or 0,1"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run the plan this many times, round after round; a row reports "
        "the median over rounds and the ratios the median of per-round "
        "ratios (ours and a peer ran minutes apart under the same load)",
    )


def planned_settings(args):
    """(dtypes, xla modes) selected by add_plan_flags' flags, in table order."""
    return (
        [d for d in DTYPES if d in args.dtypes.split(",")],
        [x for x in (0, 1) if str(x) in args.xla_modes.split(",")],
    )


def over_rounds(rounds, rate, batch):
    """One configuration's per-round results -> the median round's figures: `rate`
    (the throughput field, e.g. "seq_per_s"), median_s, first_call_s, local_peak."""
    value = statistics.median(r[rate] for r in rounds)
    peaks = [r["local_peak"] for r in rounds if r.get("local_peak")]
    return {
        rate: value,
        "median_s": batch / value,
        "first_call_s": statistics.median(r["first_call_s"] for r in rounds),
        "local_peak": statistics.median(peaks) if peaks else None,
    }


def round_spread(rounds, rate):
    """ " (min-max)" of `rate` over several rounds; "" for one."""
    values = [r[rate] for r in rounds]
    return "" if len(values) == 1 else " (%.2f-%.2f)" % (min(values), max(values))


def paired_ratio(rounds, peer_rounds, rate):
    """Median of the per-round ratios of `rate`, as text: both ran minutes apart in
    each round, under the same load."""
    return "%.2f" % statistics.median(a[rate] / b[rate] for a, b in zip(rounds, peer_rounds))


def _table(cfg, args, results, notes, peak, impls):
    names = {
        "ours": "albert_tf (ours)",
        "keras_hub": "keras-hub AlbertBackbone (TF)",
        "hf_torch": "HF transformers AlbertModel (PyTorch)",
    }
    rows = [
        "| model | dtype | XLA | mode | batch | seq/s | vs keras-hub | vs HF | model GFLOP/s "
        "| MFU (local peak) | MFU (start peak) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for impl in impls:
        if impl in notes:
            rows.append(f"| {names[impl]} | - | - | - | - | skipped: {notes[impl]} | | | | | |")
            continue
        for dtype in DTYPES:
            for xla in (0, 1):
                for mode in MODES:
                    key = (impl, dtype, xla, mode)
                    if key not in results and key not in notes:
                        continue
                    batch = args.train_batch if mode == "train" else args.infer_batch
                    label = "fwd" if mode == "infer" else "fwd+bwd"
                    xla_s = "-" if impl == "hf_torch" else ("yes" if xla else "no")
                    if key in notes:
                        rows.append(
                            f"| {names[impl]} | {dtype} | {xla_s} | {label} | {batch} "
                            f"| {notes[key]} | | | | | |"
                        )
                        continue
                    rounds = results[key]
                    r = over_rounds(rounds, "seq_per_s", batch)
                    sps = r["seq_per_s"]

                    def ratio(peer_impl):
                        if peer_impl == impl:
                            return "1.00"
                        # keras-hub: same XLA setting; HF: its only (eager) setting.
                        peer = results.get(
                            (peer_impl, dtype, 0 if peer_impl == "hf_torch" else xla, mode)
                        )
                        return paired_ratio(rounds, peer, "seq_per_s") if peer else "n/a"

                    pk = peak.get("bfloat16" if dtype == "mixed_bfloat16" else "float32")
                    flops = model_flops(cfg, batch, args.seq, mode == "train") / r["median_s"]
                    mfu = f"{100 * flops / pk:.0f}%" if pk else "n/a"
                    lp = r.get("local_peak")
                    mfu_local = f"{100 * flops / lp:.0f}%" if lp else "n/a"
                    gfl = f"{flops / 1e9:.0f}"
                    spread = round_spread(rounds, "seq_per_s")
                    rows.append(
                        f"| {names[impl]} | {dtype} | {xla_s} | {label} | {batch} | "
                        f"{sps:.2f}{spread} | {ratio('keras_hub')} | "
                        f"{ratio('hf_torch')} | {gfl} | {mfu_local} | {mfu} |"
                    )
    return "\n".join(rows)


if __name__ == "__main__":
    sys.exit(main())
