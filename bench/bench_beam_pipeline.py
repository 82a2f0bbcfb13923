"""Benchmark: the Beam pipeline of create_pretraining_data (Beam's in-process runner, one worker)
against the local builder (one worker process), on the same corpus and flags.

    python bench/bench_beam_pipeline.py [--corpus data/demo/corpus/part-00000.txt]
        [--dupe_factor 10] [--max_seq_length 512] [--chunk_size_mb 0.06] [--runs 3]

Both build the same records (tests/test_beam_pipeline.py); the ratio of their instances/s is
Beam's cost per core. From the measured instances per input byte and per-core rate, the
script also works out the worker-hours of the paper's corpus (16 GB of text, dupe_factor 40,
max_seq_length 512). Writes a Markdown report (commit, CPU, load) to
bench/results/beam_pipeline.md. Needs the beam extra (pip install -e ".[beam]").
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import subprocess
import tempfile
import time

from albert_tf.data import beam_pipeline
from albert_tf.data import create_pretraining_data as cpd
from albert_tf.data import pretraining_instances as pi

PAPER_CORPUS_BYTES = 16e9  # BookCorpus + English Wikipedia (the paper: 16 GB of text)
PAPER_DUPE_FACTOR = 40


def _commit() -> str:
    def git(*args):
        return subprocess.run(["git", *args], capture_output=True, text=True).stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + (" (with uncommitted changes)" if git("status", "--porcelain", "-uno") else "")


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
    except OSError:
        names = []
    return f"{names[0] if names else 'unknown CPU'}, {os.cpu_count()} cores"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", default="data/demo/corpus/part-00000.txt")
    ap.add_argument("--spm_model", default="data/demo/spm.model")
    ap.add_argument("--dupe_factor", type=int, default=10)
    ap.add_argument("--max_seq_length", type=int, default=512)
    ap.add_argument("--max_predictions_per_seq", type=int, default=20)
    ap.add_argument("--chunk_size_mb", type=float, default=0.06, help="several units per file")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", default="bench/results/beam_pipeline.md")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("albert_tf").setLevel(logging.WARNING)

    config = pi.MaskingConfig(
        max_seq_length=args.max_seq_length, max_predictions_per_seq=args.max_predictions_per_seq
    )
    flags = dict(
        spm_model_file=args.spm_model,
        dupe_factor=args.dupe_factor,
        chunk_size_mb=args.chunk_size_mb,
    )
    corpus_bytes = sum(os.path.getsize(f) for f in cpd.resolve_input_files(args.corpus))
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        outputs = [os.path.join(tmp, f"out-{i}.tfrecord") for i in range(2)]
        configs = {
            "local builder, 1 worker": lambda: cpd.create_pretraining_data(
                args.corpus, outputs, config, num_workers=1, **flags
            ),
            "Beam FnApiRunner, 1 worker": lambda: beam_pipeline.create_pretraining_data_beam(
                args.corpus,
                outputs,
                config,
                pipeline_args=["--runner=FnApiRunner", "--direct_num_workers=1"],
                **flags,
            ),
        }
        for fn in configs.values():
            fn()  # warm-up: imports, tokenizer load, Beam's runner start-up code
        times = {name: [] for name in configs}
        stats = {}
        # Interleaved run by run: load changes on the shared machine hit both rows alike.
        for _ in range(args.runs):
            for name, fn in configs.items():
                t = time.perf_counter()
                stats[name] = fn()
                times[name].append(time.perf_counter() - t)
    load_after = os.getloadavg()
    names = list(configs)
    assert stats[names[0]]["instances"] == stats[names[1]]["instances"]
    instances = stats[names[0]]["instances"]
    units = stats[names[0]]["units"]
    rates = {n: instances / statistics.median(times[n]) for n in names}
    ratio = rates[names[1]] / rates[names[0]]
    # The paper's corpus at the measured instances per byte (per dupe pass) and per-core rates.
    per_mb_and_pass = instances / args.dupe_factor / corpus_bytes * 1e6
    paper_instances = per_mb_and_pass * PAPER_CORPUS_BYTES / 1e6 * PAPER_DUPE_FACTOR
    hours = {n: paper_instances / rates[n] / 3600 for n in names}

    lines = [
        "# create_pretraining_data: Beam pipeline vs local builder",
        "",
        f"Command: `python bench/bench_beam_pipeline.py --corpus {args.corpus} "
        f"--dupe_factor {args.dupe_factor} --max_seq_length {args.max_seq_length} "
        f"--chunk_size_mb {args.chunk_size_mb} --runs {args.runs}`, commit {_commit()}, "
        f"{_cpu()}, shared with other jobs (load average {load_before[0]:.1f} before, "
        f"{load_after[0]:.1f} after).",
        "",
        f"Corpus {corpus_bytes / 1e3:.0f} kB in {units} units, {instances} instances per run "
        f"(the same records from both), median of {args.runs} runs interleaved run by run; a "
        "run includes planning, reading, tokenization, writing and (Beam) the pipeline's "
        "construction and start; the warm-up run is excluded.",
        "",
        "| builder | seconds | instances/s | ratio |",
        "|---|---:|---:|---:|",
    ]
    for n in names:
        sec = statistics.median(times[n])
        lines.append(f"| {n} | {sec:.2f} | {rates[n]:.0f} | {rates[n] / rates[names[0]]:.2f} |")
    lines += [
        "",
        f"The paper's corpus at these rates: {PAPER_CORPUS_BYTES / 1e9:.0f} GB of text x "
        f"dupe_factor {PAPER_DUPE_FACTOR} at this corpus's {per_mb_and_pass:.0f} "
        f"instances per MB and pass = {paper_instances / 1e6:.0f} M instances; "
        + "; ".join(f"{n}: {hours[n]:.0f} core-hours" for n in names)
        + f" (Beam/local ratio {ratio:.2f}).",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
