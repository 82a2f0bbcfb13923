#!/usr/bin/env python3
"""Obtains the real-text corpus of the pretraining study: Jane Austen's six novels from
Debian's package r-cran-janeaustenr (MIT; the novels are public domain), fetched with
`apt-get download` and unpacked with `dpkg-deb`; nothing else is downloaded.

    python3 data/get_real_text.py --output_dir=data/real_text/austen

Writes under --output_dir: corpus/{pretrain,task_train,task_dev}.txt (pretraining input
format), spm.model, source.json (package, license, sha256 of the bytes used) and
glue/{SST-2,MRPC}/ (the fine-tuning tasks in GLUE's formats). See data/README.md and
albert_tf/research/real_text.py.
"""

import json

from albert_tf import cli
from albert_tf.research import real_text

cli.define_flags(real_text.RealTextOptions)


def report(result):
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    cli.main(real_text.RealTextOptions, real_text.build, report)
