"""The paper's ablation studies at small scale on the bundled demo data.

Pretrains each variant of a study (Table 3 embedding_size, Table 4 sharing, Table 5
sentence_loss, Table 8 dropout, Table 11 layers, Figure 1 smoothness) on the demo corpus
with --seeds seeds, measures masked-LM, SOP and NSP accuracy and the learning curve on
held-out data, fine-tunes on the demo tasks (the smoothness study measures each layer's
change instead) and writes <output_dir>/<study>/results.json, results.md (mean ± std) and
PNG pictures. `--study=smoothness --smoothness_checkpoints=ALBERT=<folder>,BERT=<folder>`
measures given checkpoints instead. See albert_tf/research/ablations.py.

`--study=pretraining --real_text_dir=<folder of data/get_real_text.py>` asks whether
pretraining transfers on real text: from scratch against pretrained budgets, each fine-tuned
on the real-text tasks (albert_tf/research/pretraining_study.py).
"""

import os

from albert_tf import cli

cli.prefer_onednn()  # before TensorFlow loads

from albert_tf import fileio  # noqa: E402
from albert_tf.research import ablations, pretraining_study  # noqa: E402  (imports TensorFlow)

cli.define_flags(ablations.AblationOptions)


def run(o):
    """The study's results table (results.md), or the smoothness of given checkpoints."""
    if o.smoothness_checkpoints:
        return ablations.measure_checkpoints(o)
    if o.study == "pretraining":
        pretraining_study.run(o)
    else:
        ablations.run(o)
    return fileio.read_text(os.path.join(o.output_dir, o.study, "results.md"))


def report(text):
    print(text, end="")


if __name__ == "__main__":
    cli.main(ablations.AblationOptions, run, report)
