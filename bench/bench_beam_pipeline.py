"""Benchmark: the Beam pipeline of create_pretraining_data (Beam's in-process runner, one worker)
against the local builder (one worker process), on the same corpus and flags.

    python bench/bench_beam_pipeline.py [--corpus data/demo/corpus/part-00000.txt] [--copies 4]
        [--dupe_factor 40] [--max_seq_length 512] [--chunk_size_mb 0.06] [--runs 3]

The corpus is --copies files, each a copy of --corpus (other file indices, so other seeds and
records), so that Beam's fixed start-up cost weighs less.

Both build the same records (tests/data/test_beam_pipeline.py); the ratio of their instances/s is
Beam's cost per core. From the per-core rates in pieces (the input tokens placed in instances)
per second at the paper's dupe_factor 40 and seq 512, the script also works out the core-hours
of the paper's corpus (16 GB of text; PAPER_BYTES_PER_PIECE below). The demo's stories are
short, so its instances are short (document ends); counting pieces rather than instances
carries the rate over to long documents. Writes a Markdown report (commit, CPU, load) to
bench/results/beam_pipeline.md. Needs the beam extra (pip install -e ".[beam]").
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import bench_model as bm  # noqa: E402  (machine description)

from albert_tf.data import beam_pipeline  # noqa: E402
from albert_tf.data import create_pretraining_data as cpd  # noqa: E402
from albert_tf.data import pretraining_instances as pi  # noqa: E402
from albert_tf.data import pretraining_units as pu  # noqa: E402

PAPER_CORPUS_BYTES = 16e9  # BookCorpus + English Wikipedia (the paper: 16 GB of text)
PAPER_DUPE_FACTOR = 40
# Assumed: English text is about 4.4 bytes per piece of a 30k-piece SentencePiece model
# (5.7 bytes per word with its space, 1.3 pieces per word). The demo's 1.2k-piece model cuts
# its text into far more pieces per byte, so scaling by bytes would overstate the paper's count.
PAPER_BYTES_PER_PIECE = 4.4


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", default="data/demo/corpus/part-00000.txt")
    ap.add_argument("--copies", type=int, default=4, help="files, each a copy of --corpus")
    ap.add_argument("--spm_model", default="data/demo/spm.model")
    ap.add_argument("--dupe_factor", type=int, default=PAPER_DUPE_FACTOR)
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
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        copies = []
        for i, src in enumerate(pu.resolve_input_files(args.corpus) * args.copies):
            copies.append(os.path.join(tmp, f"corpus-{i:03d}.txt"))
            shutil.copy(src, copies[-1])
        corpus = ",".join(copies)
        corpus_bytes = sum(os.path.getsize(f) for f in copies)
        outputs = [os.path.join(tmp, f"out-{i}.tfrecord") for i in range(2)]
        configs = {
            "local builder, 1 worker": lambda: cpd.create_pretraining_data(
                corpus, outputs, config, num_workers=1, **flags
            ),
            "Beam FnApiRunner, 1 worker": lambda: beam_pipeline.create_pretraining_data_beam(
                corpus,
                outputs,
                config,
                pipeline_args=["--runner=FnApiRunner", "--direct_num_workers=1"],
                **flags,
            ),
        }
        for fn in configs.values():
            fn()  # warm-up: imports, tokenizer load, Beam's runner start-up code
        times = {name: [] for name in configs}
        cpu_times = {name: [] for name in configs}
        stats = {}
        # Interleaved run by run: load changes on the shared machine hit both rows alike.
        for _ in range(args.runs):
            for name, fn in configs.items():
                t, c = time.perf_counter(), time.process_time()
                stats[name] = fn()
                times[name].append(time.perf_counter() - t)
                cpu_times[name].append(time.process_time() - c)
    load_after = os.getloadavg()
    names = list(configs)
    assert stats[names[0]]["instances"] == stats[names[1]]["instances"]
    instances = stats[names[0]]["instances"]
    units = stats[names[0]]["units"]
    rates = {n: instances / statistics.median(times[n]) for n in names}
    # Per CPU second of this process (both run all their work in it): what a core of a worker
    # does, less sensitive than wall time to other jobs on a shared machine.
    cpu_rates = {n: instances / statistics.median(cpu_times[n]) for n in names}
    ratio = cpu_rates[names[1]] / cpu_rates[names[0]]
    # The paper's corpus: dupe_factor passes over its pieces, at the measured pieces per second
    # per core ([CLS] and two [SEP] per instance are not input pieces).
    pieces = stats[names[0]]["tokens"] - 3 * instances
    piece_rates = {n: pieces / statistics.median(cpu_times[n]) for n in names}
    demo_bytes_per_piece = corpus_bytes * args.dupe_factor / pieces
    paper_pieces = PAPER_CORPUS_BYTES / PAPER_BYTES_PER_PIECE * PAPER_DUPE_FACTOR
    hours = {n: paper_pieces / piece_rates[n] / 3600 for n in names}

    lines = [
        "# create_pretraining_data: Beam pipeline vs local builder",
        "",
        f"Command: `python bench/bench_beam_pipeline.py --corpus {args.corpus} "
        f"--copies {args.copies} "
        f"--dupe_factor {args.dupe_factor} --max_seq_length {args.max_seq_length} "
        f"--chunk_size_mb {args.chunk_size_mb} --runs {args.runs}`, "
        f"commit {bm.commit_measured()}, {bm.cpu_description()}, shared with other jobs "
        f"(load average {load_before[0]:.1f} before, {load_after[0]:.1f} after).",
        "",
        "Seconds are wall-clock, CPU seconds those of this process (all of both builders' "
        "work); the ratio and core-hours use CPU seconds. "
        f"Corpus {args.copies} copies of `{args.corpus}`, {corpus_bytes / 1e3:.0f} kB in "
        f"{units} units, {instances} instances per run "
        f"(the same records from both), median of {args.runs} runs interleaved run by run; a "
        "run includes planning, reading, tokenization, writing and (Beam) the pipeline's "
        "construction and start; the warm-up run is excluded.",
        "",
        "| builder | seconds | CPU seconds | instances/s | instances per CPU s | pieces per "
        "CPU s | ratio (CPU) | paper corpus, core-hours |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n in names:
        sec, cpu = statistics.median(times[n]), statistics.median(cpu_times[n])
        lines.append(
            f"| {n} | {sec:.2f} | {cpu:.2f} | {rates[n]:.0f} | {cpu_rates[n]:.0f} | "
            f"{piece_rates[n]:.0f} | {cpu_rates[n] / cpu_rates[names[0]]:.2f} | {hours[n]:.0f} |"
        )
    lines += [
        "",
        f"Paper corpus: {PAPER_CORPUS_BYTES / 1e9:.0f} GB of text at an assumed "
        f"{PAPER_BYTES_PER_PIECE} bytes per piece of a 30k-piece model (this corpus: "
        f"{demo_bytes_per_piece:.2f} with the demo's 1.2k-piece model) x dupe_factor "
        f"{PAPER_DUPE_FACTOR} = {paper_pieces / 1e9:.0f} G pieces placed in instances, at the "
        f"pieces per CPU second above (Beam/local ratio {ratio:.2f}); valid for --dupe_factor "
        f"{PAPER_DUPE_FACTOR} runs of this script only (tokenization is done once per unit, "
        "instance building once per pass).",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
