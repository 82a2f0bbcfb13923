"""ALBERT pretraining (masked LM + sentence-order prediction) with LAMB.

The original's flags and defaults, plus --strategy, --gradient_accumulation_steps,
--use_xla, --dtype, --dynamic_masking and --eval_file. With only --output_dir
it runs the demo: builds TFRecords from data/demo, pretrains a tiny ALBERT on
the CPU for a few minutes, evaluates and prints MLM and SOP accuracy.
"""

import dataclasses
import logging

from absl import app, flags

from albert_tf import cli

cli.prefer_onednn()  # before TensorFlow loads

FLAGS = flags.FLAGS

# --- the original's flags ---------------------------------------------------
flags.DEFINE_string("albert_config_file", None, "albert_config.json of the model.")
flags.DEFINE_string("input_file", None, "Comma-separated globs of pretraining TFRecords.")
flags.DEFINE_string("output_dir", None, "Checkpoints, summaries and eval_results.txt go here.")
flags.DEFINE_string("init_checkpoint", None,
                    "Initial weights: an original-format checkpoint or one of ours.")
flags.DEFINE_integer("max_seq_length", 512, "Sequence length of the TFRecords.")
flags.DEFINE_integer("max_predictions_per_seq", 20, "Masked positions per sequence.")
flags.DEFINE_bool("do_train", True, "Train.")
flags.DEFINE_bool("do_eval", False, "Evaluate after training.")
flags.DEFINE_integer("train_batch_size", 4096, "Global training batch size.")
flags.DEFINE_integer("eval_batch_size", 64, "Global eval batch size.")
flags.DEFINE_enum("optimizer", "lamb", ["adamw", "lamb"], "Optimizer.")
flags.DEFINE_float("learning_rate", 0.00176, "Peak learning rate.")
flags.DEFINE_float("poly_power", 1.0, "Power of the polynomial decay.")
flags.DEFINE_integer("num_train_steps", 125000, "Optimizer steps.")
flags.DEFINE_integer("num_warmup_steps", 3125, "Linear warmup steps.")
flags.DEFINE_integer("start_warmup_step", 0, "Step at which warmup starts.")
flags.DEFINE_integer("save_checkpoints_steps", 5000, "Checkpoint interval (steps).")
flags.DEFINE_integer("keep_checkpoint_max", 5, "Checkpoints kept.")
flags.DEFINE_integer("iterations_per_loop", 1000, "Steps per tf.function call.")
flags.DEFINE_integer("max_eval_steps", 100, "Eval batches.")
flags.DEFINE_bool("use_tpu", False, "Run on a Cloud TPU (TPUStrategy).")
flags.DEFINE_bool("init_from_group0", False,
                  "Fill every group_<g> from the checkpoint's group_0 (fixed version of "
                  "the original's flag, which restored the wrong groups).")
flags.DEFINE_string("tpu_name", None, "Cloud TPU name or grpc:// address.")
flags.DEFINE_string("tpu_zone", None, "GCE zone of the TPU.")
flags.DEFINE_string("gcp_project", None, "GCP project of the TPU.")
flags.DEFINE_string("master", None, "TPU master address (alternative to --tpu_name).")
flags.DEFINE_integer("num_tpu_cores", 8, "Accepted for compatibility; the TPU topology decides.")
flags.DEFINE_integer("masked_lm_budget", 0,
                     "Original flag (its path crashed there). > 0 turns on --dynamic_masking.")
# --- ours -------------------------------------------------------------------
flags.DEFINE_enum("strategy", "default", ["default", "mirrored", "multi_worker"],
                  "Distribution strategy when not on TPU.")
flags.DEFINE_integer("gradient_accumulation_steps", 1,
                     "Micro-batches per optimizer step (global batch = train_batch_size).")
flags.DEFINE_bool("use_xla", False, "Compile the training step with XLA.")
flags.DEFINE_enum("dtype", "float32", ["float32", "mixed_bfloat16"], "Keras dtype policy.")
flags.DEFINE_bool("dynamic_masking", False, "Draw n-gram masks on the fly each epoch.")
flags.DEFINE_string("eval_file", None, "Eval TFRecords (default: --input_file, as the original).")
flags.DEFINE_integer("random_seed", 12345, "Seed of data order and initialisation.")
flags.DEFINE_enum("host_allocator", "auto", ["auto", "tensorflow", "system"],
                  "CPU tensor memory: TensorFlow's pool (fastest for small models) or malloc "
                  "with a 1 MiB mmap threshold (lowest peak memory: ALBERT-xxlarge b2 step "
                  "4.8 vs 6.0 GB; ALBERT-base steps ~35% slower); auto = malloc from 100M "
                  "parameters on. See albert_tf/host_memory.py.")
flags.DEFINE_integer("dupe_factor", 10, "Demo only: passes over the demo corpus.")
flags.DEFINE_float("sentence_order_loss_weight", 1.0,
                   "Factor on the sentence-order (or NSP) loss; 0 = masked LM only (the "
                   "paper's Table 5 'None').")


def main(argv):
    del argv
    from albert_tf import pretraining

    logging.getLogger().setLevel(logging.INFO)
    if FLAGS.input_file is None:  # the demo: its settings replace flags not given
        for name, value in pretraining.DEMO_SETTINGS.items():
            if not FLAGS[name].present:
                FLAGS[name].value = value
    fields = [f.name for f in dataclasses.fields(pretraining.PretrainingOptions)]
    options = pretraining.PretrainingOptions(**{name: FLAGS[name].value for name in fields})
    try:
        results = pretraining.run(options)
    except pretraining.UsageError as err:
        raise app.UsageError(str(err)) from None
    before, after = results["before"], results["after"]
    if before:
        print(f"before training: masked_lm_accuracy = {before['masked_lm_accuracy']:.4f}, "
              f"sentence_order_accuracy = {before['sentence_order_accuracy']:.4f}")
    if after:
        print(f"after {results['step']} steps:")
        print(f"masked_lm_accuracy = {after['masked_lm_accuracy']:.4f}")
        print(f"sentence_order_accuracy = {after['sentence_order_accuracy']:.4f}")


if __name__ == "__main__":
    flags.mark_flag_as_required("output_dir")
    app.run(main)
