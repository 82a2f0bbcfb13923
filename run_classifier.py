"""GLUE fine-tuning (the original's run_classifier.py flags and defaults).

    python run_classifier.py --task_name=MRPC --data_dir=glue --output_dir=out/mrpc \
      --init_checkpoint=albert_base --do_train --do_eval --do_predict \
      --max_seq_length=512 --train_step=800 --warmup_step=200 --learning_rate=2e-5 \
      --save_checkpoints_steps=100

--init_checkpoint may be an original-format checkpoint, one of our ckpt-<step>
checkpoints, or the unpacked folder of a released model (its albert_config.json
and 30k-clean.model are then used unless given). See albert_tf/classifier.py.
"""

from absl import app, flags

from albert_tf import cli

cli.prefer_onednn()  # before TensorFlow loads

FLAGS = flags.FLAGS

# --- the original's flags ---------------------------------------------------
flags.DEFINE_string("data_dir", None, "GLUE data folder (holds MRPC/, SST-2/, ...).")
flags.DEFINE_string("albert_config_file", None, "albert_config.json of the pretrained model.")
flags.DEFINE_string("task_name", None, "Task: cola, sst-2, mrpc, sts-b, qqp, mnli, mismnli, "
                    "qnli, rte, wnli, ax.")
flags.DEFINE_string("vocab_file", None, "WordPiece vocabulary (only without --spm_model_file).")
flags.DEFINE_string("spm_model_file", None, "SentencePiece model (30k-clean.model).")
flags.DEFINE_string("output_dir", None, "Checkpoints, eval_results.txt, predictions.")
flags.DEFINE_string("cached_dir", None, "Feature cache folder (default: --output_dir).")
flags.DEFINE_string("albert_hub_module_handle", None,
                    "Not supported (TF-Hub); pass a release folder as --init_checkpoint.")
flags.DEFINE_string("init_checkpoint", None,
                    "Original-format checkpoint, our ckpt-<step>, or a release folder.")
flags.DEFINE_bool("do_lower_case", True, "Lower-case the input.")
flags.DEFINE_integer("max_seq_length", 512, "Sequence length (<= max_position_embeddings).")
flags.DEFINE_bool("do_train", False, "Fine-tune.")
flags.DEFINE_bool("do_eval", False, "Evaluate every checkpoint on dev, keep the best.")
flags.DEFINE_bool("do_predict", False, "Write <TASK>.tsv and test_results.tsv for the test set.")
flags.DEFINE_integer("train_batch_size", 32, "Global training batch size.")
flags.DEFINE_integer("eval_batch_size", 8, "Eval batch size.")
flags.DEFINE_integer("predict_batch_size", 8, "Predict batch size.")
flags.DEFINE_float("learning_rate", 5e-5, "Peak learning rate.")
flags.DEFINE_integer("train_step", 1000, "Optimizer steps.")
flags.DEFINE_integer("warmup_step", 0, "Linear warmup steps.")
flags.DEFINE_integer("save_checkpoints_steps", 1000, "Checkpoint (and eval) interval.")
flags.DEFINE_integer("iterations_per_loop", 1000, "Steps per tf.function call.")
flags.DEFINE_enum("optimizer", "adamw", ["adamw", "lamb"], "Optimizer.")
flags.DEFINE_string("export_dir", None, "Write a SavedModel (serving_default over ids, "
                    "serve_text over raw strings) here.")
flags.DEFINE_float("threshold_to_export", float("nan"),
                   "If set, the SavedModel also outputs this constant as `threshold`.")
# --- ours -------------------------------------------------------------------
cli.define_run_flags()  # TPU flags (the original's), strategy, seed, memory, checkpoints
flags.DEFINE_bool("use_tfds", False, "Read GLUE from TensorFlow Datasets instead of TSVs.")
flags.DEFINE_string("tfds_data_dir", None, "TFDS data directory.")
flags.DEFINE_bool("full_shuffle", False, "Shuffle the whole training set each epoch instead "
                  "of the original's 100-record buffer.")


def main(argv):
    from albert_tf import classifier

    summary = cli.run_from_flags("run_classifier.py", argv, classifier.ClassifierOptions,
                                 classifier.run, classifier.ClassifierError)
    best = summary.get("best")
    if best:
        print(f"best checkpoint on dev: step {best['global_step']}, "
              f"{best['key']} = {best['value']:.4f}")
    for name in ("submission", "test_results", "export_dir"):
        if name in summary:
            print(f"{name}: {summary[name]}")


if __name__ == "__main__":
    flags.mark_flags_as_required(["task_name", "output_dir"])
    app.run(main)
