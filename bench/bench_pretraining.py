"""Benchmark: full ALBERT pretraining step on CPU, ours vs keras-hub vs HF transformers.

    python bench/bench_pretraining.py [--quick] [--runs 3] [--only ours,keras_hub,hf_torch]
        [--parts speed,pipeline,memory,table2] [--rounds 1] [--dtypes float32,mixed_bfloat16]
        [--xla_modes 0,1] [--out bench/results/pretraining.md]
        [--table2_out bench/results/table2_speed.md]

Parts (each configuration in its own subprocess, helpers shared with bench/bench_model.py):

* speed: training examples/s of `preset("albert_base_v2")` (random weights) at seq 128
  (batch 16) and seq 512 (batch 4), 20 masked-LM predictions per sequence, float32 and
  mixed_bfloat16, XLA off/on:
    - ours: `Trainer._train_loop` (the exact code run_pretraining runs: MLM + SOP loss,
      LAMB with the original's schedule, global-norm clipping 1.0) over a synthetic
      in-memory dataset (`Dataset.from_tensors(batch).repeat()`), one step per timed call;
    - keras-hub `AlbertMaskedLM` (AlbertBackbone of the same config, TF backend),
      `train_on_batch` with keras.optimizers.Lamb(global_clipnorm=1.0) and sparse
      categorical cross-entropy on the 20 positions, sample-weighted (no SOP head);
      XLA via compile(jit_compile=...);
    - HF transformers PyTorch `AlbertForPreTraining` (MLM labels on the 20 positions, -100
      elsewhere, + SOP labels), torch.optim.AdamW (torch has no LAMB) + clip_grad_norm_(1.0);
      bf16 via torch.autocast("cpu"); no XLA.
  With --rounds N the speed plan runs N times, round after round: a row is the median over
  rounds (range in brackets) and each ratio the median of the per-round ratios (ours and a
  peer ran minutes apart under the same load: single runs scatter by several percent here).
  MFU = analytic FLOP/s / measured tf.matmul peak of the same dtype (bench_model's probes:
  'local' = mean of two probes in the same process right before/after the timed calls);
  forward+backward = 3 x forward, forward = bench_model.model_flops (encoder + pooler)
  + the MLM head over the 20 predictions (2*H*E + 2*E*V per prediction) + SOP.
* pipeline: examples/s of `input_pipeline.pretraining_dataset` (training mode) reading a
  TFRecord of the original schema written by this bench, compared with our fastest
  training examples/s at the same seq (ratio target >= 10x).
* memory: peak RSS (ru_maxrss of the subprocess) of an ALBERT-xxlarge
  (`albert_xxlarge_v2`) training step, batch 2, seq 128, float32, 2 steps; for the peers
  too unless --skip_memory_peers (target <= 6 GB for ours).
* table2: our training examples/s of ALBERT base/large/xlarge/xxlarge (v2) and BERT-large
  at seq 128 (--table2_batch, default 4), relative to BERT-large, next to the paper's TPU
  speedups and the inverse ratio of analytic FLOPs per example.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import bench_model as bm  # noqa: E402  (shared helpers: FLOPs, timing, peaks, machine)

from albert_tf.fileio import atomic_write_text  # noqa: E402

IMPLS = ("ours", "keras_hub", "hf_torch")
DTYPES = bm.DTYPES
PREDICTIONS = 20
TABLE2 = (
    "albert_base_v2",
    "albert_large_v2",
    "albert_xlarge_v2",
    "albert_xxlarge_v2",
    "bert_large",
)
PAPER_SPEEDUP = {
    "albert_base_v2": 5.6,
    "albert_large_v2": 1.7,
    "albert_xlarge_v2": 0.6,
    "albert_xxlarge_v2": 0.3,
    "bert_large": 1.0,
}


def pretraining_flops(cfg, batch, seq, predictions=PREDICTIONS, train=True):
    """Analytic matmul FLOPs of one pretraining step (3x forward when training)."""
    fwd = bm.model_flops(cfg, batch, seq, train=False)
    h, e, v = cfg.hidden_size, cfg.embedding_size, cfg.vocab_size
    fwd += batch * predictions * (2 * h * e + 2 * e * v) + batch * 2 * h * 2  # MLM + SOP
    return 3 * fwd if train else fwd


def _synthetic_batch(batch, seq, vocab, predictions=PREDICTIONS, seed=0):
    import numpy as np

    ids, mask, seg = bm._random_inputs(batch, seq, vocab, seed)
    rng = np.random.default_rng(seed + 1)
    pos = np.stack(
        [
            np.sort(rng.choice(np.arange(1, seq - 1), predictions, replace=False))
            for _ in range(batch)
        ]
    ).astype(np.int32)
    lm_ids = rng.integers(5, vocab, size=(batch, predictions)).astype(np.int32)
    weights = np.ones((batch, predictions), np.float32)
    sop = rng.integers(0, 2, size=(batch,)).astype(np.int32)
    return dict(
        input_ids=ids,
        input_mask=mask,
        segment_ids=seg,
        masked_lm_positions=pos,
        masked_lm_ids=lm_ids,
        masked_lm_weights=weights,
        next_sentence_labels=sop,
    )


# ---------------------------------------------------------------------------------------------
# Workers
# ---------------------------------------------------------------------------------------------


def _step_fn(impl, preset_name, dtype, xla, batch, seq, threads):
    """Builds one implementation's training step; returns a zero-argument callable."""
    from albert_tf.model import config as albert_config

    cfg = albert_config.preset(preset_name)
    data = _synthetic_batch(batch, seq, cfg.vocab_size)
    if impl == "ours":
        import keras
        import tensorflow as tf

        keras.mixed_precision.set_global_policy(dtype)
        from albert_tf.model.modeling import AlbertPretrainer
        from albert_tf.run import training
        from albert_tf.run.optimization import create_optimizer
        from albert_tf.tasks.pretraining import METRIC_NAMES, pretraining_loss_fn

        strategy = tf.distribute.get_strategy()
        model = AlbertPretrainer(cfg, full_sequence_output=False)  # as pretraining.run
        model.build()
        optimizer = create_optimizer(1e-4, 1000, 10, "lamb")
        loop = training.LoopConfig(
            num_train_steps=10**6, global_batch_size=batch, iterations_per_loop=1, jit_compile=xla
        )
        trainer = training.Trainer(
            strategy,
            model,
            optimizer,
            pretraining_loss_fn,
            METRIC_NAMES,
            tempfile.mkdtemp(prefix="bench_pt_"),
            loop,
        )
        dataset = tf.data.Dataset.from_tensors({k: tf.constant(v) for k, v in data.items()})
        iterator = iter(strategy.experimental_distribute_dataset(dataset.repeat()))
        one = tf.constant(1)

        def call():
            out = trainer._train_loop(iterator, one)
            return float(out["loss"])

        return call
    if impl == "keras_hub":
        import keras
        import keras_hub

        keras.mixed_precision.set_global_policy(dtype)
        backbone = bm.keras_hub_backbone(cfg)
        model = keras_hub.models.AlbertMaskedLM(backbone, preprocessor=None)
        model.compile(
            optimizer=keras.optimizers.Lamb(1e-4, global_clipnorm=1.0),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            jit_compile=xla,
        )
        x = {
            "token_ids": data["input_ids"],
            "padding_mask": data["input_mask"],
            "segment_ids": data["segment_ids"],
            "mask_positions": data["masked_lm_positions"],
        }
        y, w = data["masked_lm_ids"], data["masked_lm_weights"]

        def call():
            out = model.train_on_batch(x, y, sample_weight=w)
            return float(out[0] if isinstance(out, (list, tuple)) else out)

        return call
    import numpy as np
    import torch
    from transformers import AlbertForPreTraining

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    hf_cfg = bm.hf_albert_config(cfg, classifier_dropout_prob=0.0)
    model = AlbertForPreTraining(hf_cfg)
    model.train()
    labels = np.full((batch, seq), -100, np.int64)
    np.put_along_axis(
        labels,
        data["masked_lm_positions"].astype(np.int64),
        data["masked_lm_ids"].astype(np.int64),
        axis=1,
    )
    kw = dict(
        input_ids=torch.from_numpy(data["input_ids"]).long(),
        attention_mask=torch.from_numpy(data["input_mask"]).long(),
        token_type_ids=torch.from_numpy(data["segment_ids"]).long(),
        labels=torch.from_numpy(labels),
        sentence_order_label=torch.from_numpy(data["next_sentence_labels"]).long(),
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "mixed_bfloat16")

    def call():
        opt.zero_grad(set_to_none=True)
        with autocast:
            loss = model(**kw).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return float(loss)

    return call


