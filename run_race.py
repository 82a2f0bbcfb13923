"""RACE fine-tuning (the original's run_race.py flags and defaults).

    python run_race.py --data_dir=race_data --init_checkpoint=albert_base \
      --output_dir=out/race --max_seq_length=512 --max_qa_length=128 \
      --train_batch_size=32 --learning_rate=1e-5 --train_step=12000 --warmup_step=1000

--data_dir holds RACE/{train,dev,test}/{middle,high}/*.txt (one JSON object per line).
--do_train and --do_eval are on by default, as the original's. See docs/race.md.
"""

from albert_tf import cli

cli.prefer_onednn()  # before TensorFlow loads

from albert_tf.run import driver  # noqa: E402
from albert_tf.tasks import race  # noqa: E402

cli.define_flags(race.RaceOptions)


def report(summary):
    best = driver.best_checkpoint_line(summary)
    if best:
        print(best)
    if "test" in summary:
        print("test: " + ", ".join(f"{k} = {v:.4f}" for k, v in summary["test"].items()))


if __name__ == "__main__":
    cli.main(race.RaceOptions, race.run, report)
