"""ALBERT pretraining (masked LM + sentence-order prediction) with LAMB.

The original's flags and defaults, plus --strategy, --gradient_accumulation_steps,
--use_xla, --dtype, --dynamic_masking and --eval_file. With only --output_dir
it runs the demo: builds TFRecords from data/demo, pretrains a tiny ALBERT on
the CPU for a few minutes, evaluates and prints MLM and SOP accuracy.
"""

import json
import logging
import os

from absl import app, flags

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
flags.DEFINE_integer("dupe_factor", 10, "Demo only: passes over the demo corpus.")

# Used when --input_file is not given (the demo), for flags not set on the command line.
DEMO_SETTINGS = dict(
    max_seq_length=128, max_predictions_per_seq=20, train_batch_size=32, eval_batch_size=32,
    learning_rate=0.005, num_train_steps=1200, num_warmup_steps=100, save_checkpoints_steps=400,
    iterations_per_loop=50, max_eval_steps=20, do_eval=True)


def apply_demo_settings():
    for name, value in DEMO_SETTINGS.items():
        if not FLAGS[name].present:
            FLAGS[name].value = value


def main(argv):
    del argv
    import keras
    import tensorflow as tf

    from albert_tf import AlbertConfig, checkpoints, pretraining, training
    from albert_tf.config import preset
    from albert_tf.distribute import get_strategy, is_chief
    from albert_tf.input_pipeline import MaskingOptions, pretraining_dataset
    from albert_tf.modeling import AlbertPretrainer
    from albert_tf.optimization import create_optimizer

    logging.getLogger().setLevel(logging.INFO)
    demo = FLAGS.input_file is None
    if demo:
        apply_demo_settings()
        train_file, eval_file, spm_model = pretraining.ensure_demo_data(
            os.path.join(FLAGS.output_dir, "demo_data"), FLAGS.max_seq_length,
            FLAGS.max_predictions_per_seq, FLAGS.dupe_factor, FLAGS.random_seed)
        import sentencepiece as spm
        vocab_size = spm.SentencePieceProcessor(model_file=spm_model).get_piece_size()
        config = (AlbertConfig.from_json_file(FLAGS.albert_config_file)
                  if FLAGS.albert_config_file else preset("albert_tiny", vocab_size=vocab_size))
        logging.info("demo mode: %s -> %s", train_file, FLAGS.output_dir)
    else:
        if not FLAGS.albert_config_file:
            raise app.UsageError("--albert_config_file is required with --input_file")
        train_file, eval_file = FLAGS.input_file, FLAGS.eval_file or FLAGS.input_file
        config = AlbertConfig.from_json_file(FLAGS.albert_config_file)
    if FLAGS.max_seq_length > config.max_position_embeddings:
        raise app.UsageError(f"--max_seq_length={FLAGS.max_seq_length} exceeds the config's "
                             f"max_position_embeddings={config.max_position_embeddings}")

    keras.mixed_precision.set_global_policy(FLAGS.dtype)
    keras.utils.set_random_seed(FLAGS.random_seed)
    strategy = get_strategy(FLAGS.strategy, FLAGS.use_tpu, FLAGS.tpu_name, FLAGS.tpu_zone,
                            FLAGS.gcp_project, FLAGS.master)
    chief = is_chief(strategy)
    tf.io.gfile.makedirs(FLAGS.output_dir)
    if chief:
        config.to_json_file(os.path.join(FLAGS.output_dir, "albert_config.json"))

    with strategy.scope():
        model = AlbertPretrainer(config)
        model.build()
        optimizer = create_optimizer(FLAGS.learning_rate, FLAGS.num_train_steps,
                                     FLAGS.num_warmup_steps, FLAGS.optimizer,
                                     FLAGS.poly_power, FLAGS.start_warmup_step)
    if FLAGS.init_checkpoint and not tf.train.latest_checkpoint(FLAGS.output_dir):
        report = checkpoints.init_from_checkpoint(
            model, FLAGS.init_checkpoint, allow_missing=["^cls/"],
            init_from_group0=FLAGS.init_from_group0)
        logging.info("initialised %d variables from %s", len(report.loaded), report.checkpoint)

    dynamic = FLAGS.dynamic_masking or FLAGS.masked_lm_budget > 0
    masking = MaskingOptions(vocab_size=config.vocab_size, mask_id=4) if dynamic else None
    accumulation = FLAGS.gradient_accumulation_steps
    if FLAGS.train_batch_size % (strategy.num_replicas_in_sync * accumulation):
        raise app.UsageError(
            f"--train_batch_size={FLAGS.train_batch_size} is not divisible by replicas "
            f"({strategy.num_replicas_in_sync}) x --gradient_accumulation_steps ({accumulation})")

    def dataset_fn(pattern, global_batch, is_training):
        def fn(ctx):
            return pretraining_dataset(
                pattern, ctx.get_per_replica_batch_size(global_batch), FLAGS.max_seq_length,
                FLAGS.max_predictions_per_seq, is_training, input_context=ctx,
                seed=FLAGS.random_seed, dynamic_masking=dynamic, masking_options=masking)
        return fn

    def run_eval(step):
        metrics = pretraining.evaluate(strategy, model,
                                       dataset_fn(eval_file, FLAGS.eval_batch_size, False),
                                       FLAGS.max_eval_steps)
        if chief:
            pretraining.write_eval_results(FLAGS.output_dir, metrics, step)
            pretraining.write_eval_summaries(FLAGS.output_dir, metrics, step)
        logging.info("eval at step %d: %s", step, json.dumps(metrics))
        return metrics

    fresh_start = tf.train.latest_checkpoint(FLAGS.output_dir) is None
    before = None
    if FLAGS.do_train:
        if FLAGS.do_eval and fresh_start:  # shows what training changed
            before = run_eval(0)
        loop = training.LoopConfig(
            num_train_steps=FLAGS.num_train_steps, global_batch_size=FLAGS.train_batch_size,
            iterations_per_loop=FLAGS.iterations_per_loop,
            save_checkpoints_steps=FLAGS.save_checkpoints_steps,
            keep_checkpoint_max=FLAGS.keep_checkpoint_max,
            gradient_accumulation_steps=accumulation, jit_compile=FLAGS.use_xla)
        trainer = training.Trainer(strategy, model, optimizer, pretraining.pretraining_loss_fn,
                                   pretraining.METRIC_NAMES, FLAGS.output_dir, loop, chief)
        trainer.train(dataset_fn(train_file, FLAGS.train_batch_size // accumulation, True))
        if chief:
            step = int(optimizer.iterations.numpy())
            checkpoints.save_original_checkpoint(
                model, os.path.join(FLAGS.output_dir, f"model.ckpt-{step}"), global_step=step,
                update_checkpoint_state=False)
    if FLAGS.do_eval:
        step = int(optimizer.iterations.numpy())
        if not FLAGS.do_train:
            latest = tf.train.latest_checkpoint(FLAGS.output_dir)
            if latest is None:
                raise app.UsageError(f"--do_eval without --do_train needs a checkpoint in "
                                     f"{FLAGS.output_dir}")
            tf.train.Checkpoint(model=model).restore(latest).expect_partial()
            step = int(latest.rsplit("-", 1)[1])
        metrics = run_eval(step)
        if before is not None:
            print(f"before training: masked_lm_accuracy = {before['masked_lm_accuracy']:.4f}, "
                  f"sentence_order_accuracy = {before['sentence_order_accuracy']:.4f}")
        print(f"after {step} steps:")
        print(f"masked_lm_accuracy = {metrics['masked_lm_accuracy']:.4f}")
        print(f"sentence_order_accuracy = {metrics['sentence_order_accuracy']:.4f}")


if __name__ == "__main__":
    flags.mark_flag_as_required("output_dir")
    app.run(main)
