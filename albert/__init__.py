"""The original release's module paths, for shell scripts written for it.

The original's README runs its scripts as modules of a package named `albert`
(`python -m albert.run_classifier ...`, `python -m albert.run_squad_v2 ...`). Each module
here runs our entry point for that script with the command line unchanged, so such a
script only has to run from this repository's root (or after `pip install -e .`):

| `python -m albert.<module>` | runs |
|---|---|
| run_pretraining | run_pretraining.py |
| run_classifier | run_classifier.py |
| run_squad_v1 | run_squad.py |
| run_squad_v2 | run_squad.py --version_2_with_negative |
| run_race | run_race.py |
| create_pretraining_data | python -m albert_tf.data.create_pretraining_data |
| export_checkpoints | python -m albert_tf.export --export_format=checkpoint |
| export_to_tfhub | python -m albert_tf.export --export_format=saved_model |

The flags given on the command line come after the ones in the right column, so they
win where both name the same flag; bad input gets the same one error line and exit
status 1 as from our own command.
"""
