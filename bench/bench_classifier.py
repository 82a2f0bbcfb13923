"""Benchmark: GLUE classifier eval throughput (examples/s) on CPU, ours vs peers.

    python bench/bench_classifier.py [--config albert_base_v2] [--seq 128] [--batch 32]
        [--runs 5] [--rounds 1] [--labels 2] [--out bench/results/classifier.md]

Same configuration, random weights, random token ids with a realistic mask (3/4 of the
sequence real), inference mode, class probabilities computed:

  * ours: `AlbertClassifier` under tf.function (the body of the eval loop of
    albert_tf.tasks.classifier.predict_arrays), float32;
  * keras-hub `AlbertTextClassifier` (TensorFlow backend) built from an `AlbertBackbone`
    of the same sizes, `preprocessor=None`, `activation="softmax"`, called through a
    tf.function (its Keras `predict` adds per-call overhead we do not count for ours);
  * HF transformers PyTorch `AlbertForSequenceClassification` (`gelu_new`, the tanh
    GELU) under torch.inference_mode, softmax applied, torch threads = nproc.

Each implementation runs in its own subprocess. Reported: median examples/s of --runs
timed calls after 2 warm-up calls; with --rounds N, every implementation runs once per
round and the table gives medians over rounds and medians of the per-round ratios (single
runs scatter by several percent on a shared machine). A peer that is not installed is
skipped with a note.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
IMPLS = ("ours", "keras_hub", "hf_torch")

import bench_model as bm  # noqa: E402  (same folder: shared helpers)
from bench_model import hf_albert_config, worker_env  # noqa: E402


def _time(fn, runs):
    fn()
    fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def child(impl, config_name, seq, batch, runs, labels):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    sys.path.insert(0, ROOT)
    from albert_tf.model.config import preset

    cfg = preset(config_name)
    ids, mask, seg = bm.classifier_inputs(batch, seq, cfg.vocab_size)
    if impl in ("ours", "keras_hub"):
        fn = bm.classifier_call(impl, cfg, "float32", batch, seq, labels)
    elif impl == "hf_torch":
        import torch
        from transformers import AlbertForSequenceClassification

        torch.set_num_threads(os.cpu_count() or 1)
        hf = hf_albert_config(cfg, classifier_dropout_prob=0.1, num_labels=labels)
        model = AlbertForSequenceClassification(hf).eval()
        t_ids, t_mask, t_seg = (torch.from_numpy(x).long() for x in (ids, mask, seg))

        def fn():
            with torch.inference_mode():
                logits = model(input_ids=t_ids, attention_mask=t_mask, token_type_ids=t_seg).logits
                return torch.softmax(logits, -1).numpy()
    else:
        raise ValueError(impl)
    seconds = _time(fn, runs)
    print(json.dumps({"impl": impl, "examples_per_s": batch / seconds, "seconds": seconds}))


def _run_child(impl, args):
    """(examples/s, "") from one subprocess, or (None, why it failed)."""
    proc = subprocess.run(
        [
            sys.executable,
            __file__,
            "--child",
            impl,
            "--config",
            args.config,
            "--seq",
            str(args.seq),
            "--batch",
            str(args.batch),
            "--runs",
            str(args.runs),
            "--labels",
            str(args.labels),
        ],
        capture_output=True,
        text=True,
        env=worker_env(CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="3"),
    )
    lines = [l for l in proc.stdout.splitlines() if l.startswith("{")]
    if proc.returncode or not lines:
        tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return None, f"skipped: {tail[:160]}"
    return json.loads(lines[-1])["examples_per_s"], ""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="albert_base_v2")
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run every implementation this many times, round after round; "
        "report medians over rounds and medians of per-round ratios",
    )
    parser.add_argument("--labels", type=int, default=2)
    parser.add_argument("--impls", default=",".join(IMPLS))
    parser.add_argument("--out", default=os.path.join(HERE, "results", "classifier.md"))
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.config, args.seq, args.batch, args.runs, args.labels)
        return
    impls = args.impls.split(",")
    load_start = bm._machine()[3]
    per_round = {impl: [] for impl in impls}  # examples/s, one per round
    notes = {}
    for round_index in range(args.rounds):
        for impl in impls:
            if impl in notes:
                continue
            eps, note = _run_child(impl, args)
            if eps is None:
                notes[impl] = note
            else:
                per_round[impl].append(eps)
            print(f"round {round_index + 1}/{args.rounds} {impl}: {eps or note}", flush=True)
    ours = per_round.get("ours") if "ours" not in notes else None
    text = [
        *bm.result_header(
            f"GLUE classifier eval throughput ({args.config}, seq {args.seq}, batch "
            f"{args.batch}, float32, CPU)",
            "bench_classifier.py",
            None,
            load_start,
        ),
        f"examples/s = batch / median of {args.runs} timed calls"
        + (
            f"; {args.rounds} rounds (each implementation once per round): the median over "
            f"rounds (range in brackets), ratios the median of the per-round ratios"
            if args.rounds > 1
            else ""
        )
        + ".",
        "",
        "| implementation | examples/s | ours / peer | note |",
        "|---|---|---|---|",
    ]
    for impl in impls:
        runs = per_round[impl]
        if impl in notes or not runs:
            text.append(f"| {impl} | - | | {notes.get(impl, '')} |")
            continue
        spread = "" if len(runs) == 1 else f" ({min(runs):.1f}-{max(runs):.1f})"
        ratio = f"{statistics.median(a / b for a, b in zip(ours, runs)):.2f}" if ours else ""
        text.append(f"| {impl} | {statistics.median(runs):.1f}{spread} | {ratio} | |")
    bm.write_markdown(args.out, text)


if __name__ == "__main__":
    main()