def worker_train(args):
    call = _step_fn(
        args.impl, args.preset, args.dtype, bool(args.xla), args.batch, args.seq, args.threads
    )
    t0 = time.perf_counter()
    call()  # tracing / compilation
    first = time.perf_counter() - t0
    probe_dtype = bm.peak_dtype(args.dtype)
    peak_before = bm._local_peak(probe_dtype) if args.local_peak else None
    times = bm._time_calls(call, args.warmup, args.runs)
    peak_after = bm._local_peak(probe_dtype) if args.local_peak else None
    med = statistics.median(times)
    print(
        "RESULT "
        + json.dumps(
            {
                "first_call_s": first,
                "times": times,
                "median_s": med,
                "examples_per_s": args.batch / med,
                "local_peak": (peak_before + peak_after) / 2 if args.local_peak else None,
                "max_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
            }
        )
    )


def worker_memory(args):
    """Peak RSS of `steps` training steps (ru_maxrss includes model build and tracing)."""
    if args.host_allocator != "tensorflow":
        from albert_tf.run.host_memory import configure_host_allocator

        configure_host_allocator(args.host_allocator)
    call = _step_fn(args.impl, args.preset, "float32", False, args.batch, args.seq, args.threads)
    import gc

    gc.collect()
    build_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    times = []
    for _ in range(args.runs):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    print(
        "RESULT "
        + json.dumps(
            {
                "max_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
                "build_rss_gb": build_rss,
                "times": times,
            }
        )
    )


