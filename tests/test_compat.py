"""What albert_tf wrote at commit 1d0b4ac still loads and resumes with today's code: the
fixtures in tests/fixtures/compat_1d0b4ac (its README.md says which command wrote each file)
and the outputs that code gave on them (expected.json, expected.npz).

Only what outlives a change of the package's inside is used: the entry scripts' command
lines, run as subprocesses in a copy of the fixture folder with the flags the fixtures
were written with, and TensorFlow's own readers.

- A pretraining folder stopped by SIGTERM at a scheduled save (model.ckpt-4 with
  train_state/state-4, `checkpoint`, run_record.json, albert_config.json, 30k-clean.*),
  and one stopped between saves (its ckpt-5 resume point beside model.ckpt-4): the same
  command resumes each from that step and ends with the weights and optimizer slots of
  the uninterrupted run, bit for bit. (Bit for bit needs the CPU kernels of the machine
  that wrote the fixtures: x86-64 with AVX-512; see the README.)
- The release folder, the encoder SavedModel (as --albert_hub_module_handle), the Hugging
  Face folder and the keras-hub preset start a GLUE run whose dev metrics and test
  probabilities before any training are those recorded.
- A fine-tuning run's output folder: the same command (nothing left to train) writes the
  recorded test predictions from its model.ckpt-best.
- The encoder SavedModel, loaded with tf.saved_model.load, gives the recorded outputs.
"""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "compat_1d0b4ac")
with open(os.path.join(FIXTURE, "expected.json")) as _f:
    EXPECTED = json.load(_f)
TOLERANCE = 1e-6  # float32 rounding of a model of this size (outputs below 10)


@pytest.fixture
def fixture_copy(tmp_path):
    """A copy of the fixture folder whose run_record.json files name the copy's inputs:
    they hold absolute paths, stored with the folder's path as a placeholder."""
    copy = tmp_path / "compat"
    shutil.copytree(FIXTURE, copy, ignore=shutil.ignore_patterns("README.md", "generate.py"))
    in_json = json.dumps(str(copy))[1:-1]
    for record in copy.rglob("run_record.json"):
        text = record.read_text()
        assert EXPECTED["placeholder"] in text, record
        record.write_text(text.replace(EXPECTED["placeholder"], in_json))
    return copy


