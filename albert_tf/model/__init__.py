"""The ALBERT model in standard TensorFlow ops: the config (config), the embeddings and the
attention-FFN block (layers), the shared groups and pretraining model (modeling), the task
heads (heads) and the pretraining losses (losses). This is what runs on GPUs and TPUs and
what to read or change; it imports nothing else of the package but errors and fileio."""
