"""Running a task: the one driver (driver), the plan and the checks before any work
(preflight, with checkpoint_checks, run_lock, run_record, memory_check), the training
loop and its optimizers (training, optimization), devices (distribute, host_memory), the
output folder (output_folder, its one owner; selection) and evaluation over data
(eval_outputs)."""
