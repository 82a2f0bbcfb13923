"""The paper's ablation studies at small scale on the bundled demo data.

Pretrains each variant of a study (Table 3 embedding_size, Table 4 sharing, Table 5
sentence_loss, Table 8 dropout, Table 11 layers) on the demo corpus, measures masked-LM,
SOP and NSP accuracy on held-out data, fine-tunes on the demo tasks and writes
<output_dir>/<study>/results.json and results.md. See albert_tf/ablations.py.
"""

import logging

from absl import app, flags

from albert_tf import cli

cli.prefer_onednn()  # before TensorFlow loads

from albert_tf import ablations  # noqa: E402  (imports TensorFlow)

FLAGS = flags.FLAGS
flags.DEFINE_enum("study", "sharing", list(ablations.STUDIES), "Which ablation to run.")
flags.DEFINE_string("output_dir", None, "Data, models and results go here.")
flags.DEFINE_integer("num_train_steps", ablations.AblationOptions.num_train_steps,
                     "Pretraining steps per variant (batch 32, sequence length 128).")
flags.DEFINE_list("tasks", list(ablations.PAPER_TASKS),
                  f"Downstream demo tasks (empty: intrinsic metrics only); known: "
                  f"{', '.join(ablations.TASKS)}.")
flags.DEFINE_list("variants", [], "Labels of the study's rows to run (default all).")
flags.DEFINE_integer("random_seed", 12345, "Seed of data, initialisation and order.")
flags.DEFINE_integer("dupe_factor", ablations.AblationOptions.dupe_factor,
                     "Passes over the demo corpus when building the pretraining data.")


def main(argv):
    del argv
    logging.getLogger().setLevel(logging.INFO)
    options = ablations.AblationOptions(
        study=FLAGS.study, output_dir=FLAGS.output_dir, num_train_steps=FLAGS.num_train_steps,
        tasks=tuple(FLAGS.tasks), variants=tuple(FLAGS.variants), random_seed=FLAGS.random_seed,
        dupe_factor=FLAGS.dupe_factor)
    try:
        rows = ablations.run(options)
    except ablations.AblationError as err:
        raise app.UsageError(str(err)) from None
    print(ablations.markdown_table(rows), end="")


if __name__ == "__main__":
    flags.mark_flag_as_required("output_dir")
    app.run(main)