def _write_tfrecord(path, n, seq, vocab):
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)

    def ints(v):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=list(map(int, v))))

    with tf.io.TFRecordWriter(path) as w:
        for i in range(n):
            d = _synthetic_batch(1, seq, vocab, seed=i % 64)
            pos = np.sort(rng.choice(np.arange(1, seq - 1), PREDICTIONS, replace=False))
            feats = {
                "input_ids": ints(d["input_ids"][0]),
                "input_mask": ints(d["input_mask"][0]),
                "segment_ids": ints(d["segment_ids"][0]),
                "masked_lm_positions": ints(pos),
                "masked_lm_ids": ints(d["masked_lm_ids"][0]),
                "masked_lm_weights": tf.train.Feature(
                    float_list=tf.train.FloatList(value=[1.0] * PREDICTIONS)
                ),
                "next_sentence_labels": ints([i % 2]),
            }
            w.write(tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString())


def worker_pipeline(args):
    from albert_tf.data.input_pipeline import pretraining_dataset

    folder = tempfile.mkdtemp(prefix="bench_pipe_")
    path = os.path.join(folder, "data.tfrecord")
    _write_tfrecord(path, 1024, args.seq, 30000)
    ds = pretraining_dataset(path, args.batch, args.seq, PREDICTIONS, is_training=True, seed=12345)
    it = iter(ds)
    n_batches = max(50, 4096 // args.batch)

    def call():
        for _ in range(n_batches):
            next(it)["input_ids"].numpy()

    times = bm._time_calls(call, 1, args.runs)
    med = statistics.median(times)
    print(
        "RESULT "
        + json.dumps(
            {"times": times, "median_s": med, "examples_per_s": n_batches * args.batch / med}
        )
    )


# ---------------------------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------------------------


def _run_sub(extra, args, timeout):
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--worker",
        "--runs",
        str(args.runs),
        "--warmup",
        str(args.warmup),
        "--threads",
        str(args.threads),
    ] + [str(x) for x in extra]
    try:
        proc = subprocess.run(
            cmd, env=bm.worker_env(), capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return None, f"timed out (> {timeout} s)"
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :]), None
    if proc.returncode < 0:
        return None, f"killed by signal {-proc.returncode} (out of memory?)"
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
    return None, "failed: " + tail[0][:200]


