"""`python -m albert_tf.export`: albert_tf/export/command.py."""

import sys

from albert_tf.export.command import main

sys.exit(main())
