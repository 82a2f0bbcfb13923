"""RACE fine-tuning (the original's run_race.py flags and defaults).

    python run_race.py --data_dir=race_data --init_checkpoint=albert_base \
      --output_dir=out/race --max_seq_length=512 --max_qa_length=128 \
      --train_batch_size=32 --learning_rate=1e-5 --train_step=12000 --warmup_step=1000

--data_dir holds RACE/{train,dev,test}/{middle,high}/*.txt (one JSON object per line).
--do_train and --do_eval are on by default, as the original's. See albert_tf/race.py.
"""

from absl import app, flags

from albert_tf import cli

cli.prefer_onednn()  # before TensorFlow loads

FLAGS = flags.FLAGS

# --- the original's flags ---------------------------------------------------
flags.DEFINE_string("data_dir", None, "Folder holding RACE/{train,dev,test}/{middle,high}.")
flags.DEFINE_string("albert_config_file", None, "albert_config.json of the pretrained model.")
flags.DEFINE_string("task_name", "race", "Only 'race'.")
flags.DEFINE_string("vocab_file", None, "WordPiece vocabulary (only without --spm_model_file).")
flags.DEFINE_string("spm_model_file", None, "SentencePiece model (30k-clean.model).")
flags.DEFINE_string("output_dir", None, "Checkpoints, eval_results.txt, predict_results.txt.")
flags.DEFINE_string("train_file", None, "Training records (default <output_dir>/train.tf_record; "
                    "always rebuilt).")
flags.DEFINE_string("eval_file", None, "Dev records (default <output_dir>/eval.tf_record).")
flags.DEFINE_string("predict_file", None, "Test records (default <output_dir>/predict.tf_record).")
flags.DEFINE_string("init_checkpoint", None,
                    "Original-format checkpoint, our ckpt-<step>, or a release folder.")
flags.DEFINE_string("albert_hub_module_handle", None,
                    "Not supported (TF-Hub); pass a release folder as --init_checkpoint.")
flags.DEFINE_bool("do_lower_case", True, "Lower-case the input.")
flags.DEFINE_float("dropout_prob", 0.1, "Dropout on the pooled output (training).")
flags.DEFINE_integer("max_seq_length", 512, "Length of each choice's sequence.")
flags.DEFINE_integer("max_qa_length", 128, "Question+option pieces kept (the last ones).")
flags.DEFINE_integer("num_keep_checkpoint", 5, "Accepted (unused, as in the original).")
flags.DEFINE_bool("high_only", False, "Only the high-school questions.")
flags.DEFINE_bool("middle_only", False, "Only the middle-school questions.")
flags.DEFINE_bool("do_train", True, "Fine-tune.")
flags.DEFINE_bool("do_eval", True, "Evaluate every checkpoint on dev, keep the best.")
flags.DEFINE_bool("do_predict", False, "Evaluate the test split with the best checkpoint "
                  "(predict_results.txt).")
flags.DEFINE_integer("train_batch_size", 32, "Global training batch size.")
flags.DEFINE_integer("eval_batch_size", 8, "Eval batch size.")
flags.DEFINE_integer("predict_batch_size", 8, "Predict batch size.")
flags.DEFINE_float("learning_rate", 1e-5, "Peak learning rate (AdamW).")
flags.DEFINE_integer("train_step", 12000, "Optimizer steps.")
flags.DEFINE_integer("warmup_step", 1000, "Linear warmup steps.")
flags.DEFINE_integer("save_checkpoints_steps", 100, "Checkpoint (and eval) interval.")
flags.DEFINE_integer("iterations_per_loop", 1000, "Steps per tf.function call.")
# --- ours -------------------------------------------------------------------
cli.define_run_flags()  # TPU flags (the original's), strategy, seed, memory, checkpoints


def main(argv):
    from albert_tf import race

    summary = cli.run_from_flags("run_race.py", argv, race.RaceOptions, race.run,
                                 race.RaceError)
    best = summary.get("best")
    if best:
        print(f"best checkpoint on dev: step {best['global_step']}, "
              f"{best['key']} = {best['value']:.4f}")
    if "test" in summary:
        print("test: " + ", ".join(f"{k} = {v:.4f}" for k, v in summary["test"].items()))


if __name__ == "__main__":
    flags.mark_flags_as_required(["data_dir", "output_dir"])
    app.run(main)