def _header(title, args, argv, start, final):
    model, ncpu, isa, load = bm._machine()
    cmd = "python bench/bench_pretraining.py " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    return [
        f"# {title}",
        "",
        f"Command: `{cmd.strip()}` (wall time so far {(time.perf_counter() - start) / 60:.1f}"
        f" min{'' if final else ', PARTIAL: run in progress or interrupted'})",
        "",
        f"Machine: {model}, nproc {ncpu}, ISA flags {' '.join(isa)}, "
        f"TF_ENABLE_ONEDNN_OPTS={bm.onednn_setting()} "
        f"({getattr(args, 'onednn', None) or 'oneDNN not seen: no peak probe in this run'}), "
        f"load average (1/5/15 min) "
        f"at start {args.load_start}, now {load} (shared machine: other developers' jobs "
        f"were running, timings are noisy); Python {platform.python_version()}; "
        f"{bm._versions()}.",
        "",
    ]


def _speed_tables(args, res, notes, peak):
    from albert_tf.model import config as albert_config

    cfg = albert_config.preset("albert_base_v2")
    names = {
        "ours": "albert_tf Trainer (ours)",
        "keras_hub": "keras-hub AlbertMaskedLM (TF)",
        "hf_torch": "HF AlbertForPreTraining (PyTorch)",
    }
    out = []
    for seq, batch in args.shapes:
        out += [
            f"### seq {seq}, batch {batch}",
            "",
            "| model | dtype | XLA | examples/s | vs keras-hub | vs HF | vs ours fp32 "
            "| first call s | model GFLOP/s | MFU (local peak) | MFU (start peak) |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for impl in args.impls:
            for dtype in DTYPES:
                for xla in (0, 1):
                    key = ("speed", impl, dtype, xla, seq)
                    xs = "-" if impl == "hf_torch" else ("yes" if xla else "no")
                    if key in notes:
                        out.append(
                            f"| {names[impl]} | {dtype} | {xs} | {notes[key]} | | | | | | | |"
                        )
                    if key not in res:
                        continue
                    rounds = res[key]
                    r = bm.over_rounds(rounds, "examples_per_s", batch)
                    eps = r["examples_per_s"]

                    def rel(k):
                        peer = res.get(k)
                        return bm.paired_ratio(rounds, peer, "examples_per_s") if peer else "n/a"

                    spread = bm.round_spread(rounds, "examples_per_s")

                    flops = pretraining_flops(cfg, batch, seq) / r["median_s"]
                    pk = peak.get("bfloat16" if dtype == "mixed_bfloat16" else "float32")
                    lp = r.get("local_peak")
                    mfu_l = f"{100 * flops / lp:.0f}%" if lp else "n/a"
                    mfu_s = f"{100 * flops / pk:.0f}%" if pk else "n/a"
                    out.append(
                        f"| {names[impl]} | {dtype} | {xs} | {eps:.2f}{spread} | "
                        f"{rel(('speed', 'keras_hub', dtype, xla, seq))} | "
                        f"{rel(('speed', 'hf_torch', dtype, 0, seq))} | "
                        f"{rel(('speed', 'ours', 'float32', 0, seq))} | "
                        f"{r['first_call_s']:.1f} | {flops / 1e9:.0f} | {mfu_l} | {mfu_s} |"
                    )
        out.append("")
    return out


def _write_main(args, argv, res, notes, peak, start, final):
    lines = _header("ALBERT pretraining step throughput (CPU)", args, argv, start, final)
    lines += [
        f"ALBERT-base (`albert_base_v2`: L=12 shared, H=768, E=128, F=3072, V=30000), random "
        f"weights, {PREDICTIONS} masked-LM predictions per sequence. Examples/s = batch / median "
        f"of {args.runs} timed steps after {args.warmup} warm-up step(s) (first step = "
        f"tracing/compilation, reported separately); each configuration in its own process"
        + (
            f"; {args.rounds} rounds of the speed plan: examples/s is the median over rounds "
            f"(range in brackets), 'vs' ratios the median of the per-round ratios"
            if args.rounds > 1
            else ""
        )
        + ". "
        f"Ours: `Trainer._train_loop` (MLM + SOP, LAMB, global-norm clip 1.0). keras-hub: "
        f"`AlbertMaskedLM.train_on_batch`, keras Lamb(global_clipnorm=1.0), MLM only (no SOP "
        f"head). HF: `AlbertForPreTraining` with MLM + SOP labels (its MLM decoder runs over "
        f"all S positions, not only the {PREDICTIONS}), torch AdamW + clip_grad_norm_. "
        f"MFU: analytic FLOPs (3 x forward incl. the MLM head over {PREDICTIONS} positions) / "
        f"tf.matmul 2048^3 peak of the same dtype; 'local' = mean of probes right before/after "
        f"the timed steps in the same process, 'start' = once at the start (float32 "
        f"{peak.get('float32', float('nan')) / 1e9:.1f}, bfloat16 "
        f"{peak.get('bfloat16', float('nan')) / 1e9:.1f} GFLOP/s).",
        "",
    ]
    lines += _speed_tables(args, res, notes, peak)
    # Input pipeline.
    if "pipeline" in args.parts:
        lines += [
            "### Input pipeline alone",
            "",
            "`input_pipeline.pretraining_dataset` (training mode: file shuffle, "
            "interleave, shuffle buffer 100, parse, batch) over a 1024-record TFRecord of "
            "the original schema written by the bench; examples/s = batches x batch / "
            "median time. Ratio = pipeline / our fastest training examples/s at that "
            "shape (target >= 10x).",
            "",
            "| seq | batch | pipeline examples/s | fastest ours training examples/s | ratio |",
            "|---|---|---|---|---|",
        ]
        for seq, batch in args.shapes:
            key = ("pipeline", seq)
            if key not in res:
                lines.append(f"| {seq} | {batch} | {notes.get(key, 'not run')} | | |")
                continue
            ours = [
                bm.over_rounds(r, "examples_per_s", batch)["examples_per_s"]
                for k, r in res.items()
                if k[:2] == ("speed", "ours") and k[4] == seq
            ]
            best = max(ours) if ours else None
            pe = res[key]["examples_per_s"]
            lines.append(
                f"| {seq} | {batch} | {pe:.0f} | "
                f"{f'{best:.2f}' if best else 'n/a'} | "
                f"{f'{pe / best:.0f}x' if best else 'n/a'} |"
            )
        lines.append("")
    if "memory" in args.parts:
        lines += [
            "### Peak memory, ALBERT-xxlarge training step",
            "",
            "`albert_xxlarge_v2` (223M parameters), batch 2, seq 128, float32, "
            f"{args.mem_steps} training steps; peak RSS = ru_maxrss of the worker process "
            "(includes the interpreter, the framework and graph tracing). Target for ours: "
            "<= 6 GB (1 GB = 2^30 bytes).",
            "",
            "| model | peak RSS GB | RSS after build GB | step s |",
            "|---|---|---|---|",
        ]
        labels = {
            "ours": "ours, `--host_allocator=tensorflow` (the pool)",
            "ours_system": "ours, `--host_allocator=system` (what `auto`, the default, "
            "picks for xxlarge)",
        }
        memory_rows = [
            row
            for impl in args.impls
            for row in ([impl, "ours_system"] if impl == "ours" else [impl])
        ]
        for impl in memory_rows:
            key = ("memory", impl)
            if key in res:
                r = res[key]
                lines.append(
                    f"| {labels.get(impl, impl)} | {r['max_rss_gb']:.2f} | "
                    f"{r['build_rss_gb']:.2f} | {', '.join(f'{t:.0f}' for t in r['times'])} |"
                )
            else:
                lines.append(f"| {labels.get(impl, impl)} | {notes.get(key, 'not run')} | | |")
        lines.append("")
    _emit(lines, args.out, final)


def _emit(lines, path, final):
    """Writes a results table to `path` (if any); prints it after the last run."""
    if path:
        atomic_write_text(path, "\n".join(lines))
    if final:
        print("\n".join(lines))


def _write_table2(args, argv, res, notes, start, final):
    from albert_tf.model import config as albert_config

    lines = _header("Paper Table 2 speed column on this CPU", args, argv, start, final)
    lines += [
        f"Our `Trainer._train_loop` (MLM + SOP, LAMB, clip), float32, XLA off, seq 128, "
        f"batch {args.table2_batch}, {PREDICTIONS} predictions, random weights (presets "
        f"as given: bert_large has dropout 0.1, the v2 ALBERTs 0.0). Examples/s = batch / "
        f"median of {args.table2_runs} timed steps after {args.warmup} warm-up step(s). "
        f"Speedup = examples/s relative to BERT-large; FLOP ratio = FLOPs per example of "
        f"BERT-large / of the model (analytic, 3 x forward incl. MLM head).",
        "",
        "| model | params (M) | GFLOP/example | examples/s | speedup (ours, CPU) "
        "| FLOP ratio | speedup / FLOP ratio | paper speedup (TPU) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    base = res.get(("table2", "bert_large"))
    bcfg = albert_config.preset("bert_large")
    bflops = pretraining_flops(bcfg, 1, 128)
    for name in TABLE2:
        cfg = albert_config.preset(name)
        fl = pretraining_flops(cfg, 1, 128)
        params = cfg.num_parameters() / 1e6
        key = ("table2", name)
        if key not in res:
            lines.append(
                f"| {name} | {params:.0f} | {fl / 1e9:.1f} | "
                f"{notes.get(key, 'not run')} | | {bflops / fl:.2f} | | "
                f"{PAPER_SPEEDUP[name]} |"
            )
            continue
        eps = res[key]["examples_per_s"]
        sp = eps / base["examples_per_s"] if base else None
        lines.append(
            f"| {name} | {params:.0f} | {fl / 1e9:.1f} | {eps:.3f} | "
            f"{f'{sp:.2f}' if sp else 'n/a'} | {bflops / fl:.2f} | "
            f"{f'{sp / (bflops / fl):.2f}' if sp else 'n/a'} | {PAPER_SPEEDUP[name]} |"
        )
    lines.append("")
    _emit(lines, args.table2_out, final)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument(
        "--quick",
        action="store_true",
        help="3 runs, no extra warm-up, seq 512 without XLA columns of keras-hub, "
        "table2 with 1 timed step, peers' memory skipped",
    )
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--only", default="", help="comma list of impls (default all)")
    p.add_argument("--parts", default="speed,pipeline,memory,table2")
    p.add_argument("--seqs", default="128:16,512:4", help="seq:batch list for speed")
    bm.add_plan_flags(p)  # --dtypes, --xla_modes, --rounds: of the speed part
    p.add_argument("--table2_batch", type=int, default=4)
    p.add_argument("--table2_runs", type=int, default=2)
    p.add_argument("--mem_steps", type=int, default=4)
    p.add_argument("--skip_memory_peers", action="store_true")
    p.add_argument("--timeout", type=int, default=1200)
    p.add_argument("--out", default=os.path.join(HERE, "results", "pretraining.md"))
    p.add_argument("--table2_out", default=os.path.join(HERE, "results", "table2_speed.md"))
    # worker-only
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--kind", help=argparse.SUPPRESS)
    p.add_argument("--impl", default="ours", help=argparse.SUPPRESS)
    p.add_argument("--preset", default="albert_base_v2", help=argparse.SUPPRESS)
    p.add_argument("--dtype", default="float32", help=argparse.SUPPRESS)
    p.add_argument("--xla", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--batch", type=int, default=16, help=argparse.SUPPRESS)
    p.add_argument("--seq", type=int, default=128, help=argparse.SUPPRESS)
    p.add_argument("--local_peak", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--host_allocator", default="tensorflow", help=argparse.SUPPRESS)
    p.add_argument("--matmul_reps", type=int, default=8, help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    if args.worker:
        return {
            "train": worker_train,
            "memory": worker_memory,
            "pipeline": worker_pipeline,
            "matmul": bm.worker_matmul,
        }[args.kind](args)

    if args.quick:
        args.runs, args.warmup = min(args.runs, 3), 0
        args.table2_runs = 1
        args.skip_memory_peers = True
    args.parts = args.parts.split(",")
    args.shapes = [tuple(int(x) for x in s.split(":")) for s in args.seqs.split(",")]
    args.impls = [i for i in IMPLS if not args.only or i in args.only.split(",")]
    args.load_start = bm._machine()[3]
    start = time.perf_counter()
    res, notes = {}, {}
    for impl in list(args.impls):
        missing = bm._peer_available(impl)
        if missing:
            args.impls.remove(impl)
            print(f"{impl}: skipped, {missing}", flush=True)

    peak = {}
    if "speed" in args.parts:
        r, err = _run_sub(["--kind", "matmul"], args, args.timeout)
        args.onednn = r.get("onednn") if r else None
        peak = r["peak"] if r else {}
        print(f"matmul peak: {peak or err}; {args.onednn}", flush=True)

    def record(key, extra, runs=None):
        if key in notes:  # failed in an earlier round
            return
        sub_args = argparse.Namespace(**{**vars(args), "runs": runs or args.runs})
        r, err = _run_sub(extra, sub_args, args.timeout)
        if r is None:
            notes[key] = err
            res.pop(key, None)
        elif key[0] == "speed":
            res.setdefault(key, []).append(r)  # one entry per round
        else:
            res[key] = r
        print(f"{key}: {err or {k: v for k, v in r.items() if k != 'times'}}", flush=True)
        _write_main(args, argv, res, notes, peak, start, False)
        if "table2" in args.parts:
            _write_table2(args, argv, res, notes, start, False)

    plan = []
    speed_plan = []
    if "speed" in args.parts:
        # Most important first: seq 128 float32 without XLA for all models.
        dtypes, xla_modes = bm.planned_settings(args)
        for seq, batch in args.shapes:
            for xla in xla_modes:
                for dtype in dtypes:
                    for impl in args.impls:
                        if xla and impl == "hf_torch":
                            continue
                        if args.quick and xla and impl == "keras_hub" and seq != 128:
                            continue
                        speed_plan.append(
                            (
                                ("speed", impl, dtype, xla, seq),
                                [
                                    "--kind",
                                    "train",
                                    "--impl",
                                    impl,
                                    "--dtype",
                                    dtype,
                                    "--xla",
                                    xla,
                                    "--seq",
                                    seq,
                                    "--batch",
                                    batch,
                                ],
                                None,
                            )
                        )
        plan += speed_plan * args.rounds
    if "pipeline" in args.parts:
        for seq, batch in args.shapes:
            plan.append(
                (("pipeline", seq), ["--kind", "pipeline", "--seq", seq, "--batch", batch], None)
            )
    if "memory" in args.parts:
        for impl in args.impls:
            if impl != "ours" and args.skip_memory_peers:
                notes[("memory", impl)] = "skipped (--skip_memory_peers / --quick)"
                continue
            mem = [
                "--kind",
                "memory",
                "--impl",
                impl,
                "--preset",
                "albert_xxlarge_v2",
                "--batch",
                2,
                "--seq",
                128,
            ]
            plan.append((("memory", impl), mem, args.mem_steps))
            if impl == "ours":
                plan.append(
                    (
                        ("memory", "ours_system"),
                        mem + ["--host_allocator", "system"],
                        args.mem_steps,
                    )
                )
    if "table2" in args.parts:
        for name in TABLE2:
            plan.append(
                (
                    ("table2", name),
                    [
                        "--kind",
                        "train",
                        "--preset",
                        name,
                        "--batch",
                        args.table2_batch,
                        "--seq",
                        128,
                        "--local_peak",
                        0,
                    ],
                    args.table2_runs,
                )
            )
    for key, extra, runs in plan:
        record(key, extra, runs)
    _write_main(args, argv, res, notes, peak, start, True)
    if "table2" in args.parts:
        _write_table2(args, argv, res, notes, start, True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