def run_script(cwd, script, *args):
    """Runs an entry script in `cwd` (where the fixtures' relative paths resolve)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run(
        [sys.executable, os.path.join(ROOT, script), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def checkpoint_values(prefix):
    reader = tf.train.load_checkpoint(str(prefix))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def trained_steps(output_dir):
    """The steps of the `loss` summaries in output_dir/train: the steps this run trained
    (the fixtures keep no event files)."""
    steps = []
    for path in tf.io.gfile.glob(os.path.join(str(output_dir), "train", "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            steps += [event.step for value in event.summary.value if value.tag == "loss"]
    return sorted(steps)


def glue_outputs(output_dir):
    """{"eval": the last block of eval_results.txt, "test_results": test_results.tsv}."""
    blocks = [{}]
    for line in (output_dir / "eval_results.txt").read_text().splitlines():
        if line.startswith("====="):
            blocks.append({})
        elif " = " in line:
            name, value = line.split(" = ", 1)
            blocks[-1][name] = float(value)
    rows = (output_dir / "test_results.tsv").read_text().splitlines()
    return {
        "eval": [block for block in blocks if block][-1],
        "test_results": [[float(p) for p in row.split("\t")] for row in rows if row],
    }


def assert_glue_outputs(got, want):
    assert sorted(got["eval"]) == sorted(want["eval"])
    for name, value in want["eval"].items():
        assert got["eval"][name] == pytest.approx(value, abs=TOLERANCE), name
    np.testing.assert_allclose(got["test_results"], want["test_results"], rtol=0, atol=TOLERANCE)


@pytest.mark.slow
@pytest.mark.parametrize(
    "stopped_at, restored",
    [
        (EXPECTED["stopped_step"], "model.ckpt-{step}.index"),
        (EXPECTED["resume_point_step"], "ckpt-{step}.index"),
    ],
    ids=["at_a_save", "between_saves"],
)
def test_a_stopped_pretraining_folder_resumes_bit_identically(fixture_copy, stopped_at, restored):
    final = EXPECTED["final_step"]
    out = fixture_copy / "pretraining" / f"sigterm_at_step{stopped_at}"
    assert (out / restored.format(step=stopped_at)).exists()
    assert not list(out.glob("train/*"))
    result = run_script(
        fixture_copy,
        "run_pretraining.py",
        f"--output_dir={out.relative_to(fixture_copy)}",
        *EXPECTED["pretrain_flags"],
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert trained_steps(out) == list(range(stopped_at + 1, final + 1))
    assert tf.train.latest_checkpoint(str(out)) == str(out / f"model.ckpt-{final}")
    assert not list(out.glob("ckpt-*"))  # a resume point is replaced by the next save
    got = checkpoint_values(out / f"model.ckpt-{final}")
    straight = os.path.join(FIXTURE, "pretraining", "straight", f"model.ckpt-{final}")
    want = checkpoint_values(straight)
    assert sorted(got) == sorted(want)
    assert any(name.endswith("/adam_m") for name in want) and "global_step" in want
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value, err_msg=name)


@pytest.mark.slow
@pytest.mark.parametrize("weights", sorted(EXPECTED["weights_flags"]))
def test_glue_from_each_weights_format_gives_the_recorded_outputs(fixture_copy, weights):
    """Dev metrics and test probabilities at step 0 (the encoder as written, a fresh
    head drawn from the run's seed)."""
    out = fixture_copy / "glue_out"
    result = run_script(
        fixture_copy,
        "run_classifier.py",
        *EXPECTED["glue_flags"],
        f"--output_dir={out.name}",
        *EXPECTED["weights_flags"][weights],
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert_glue_outputs(glue_outputs(out), EXPECTED["glue_step0"][weights])


@pytest.mark.slow
def test_a_finetuned_glue_folder_predicts_as_recorded(fixture_copy):
    """Its command again: nothing left to train or evaluate; the predictions (removed
    from the copy first) come back from its model.ckpt-best."""
    out = fixture_copy / "glue_finetuned"
    eval_results = (out / "eval_results.txt").read_bytes()
    for name in ("test_results.tsv", "MRPC.tsv"):
        (out / name).unlink()
    result = run_script(
        fixture_copy,
        "run_classifier.py",
        *EXPECTED["glue_flags"],
        f"--output_dir={out.name}",
        *EXPECTED["finetune_flags"],
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert (out / "eval_results.txt").read_bytes() == eval_results
    assert trained_steps(out) == []
    assert_glue_outputs(glue_outputs(out), EXPECTED["glue_finetuned"])


def test_the_encoder_saved_model_gives_the_recorded_outputs():
    arrays = np.load(os.path.join(FIXTURE, "expected.npz"))
    assert sorted(arrays.files) == sorted(EXPECTED["expected_npz"])
    inputs = {k: tf.constant(arrays[k]) for k in ("input_ids", "input_mask", "segment_ids")}
    loaded = tf.saved_model.load(os.path.join(FIXTURE, "encoder_saved_model"))
    assert {"tokens", "sop", "mlm", "tokenization_info"} <= set(loaded.signatures)
    compared = 0
    for signature in ("tokens", "sop", "mlm"):
        args = dict(inputs)
        if signature == "mlm":
            args["mlm_positions"] = tf.constant(arrays["mlm_positions"])
        outputs = loaded.signatures[signature](**args)
        for name, value in outputs.items():
            want = arrays[f"{signature}/{name}"]
            assert value.dtype.as_numpy_dtype == want.dtype, name
            np.testing.assert_allclose(value.numpy(), want, rtol=0, atol=TOLERANCE, err_msg=name)
            compared += 1
    assert compared == len([k for k in arrays.files if "/" in k])
    info = loaded.signatures["tokenization_info"]()
    assert bool(info["do_lower_case"].numpy())
    with open(info["vocab_file"].numpy().decode(), "rb") as f:
        vocab = f.read()
    with open(os.path.join(FIXTURE, "release", "30k-clean.model"), "rb") as f:
        assert vocab == f.read()
