#!/usr/bin/env python3
"""Obtains the real-text corpus of the pretraining study: Jane Austen's six novels from
Debian's package r-cran-janeaustenr (MIT; the novels are public domain), fetched with
`apt-get download` and unpacked with `dpkg-deb`; nothing else is downloaded.

    python3 data/get_real_text.py --output_dir=data/real_text/austen
    python3 data/get_real_text.py --text_file='my_text/*.txt' --output_dir=my_study  # your own

Writes under --output_dir: corpus/{pretrain,task_train,task_dev}.txt (pretraining input
format), spm.model, source.json (source, license, sha256 of the bytes used, the tasks) and
glue/{SST-2,MRPC,CoLA}/ (the fine-tuning tasks in GLUE's formats; no SST-2 from your own
text). See data/README.md and albert_tf/research/real_text.py.
"""

import json

from albert_tf import cli
from albert_tf.research import real_text

cli.define_flags(real_text.RealTextOptions)


def report(result):
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    cli.main(real_text.RealTextOptions, real_text.build, report)
