"""SQuAD v1.1 / v2.0 fine-tuning (the flags and defaults of the original's
run_squad_v1.py and run_squad_v2.py; --version_2_with_negative picks v2).

    python run_squad.py --init_checkpoint=albert_base --train_file=train-v1.1.json \
      --predict_file=dev-v1.1.json --output_dir=out/squad --do_train --do_predict \
      --train_batch_size=48 --num_train_epochs=2 --learning_rate=5e-5

--init_checkpoint may be an original-format checkpoint (what our training runs write
as model.ckpt-<step>), an earlier version's ckpt-<step>, or the unpacked folder of a
released model (its albert_config.json and 30k-clean.model are then used unless given).
See docs/squad.md.
"""

from albert_tf import cli

cli.prefer_onednn()  # before TensorFlow loads

from albert_tf.tasks import squad  # noqa: E402

cli.define_flags(squad.SquadOptions)


def report(summary):
    if "eval" in summary:
        print("dev: " + ", ".join(f"{k} = {v:.2f}" for k, v in summary["eval"].items()))
    for name in ("predictions.json", "nbest_predictions.json", "null_odds.json"):
        if name in summary:
            print(f"{name}: {summary[name]}")
    for name, path in summary.get("export", {}).items():
        print(f"{name}: {path}")


if __name__ == "__main__":
    cli.main(squad.SquadOptions, squad.run, report)
