"""Running a task: the one driver (driver), the checks before any work, the training loop
and its optimizers (training, optimization), devices (distribute, host_memory), the output
folder (checkpoint_layout, selection, run_lock, run_record) and evaluation over data
(eval_outputs)."""
