"""ALBERT weights in every format this project reads and writes, under the original
release's variable names: original TF1 checkpoints (checkpoints), released model folders
(release), TF-Hub module folders (hub), Hugging Face folders (huggingface) and keras-hub
presets (keras_hub), each with its name table (all of one kind: name_table), the folder
detection of the last two (foreign_folders), and the initial weights a run names, looked up
once (init_checkpoint)."""
