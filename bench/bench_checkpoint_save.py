"""Benchmark: bytes and seconds per training save, the former layout vs the current one.

    python bench/bench_checkpoint_save.py [--configs base,large,xxlarge] [--repeats 2]
        [--dir /tmp/ckpt_bench] [--out bench/results/checkpoint_save.md]

For each preset (`albert_<name>_v2`, random weights, a built LAMB optimizer: two slots
per weight, as pretraining has), writes one step into an empty local folder as

  * original: model.ckpt-N alone (weights, adam_m, adam_v, global_step under the
    original's names): what the original release wrote, the reference for bytes;
  * former:   ckpt-N (tf.train.Checkpoint of model, optimizer, input iterator) plus the
    model.ckpt-N copy: every save before the one-copy layout;
  * current:  OutputFolder.save (albert_tf/run/output_folder.py): train_state/state-N
    (input iterator, variables without an original name) plus model.ckpt-N;

and reports the bytes written and the wall seconds of the save (median of --repeats,
each into a fresh folder, after one untimed save; the page cache is not dropped, so
seconds are what the writing process waits for, not the disk's full flush). The input
iterator is that of a small in-memory dataset, as a resumable run saves one. xxlarge
needs about 3 GB per copy on disk and ~10 GB of memory.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import bench_model as bm  # noqa: E402  (machine description)
import tensorflow as tf  # noqa: E402

from albert_tf.model.config import preset  # noqa: E402
from albert_tf.model.modeling import AlbertPretrainer  # noqa: E402
from albert_tf.run.optimization import create_optimizer  # noqa: E402
from albert_tf.run.output_folder import OutputFolder, state_objects  # noqa: E402
from albert_tf.weights import checkpoints  # noqa: E402

STEP = 1000


def folder_bytes(folder) -> int:
    return sum(
        os.path.getsize(os.path.join(root, name))
        for root, _, names in os.walk(folder)
        for name in names
    )


def save_original(folder, model, optimizer, iterator):
    OutputFolder(folder).save_weights(STEP, model, optimizer)


def save_former(folder, model, optimizer, iterator):
    whole = {"model": model, "optimizer": optimizer, "iterator": iterator}
    OutputFolder(folder).save_resume_point(STEP, whole)
    checkpoints.save_original_checkpoint(
        model,
        OutputFolder(folder).weights_prefix(STEP),
        global_step=STEP,
        optimizer=optimizer,
        update_checkpoint_state=False,
    )


def save_current(folder, model, optimizer, iterator):
    state = state_objects(model, optimizer, iterator)
    OutputFolder(folder).save(STEP, model, optimizer, state)
    OutputFolder(folder).write_state_file([STEP])


LAYOUTS = {"original": save_original, "former": save_former, "current": save_current}


def measure(name, root, repeats):
    config = preset(name)
    model = AlbertPretrainer(config)
    model.build()
    optimizer = create_optimizer(1e-4, 10, 1, "lamb")
    optimizer.build(model.trainable_variables)
    dataset = tf.data.Dataset.range(10**6).batch(8).repeat()
    iterator = iter(dataset)
    next(iterator)
    params = sum(int(tf.size(v)) for v in model.trainable_variables)
    warm = os.path.join(root, f"{name}-warm-up")  # first-call costs (tracing, allocation)
    os.makedirs(warm, exist_ok=True)
    save_current(warm, model, optimizer, iterator)
    shutil.rmtree(warm)
    rows = {}
    for layout, save in LAYOUTS.items():
        seconds, size = [], None
        for r in range(repeats):
            folder = os.path.join(root, f"{name}-{layout}-{r}")
            shutil.rmtree(folder, ignore_errors=True)
            os.makedirs(folder)
            start = time.perf_counter()
            save(folder, model, optimizer, iterator)
            seconds.append(time.perf_counter() - start)
            size = folder_bytes(folder)
            shutil.rmtree(folder)
        rows[layout] = (size, statistics.median(seconds))
        print(f"{name} {layout}: {size} bytes, {rows[layout][1]:.2f} s", flush=True)
    return params, rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default="base,large")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--dir", default="/tmp/albert_tf_checkpoint_bench")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    lines = [
        "| config | parameters | layout | bytes per save | x original | s per save |",
        "|---|---:|---|---:|---:|---:|",
    ]
    for name in args.configs.split(","):
        params, rows = measure(name, args.dir, args.repeats)
        reference = rows["original"][0]
        for layout, (size, seconds) in rows.items():
            lines.append(
                f"| {name} | {params / 1e6:.1f}M | {layout} | {size:,} | "
                f"{size / reference:.4f} | {seconds:.2f} |"
            )
    table = "\n".join(lines) + "\n"
    print(table)
    if args.out:
        command = "python " + " ".join(["bench/bench_checkpoint_save.py", *sys.argv[1:]])
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(
                f"`{command}`\n\nCommit measured: {bm.commit_measured()}; CPU: "
                f"{bm.cpu_description()}; local disk.\n\n{table}"
            )


if __name__ == "__main__":
    main()
