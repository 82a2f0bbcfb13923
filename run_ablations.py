"""The paper's ablation studies at small scale on the bundled demo data.

Pretrains each variant of a study (Table 3 embedding_size, Table 4 sharing, Table 5
sentence_loss, Table 8 dropout, Table 11 layers, Figure 1 smoothness) on the demo corpus
with --seeds seeds, measures masked-LM, SOP and NSP accuracy and the learning curve on
held-out data, fine-tunes on the demo tasks (the smoothness study measures each layer's
change instead) and writes <output_dir>/<study>/results.json, results.md (mean ± std) and
PNG pictures. `--study=smoothness --smoothness_checkpoints=ALBERT=<folder>,BERT=<folder>`
measures given checkpoints instead. See albert_tf/ablations.py.
"""

import logging
import os
import sys

from absl import app

from albert_tf import cli

cli.prefer_onednn()  # before TensorFlow loads

from albert_tf import ablations, fileio, options  # noqa: E402  (imports TensorFlow)
from albert_tf.errors import UserError  # noqa: E402

options.define_flags(ablations.AblationOptions)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    logging.getLogger().setLevel(logging.INFO)
    o = options.from_flags(ablations.AblationOptions)
    try:
        if o.smoothness_checkpoints:
            print(ablations.measure_checkpoints(o), end="")
        else:
            ablations.run(o)
            print(fileio.read_text(os.path.join(o.output_dir, o.study, "results.md")), end="")
    except (UserError, FileNotFoundError) as err:
        sys.exit(f"run_ablations.py: error: {err}")


if __name__ == "__main__":
    app.run(main)
