"""Exports of a model: SavedModels and TFLite for serving (saved_model) and the command
`python -m albert_tf.export` (command), which also writes checkpoints without optimizer
state, Hugging Face folders and keras-hub presets."""
