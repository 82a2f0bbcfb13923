"""ALBERT pretraining (masked LM + sentence-order prediction) with LAMB.

The original's flags and defaults, plus --strategy, --gradient_accumulation_steps,
--use_xla, --dtype, --dynamic_masking and --eval_file. With only --output_dir
it runs the demo: builds TFRecords from data/demo, pretrains a tiny ALBERT on
the CPU for a few minutes, evaluates and prints MLM and SOP accuracy.
See docs/pretraining.md.
"""

from albert_tf import cli

cli.prefer_onednn()  # before TensorFlow loads

from albert_tf.tasks import pretraining  # noqa: E402

cli.define_flags(pretraining.PretrainingOptions)


def report(summary):
    before, after = summary["before"], summary["after"]
    if before:
        print(
            f"before training: masked_lm_accuracy = {before['masked_lm_accuracy']:.4f}, "
            f"sentence_order_accuracy = {before['sentence_order_accuracy']:.4f}"
        )
    if after:
        print(f"after {summary['step']} steps:")
        print(f"masked_lm_accuracy = {after['masked_lm_accuracy']:.4f}")
        print(f"sentence_order_accuracy = {after['sentence_order_accuracy']:.4f}")


if __name__ == "__main__":
    cli.main(pretraining.PretrainingOptions, pretraining.run, report)
