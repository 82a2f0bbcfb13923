"""GLUE fine-tuning (the original's run_classifier.py flags and defaults).

    python run_classifier.py --task_name=MRPC --data_dir=glue --output_dir=out/mrpc \
      --init_checkpoint=albert_base --do_train --do_eval --do_predict \
      --max_seq_length=512 --train_step=800 --warmup_step=200 --learning_rate=2e-5 \
      --save_checkpoints_steps=100

--init_checkpoint may be an original-format checkpoint (what our training runs write
as model.ckpt-<step>), an earlier version's ckpt-<step>, or the unpacked folder of a
released model (its albert_config.json and 30k-clean.model are then used unless given).
See docs/glue.md.
"""

from albert_tf import cli

cli.prefer_onednn()  # before TensorFlow loads

from albert_tf.run import driver  # noqa: E402
from albert_tf.tasks import classifier  # noqa: E402

cli.define_flags(classifier.ClassifierOptions)


def report(summary):
    best = driver.best_checkpoint_line(summary)
    if best:
        print(best)
    for name in ("submission", "test_results", "export_dir"):
        if name in summary:
            print(f"{name}: {summary[name]}")


if __name__ == "__main__":
    cli.main(classifier.ClassifierOptions, classifier.run, report)
