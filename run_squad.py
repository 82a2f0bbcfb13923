"""SQuAD v1.1 / v2.0 fine-tuning (the flags and defaults of the original's
run_squad_v1.py and run_squad_v2.py; --version_2_with_negative picks v2).

    python run_squad.py --init_checkpoint=albert_base --train_file=train-v1.1.json \
      --predict_file=dev-v1.1.json --output_dir=out/squad --do_train --do_predict \
      --train_batch_size=48 --num_train_epochs=2 --learning_rate=5e-5

--init_checkpoint may be an original-format checkpoint, one of our ckpt-<step>
checkpoints, or the unpacked folder of a released model (its albert_config.json and
30k-clean.model are then used unless given). See albert_tf/squad.py.
"""

from absl import app, flags

from albert_tf import cli

cli.prefer_onednn()  # before TensorFlow loads

FLAGS = flags.FLAGS

# --- the original's flags ---------------------------------------------------
flags.DEFINE_string("albert_config_file", None, "albert_config.json of the pretrained model.")
flags.DEFINE_string("vocab_file", None, "Not used: SQuAD features are SentencePiece only.")
flags.DEFINE_string("spm_model_file", None, "SentencePiece model (30k-clean.model).")
flags.DEFINE_string("output_dir", None, "Checkpoints, eval_results.txt, predictions.")
flags.DEFINE_string("train_file", None, "SQuAD training JSON (train-v1.1.json).")
flags.DEFINE_string("predict_file", None, "SQuAD JSON to predict (dev-v1.1.json); scored "
                    "when it holds answers.")
flags.DEFINE_string("train_feature_file", None, "Training features TFRecord "
                    "(default <output_dir>/train.tf_record; always rebuilt).")
flags.DEFINE_string("predict_feature_file", None, "Prediction features TFRecord "
                    "(default <output_dir>/predict.tf_record; always rebuilt).")
flags.DEFINE_string("predict_feature_left_file", None, "Accepted; prediction features are "
                    "kept in memory instead of this pickle.")
flags.DEFINE_string("init_checkpoint", None,
                    "Original-format checkpoint, our ckpt-<step>, or a release folder.")
flags.DEFINE_string("albert_hub_module_handle", None,
                    "Not supported (TF-Hub); pass a release folder as --init_checkpoint.")
flags.DEFINE_bool("do_lower_case", True, "Lower-case the input.")
flags.DEFINE_integer("max_seq_length", 384, "Sequence length (<= max_position_embeddings).")
flags.DEFINE_integer("doc_stride", 128, "Stride between paragraph windows.")
flags.DEFINE_integer("max_query_length", 64, "Question pieces kept.")
flags.DEFINE_bool("do_train", False, "Fine-tune.")
flags.DEFINE_bool("do_predict", False, "Predict --predict_file (and pick the best "
                  "checkpoint by F1 when it holds answers).")
flags.DEFINE_integer("train_batch_size", 32, "Global training batch size.")
flags.DEFINE_integer("predict_batch_size", 8, "Predict batch size.")
flags.DEFINE_float("learning_rate", 5e-5, "Peak learning rate (AdamW).")
flags.DEFINE_float("num_train_epochs", 3.0, "Epochs over the training examples.")
flags.DEFINE_float("warmup_proportion", 0.1, "Share of the steps with linear warmup.")
flags.DEFINE_integer("save_checkpoints_steps", 1000, "Checkpoint (and eval) interval.")
flags.DEFINE_integer("iterations_per_loop", 1000, "Steps per tf.function call.")
flags.DEFINE_integer("n_best_size", 20, "Start and end candidates per window, and n-best "
                     "list length.")
flags.DEFINE_integer("max_answer_length", 30, "Longest answer in pieces.")
flags.DEFINE_bool("use_einsum", True, "Accepted for compatibility.")
flags.DEFINE_string("export_dir", None, "v1.1: write <export_dir>/saved_model/<timestamp> "
                    "(int32 [1, max_seq_length] inputs) and albert_model.tflite.")
flags.DEFINE_integer("start_n_top", 5, "v2: beam width over starts.")
flags.DEFINE_integer("end_n_top", 5, "v2: ends kept per start.")
flags.DEFINE_float("dropout_prob", 0.1, "v2: dropout in the answer-class head (training).")
# --- ours -------------------------------------------------------------------
cli.define_run_flags()  # TPU flags (the original's), strategy, seed, memory, checkpoints
flags.DEFINE_bool("version_2_with_negative", False, "SQuAD v2.0 (run_squad_v2.py's model, "
                  "unanswerable questions, null threshold) instead of v1.1.")


def main(argv):
    from albert_tf import squad

    summary = cli.run_from_flags("run_squad.py", argv, squad.SquadOptions, squad.run,
                                 squad.SquadError)
    if "eval" in summary:
        print("dev: " + ", ".join(f"{k} = {v:.2f}" for k, v in summary["eval"].items()))
    for name in ("predictions.json", "nbest_predictions.json", "null_odds.json"):
        if name in summary:
            print(f"{name}: {summary[name]}")
    for name, path in summary.get("export", {}).items():
        print(f"{name}: {path}")


if __name__ == "__main__":
    flags.mark_flags_as_required(["output_dir"])
    app.run(main)
