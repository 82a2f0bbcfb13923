"""Data generation and input pipelines (pretraining and downstream tasks)."""
