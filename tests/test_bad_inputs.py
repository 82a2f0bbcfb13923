"""Bad input to the five entry points (run_pretraining, run_classifier, run_squad, run_race,
create_pretraining_data), one table: every row ends with exit status 1 and one line
`<script>: error: ...` naming the flag, file or field, within seconds, and leaves the output
folder as it was (absent, or exactly its files and bytes).

Most rows run the scripts' command lines in this process through `cli.execute` (what
`cli.main` runs); a few per script run the real scripts as subprocesses to prove the
wiring. TPU rows talk only to a closed port on 127.0.0.1.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest

from albert_tf import cli
from albert_tf.data import create_pretraining_data as cpd
from albert_tf.tasks import classifier, pretraining, race, squad

from classifier_fixtures import DEMO_SPM, glue_config, write_mrpc
from record_fixtures import DEMO_CORPUS, write_demo_pretraining_records

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEMO = os.path.join(ROOT, "data", "demo")
SECONDS = 20  # per in-process row; the slowest build a model (2 cores shared)

ENTRY = {
    "run_pretraining.py": (pretraining.PretrainingOptions, pretraining.run),
    "run_classifier.py": (classifier.ClassifierOptions, classifier.run),
    "run_squad.py": (squad.SquadOptions, squad.run),
    "run_race.py": (race.RaceOptions, race.run),
    "create_pretraining_data.py": (cpd.CreatePretrainingDataOptions, cpd.run),
}
COMMANDS = {"create_pretraining_data.py": ["-m", "albert_tf.data.create_pretraining_data"]}

PRETRAIN = [
    "--input_file={records}",
    "--albert_config_file={config}",
    "--max_seq_length=32",
    "--max_predictions_per_seq=5",
    "--train_batch_size=8",
    "--eval_batch_size=8",
    "--num_train_steps=2",
    "--save_checkpoints_steps=2",
    "--iterations_per_loop=2",
    "--max_eval_steps=1",
]
GLUE = [
    "--task_name=MRPC",
    "--data_dir={glue}",
    "--albert_config_file={config}",
    "--spm_model_file={spm}",
    "--max_seq_length=32",
    "--do_train",
    "--do_eval",
    "--train_batch_size=8",
    "--train_step=2",
    "--save_checkpoints_steps=2",
    "--iterations_per_loop=2",
]
SQUAD = [
    "--albert_config_file={config}",
    "--spm_model_file={spm}",
    "--train_file={squad_train}",
    "--predict_file={squad_dev}",
    "--max_seq_length=64",
    "--doc_stride=24",
    "--max_query_length=16",
    "--train_batch_size=8",
    "--do_train",
    "--do_predict",
]
RACE = [
    "--data_dir={race}",
    "--albert_config_file={config}",
    "--spm_model_file={spm}",
    "--max_seq_length=48",
    "--max_qa_length=16",
    "--train_batch_size=8",
    "--train_step=2",
]
CPD = [
    "--input_file={corpus}",
    "--output_file={out}/train.tfrecord",
    "--spm_model_file={spm}",
    "--max_seq_length=32",
    "--max_predictions_per_seq=5",
    "--dupe_factor=1",
    "--num_workers=1",
]
BASE = {
    "run_pretraining.py": PRETRAIN,
    "run_classifier.py": GLUE,
    "run_squad.py": SQUAD,
    "run_race.py": RACE,
    "create_pretraining_data.py": CPD,
}


@dataclasses.dataclass
class Row:
    """One bad command line: the script's base flags with `change` (a flag without "=" in
    `drop` removes it), and the text its error line must hold."""

    name: str
    script: str
    change: tuple = ()
    expect: str = ""
    drop: tuple = ()
    # kept: a folder with one file; absent; read_only: an empty folder that refuses new
    # files; or a fixture folder's name
    output: str = "kept"
    subprocess: bool = False


def _flag(arg):
    return arg.split("=", 1)[0]


ROWS = [
    # --- run_pretraining.py: flags ----------------------------------------------------
    Row(
        "gradient_accumulation_0",
        "run_pretraining.py",
        ("--gradient_accumulation_steps=0",),
        "--gradient_accumulation_steps=0: expected an integer >= 1",
    ),
    Row(
        "train_batch_negative",
        "run_pretraining.py",
        ("--train_batch_size=-8",),
        "--train_batch_size=-8: expected an integer >= 1",
        output="absent",
    ),
    Row(
        "save_checkpoints_0",
        "run_pretraining.py",
        ("--save_checkpoints_steps=0",),
        "--save_checkpoints_steps=0: expected an integer >= 1",
    ),
    Row(
        "learning_rate_negative",
        "run_pretraining.py",
        ("--learning_rate=-0.1",),
        "--learning_rate=-0.1: expected a number >= 0.0",
    ),
    Row(
        "accumulation_does_not_divide_batch",
        "run_pretraining.py",
        ("--gradient_accumulation_steps=3",),
        "--train_batch_size=8: expected a multiple of the 1 replicas x 3 accumulation steps",
    ),
    Row(
        "max_seq_length_past_positions",
        "run_pretraining.py",
        ("--max_seq_length=100",),
        "--max_seq_length=100 exceeds the config's max_position_embeddings=64",
    ),
    Row(
        "flag_not_a_number",
        "run_pretraining.py",
        ("--num_train_steps=ten",),
        "--num_train_steps=ten",
    ),
    Row("unknown_flag", "run_pretraining.py", ("--bogus_flag=1",), "bogus_flag"),
    Row(
        "input_without_config",
        "run_pretraining.py",
        drop=("--albert_config_file",),
        expect="--albert_config_file is required with --input_file",
    ),
    Row(
        "output_dir_is_a_file",
        "run_pretraining.py",
        expect="--output_dir={file_output}: expected a folder, found a file",
        output="file_output",
    ),
    Row(
        "output_dir_read_only",
        "run_pretraining.py",
        expect="--output_dir={out}: cannot write in {out}: ",
        output="read_only",
    ),
    # --- run_pretraining.py: TFRecords ------------------------------------------------
    Row(
        "garbage_tfrecord",
        "run_pretraining.py",
        ("--input_file={garbage}",),
        "--input_file {garbage}: not a readable TFRecord file",
    ),
    Row(
        "empty_tfrecord",
        "run_pretraining.py",
        ("--input_file={empty_records}",),
        "--input_file {empty_records}: the file holds no record",
        output="absent",
    ),
    Row(
        "missing_tfrecord",
        "run_pretraining.py",
        ("--input_file={tmp}/nothing-*.tfrecord",),
        "--input_file",
    ),
    Row(
        "records_of_other_length",
        "run_pretraining.py",
        ("--max_seq_length=16",),
        "feature 'input_ids' of the first record has 32 int64 values, expected 16",
    ),
    Row(
        "records_of_other_names",
        "run_pretraining.py",
        ("--input_file={other_records}",),
        "the first record has no feature 'input_ids'",
    ),
    Row(
        "ids_past_the_config_vocabulary",
        "run_pretraining.py",
        ("--albert_config_file={config_small_vocab}",),
        "expected values below 8 (vocab_size of --albert_config_file={config_small_vocab})",
    ),
    Row(
        "empty_eval_file",
        "run_pretraining.py",
        ("--do_eval", "--eval_file={empty_records}"),
        "--eval_file {empty_records}: the file holds no record",
    ),
    # --- run_pretraining.py: configs --------------------------------------------------
    Row(
        "config_without_hidden_size",
        "run_pretraining.py",
        ("--albert_config_file={config_no_hidden}",),
        "hidden_size",
    ),
    Row(
        "more_groups_than_layers",
        "run_pretraining.py",
        ("--albert_config_file={config_groups}",),
        "num_hidden_groups",
    ),
    Row(
        "hidden_act_null",
        "run_pretraining.py",
        ("--albert_config_file={config_act_null}",),
        "hidden_act",
    ),
    Row(
        "initializer_range_negative",
        "run_pretraining.py",
        ("--albert_config_file={config_init_range}",),
        "initializer_range",
    ),
    Row(
        "dropout_as_string",
        "run_pretraining.py",
        ("--albert_config_file={config_dropout_str}",),
        "hidden_dropout_prob",
    ),
    Row(
        "records_cut_after_the_first",
        "run_pretraining.py",
        ("--input_file={cut_records}",),
        "a TFRecord file of --input_file={cut_records} is damaged (truncated record at",
    ),
    Row(
        "one_token_type_for_sop_records",
        "run_pretraining.py",
        ("--albert_config_file={config_one_token_type}",),
        "feature 'segment_ids' of the first record holds 1, expected values below 1 "
        "(type_vocab_size of --albert_config_file={config_one_token_type})",
    ),
    Row(
        "one_token_type_for_sentence_pairs",
        "run_classifier.py",
        ("--albert_config_file={config_one_token_type}",),
        "type_vocab_size=1 of {config_one_token_type}, but the task's features use segment "
        "ids 0 to 1 (sentence pairs): expected type_vocab_size >= 2",
    ),
    Row(
        "config_not_json",
        "run_pretraining.py",
        ("--albert_config_file={garbage}",),
        "--albert_config_file={garbage}",
    ),
    # --- run_pretraining.py: checkpoints ----------------------------------------------
    Row(
        "missing_init_checkpoint",
        "run_pretraining.py",
        ("--init_checkpoint={tmp}/nothing/model.ckpt-1",),
        "--init_checkpoint={tmp}/nothing/model.ckpt-1: no checkpoint at",
    ),
    Row(
        "truncated_init_checkpoint",
        "run_pretraining.py",
        ("--init_checkpoint={truncated_ckpt}",),
        "{truncated_ckpt}.data-00000-of-00001: truncated",
    ),
    Row(
        "text_file_as_index",
        "run_pretraining.py",
        ("--init_checkpoint={text_ckpt}",),
        "{text_ckpt}.index: not a readable TensorFlow checkpoint index",
        output="absent",
    ),
    Row(
        "init_checkpoint_of_another_shape",
        "run_pretraining.py",
        ("--init_checkpoint={narrow_ckpt}",),
        "--init_checkpoint={narrow_ckpt}: nothing loaded; the checkpoint cannot fill this model",
    ),
    Row(
        "folder_of_another_config",
        "run_pretraining.py",
        expect="albert_config.json: the checkpoints in {out} were trained with this config, "
        "which differs from --albert_config_file={config} (hidden_size: 16 vs 32",
        output="narrow_pretraining_folder",
    ),
    Row(
        "tpu_closed_port",
        "run_pretraining.py",
        ("--use_tpu", "--tpu_name=grpc://127.0.0.1:{closed_port}", "--tpu_timeout_s=3"),
        "127.0.0.1:{closed_port}",
        subprocess=True,
    ),
    # --- run_classifier.py ------------------------------------------------------------
    Row(
        "unknown_task",
        "run_classifier.py",
        ("--task_name=foo",),
        "--task_name='foo' is not a known task",
        subprocess=True,
    ),
    Row(
        "export_dir_read_only",
        "run_classifier.py",
        ("--export_dir={read_only_export}",),
        "--export_dir={read_only_export}: cannot write in ",
        subprocess=True,
    ),
    Row(
        "empty_dev_tsv",
        "run_classifier.py",
        ("--data_dir={glue_empty_dev}",),
        "--do_eval: {glue_empty_dev}/MRPC/dev.tsv holds no example",
    ),
    Row(
        "empty_test_tsv",
        "run_classifier.py",
        ("--data_dir={glue_empty_test}", "--do_predict"),
        "--do_predict: {glue_empty_test}/MRPC/test.tsv holds no example",
        output="absent",
    ),
    Row(
        "unknown_label",
        "run_classifier.py",
        ("--data_dir={glue_bad_label}",),
        "{glue_bad_label}/MRPC/train.tsv, line 3, column 1: unknown label '7'",
    ),
    Row(
        "invalid_utf8_tsv",
        "run_classifier.py",
        ("--data_dir={glue_bad_utf8}",),
        "{glue_bad_utf8}/MRPC/dev.tsv, line 2, byte column",
    ),
    Row(
        "config_vocabulary_smaller_than_spm",
        "run_classifier.py",
        ("--albert_config_file={config_small_vocab}",),
        "--spm_model_file={spm} has",
    ),
    Row(
        "spm_vocab_as_vocab_file",
        "run_classifier.py",
        ("--vocab_file={spm_vocab}",),
        "{spm_vocab}: a SentencePiece .vocab file",
        drop=("--spm_model_file",),
    ),
    Row(
        "missing_data_dir",
        "run_classifier.py",
        ("--data_dir={tmp}/no_glue",),
        "--data_dir={tmp}/no_glue: folder not found",
    ),
    Row(
        "nothing_to_do",
        "run_classifier.py",
        expect="at least one of --do_train, --do_eval, --do_predict or --export_dir",
        drop=("--do_train", "--do_eval"),
    ),
    Row(
        "max_seq_length_2",
        "run_classifier.py",
        ("--max_seq_length=2",),
        "--max_seq_length=2: expected an integer >= 3",
    ),
    Row(
        "classifier_missing_init_checkpoint",
        "run_classifier.py",
        ("--init_checkpoint={tmp}/nothing/model.ckpt-1",),
        "--init_checkpoint={tmp}/nothing/model.ckpt-1",
    ),
    Row(
        "classifier_folder_of_another_config",
        "run_classifier.py",
        expect="--output_dir={out}: its checkpoints do not fit this model",
        output="narrow_classifier_folder",
    ),
    Row(
        "classifier_folder_of_another_task",
        "run_classifier.py",
        expect="--output_dir={out}: holds a run for task_name=sst-2 ({out}/task.json), this "
        "run is for task_name=mrpc; expected the same task, or another --output_dir",
        output="sst2_classifier_folder",
    ),
    Row(
        "classifier_eval_without_weights",
        "run_classifier.py",
        expect="--do_eval has nothing to evaluate with: no --init_checkpoint",
        drop=("--do_train",),
        output="absent",
    ),
    # --- run_squad.py -----------------------------------------------------------------
    Row(
        "predict_file_without_question",
        "run_squad.py",
        ("--predict_file={squad_no_question}",),
        "--predict_file={squad_no_question}: holds no question",
    ),
    Row(
        "train_without_train_file",
        "run_squad.py",
        drop=("--train_file",),
        expect="--do_train needs --train_file",
        subprocess=True,
    ),
    Row(
        "malformed_squad_json",
        "run_squad.py",
        ("--train_file={squad_no_question_field}",),
        "has no 'question' field",
    ),
    Row(
        "missing_squad_file",
        "run_squad.py",
        ("--predict_file={tmp}/nothing.json",),
        "--predict_file={tmp}/nothing.json: file not found",
        output="absent",
    ),
    Row(
        "v2_data_without_flag",
        "run_squad.py",
        ("--train_file={squad_v2}",),
        "pass --version_2_with_negative",
    ),
    Row(
        "doc_stride_0",
        "run_squad.py",
        ("--doc_stride=0",),
        "--doc_stride=0: expected an integer >= 1",
    ),
    Row(
        "no_training_epochs",
        "run_squad.py",
        ("--num_train_epochs=0",),
        "--num_train_epochs must be > 0",
    ),
    Row(
        "squad_json_not_utf8",
        "run_squad.py",
        ("--predict_file={squad_bad_utf8}",),
        "--predict_file={squad_bad_utf8}: not UTF-8 (byte 0xff at offset ",
    ),
    Row(
        "squad_train_file_is_a_directory",
        "run_squad.py",
        ("--train_file={tmp}",),
        "--train_file={tmp}: a folder; expected a file",
        output="absent",
    ),
    Row(
        "squad_v2_predict_file_without_flag",
        "run_squad.py",
        ("--predict_file={squad_v2}",),
        "--predict_file={squad_v2} holds unanswerable questions (id ",
    ),
    Row(
        "squad_predict_question_without_answers",
        "run_squad.py",
        ("--predict_file={squad_no_answer}",),
        "--predict_file={squad_no_answer} holds unanswerable questions (id q_unanswered: "
        "no answers), i.e. SQuAD v2.0 data: pass --version_2_with_negative",
    ),
    Row(
        "squad_is_impossible_string",
        "run_squad.py",
        ("--train_file={squad_impossible_str}", "--version_2_with_negative"),
        "--train_file={squad_impossible_str}: data[0].paragraphs[0].qas[0] (id q_false): "
        "is_impossible is str, expected bool (true or false)",
    ),
    Row(
        "squad_duplicate_question_id",
        "run_squad.py",
        ("--predict_file={squad_dup_id}",),
        "--predict_file={squad_dup_id}: data[0].paragraphs[0].qas[1] repeats the id "
        "q_twice of data[0].paragraphs[0].qas[0]",
    ),
    Row(
        "squad_predict_without_weights",
        "run_squad.py",
        expect="--do_predict has nothing to predict with: no --init_checkpoint and no "
        "checkpoint (model.ckpt-best, model.ckpt-<step> or ckpt-<step>) in --output_dir={out}",
        drop=("--do_train", "--train_file"),
    ),
    # --- run_race.py ------------------------------------------------------------------
    Row(
        "race_without_weights",
        "run_race.py",
        ("--do_train=false", "--do_predict"),
        "--do_eval and --do_predict have nothing to evaluate or predict with",
        output="absent",
    ),
    Row(
        "race_split_without_files",
        "run_race.py",
        ("--data_dir={race_empty_dev}",),
        "--data_dir={race_empty_dev}: RACE/dev/{{middle,high}}/ holds no question",
        subprocess=True,
    ),
    Row("race_other_task", "run_race.py", ("--task_name=mnli",), "--task_name='mnli'"),
    Row(
        "race_without_race_folder",
        "run_race.py",
        ("--data_dir={tmp}",),
        "--data_dir={tmp}: no RACE folder",
    ),
    Row(
        "race_invalid_json",
        "run_race.py",
        ("--data_dir={race_bad_json}",),
        "{race_bad_json}/RACE/train/high/all.txt:1: invalid JSON",
        output="absent",
    ),
    Row(
        "race_question_longer_than_sequence",
        "run_race.py",
        ("--max_qa_length=45",),
        "--max_seq_length=48 must exceed --max_qa_length=45 + 3",
    ),
    Row(
        "race_dropout_1",
        "run_race.py",
        ("--dropout_prob=1.0",),
        "--dropout_prob=1.0: expected a number in [0.0, 1.0)",
    ),
    Row(
        "race_invalid_utf8",
        "run_race.py",
        ("--data_dir={race_bad_utf8}",),
        "{race_bad_utf8}/RACE/train/high/all.txt:2: invalid UTF-8 byte b'\\xff' (byte column",
        output="absent",
    ),
    Row(
        "race_options_as_string",
        "run_race.py",
        ("--data_dir={race_options_str}",),
        "{race_options_str}/RACE/train/high/all.txt:1: 'options'[0] is str, "
        "expected a list of 4 strings",
    ),
    Row(
        "race_line_is_json_array",
        "run_race.py",
        ("--data_dir={race_json_array}",),
        "{race_json_array}/RACE/train/high/all.txt:1: expected a JSON object",
    ),
    Row(
        "race_all_txt_is_a_directory",
        "run_race.py",
        ("--data_dir={race_all_txt_dir}",),
        "{race_all_txt_dir}/RACE/train/high/all.txt: a directory where a file was expected",
    ),
    # --- create_pretraining_data.py ---------------------------------------------------
    Row(
        "missing_corpus",
        "create_pretraining_data.py",
        ("--input_file={tmp}/nothing.txt",),
        "--input_file: file '{tmp}/nothing.txt' does not exist",
        subprocess=True,
    ),
    Row(
        "bad_utf8_line",
        "create_pretraining_data.py",
        ("--input_file={corpus_bad_utf8}",),
        "{corpus_bad_utf8}:2",
        subprocess=True,
    ),
    Row(
        "corpus_without_instance",
        "create_pretraining_data.py",
        ("--input_file={corpus_blank}",),
        "input file '{corpus_blank}' contains no documents",
    ),
    Row(
        "masked_lm_prob_1.5",
        "create_pretraining_data.py",
        ("--masked_lm_prob=1.5",),
        "--masked_lm_prob=1.5: expected a number in [0.0, 1.0]",
    ),
    Row(
        "permutation",
        "create_pretraining_data.py",
        ("--do_permutation",),
        "--do_permutation is not supported",
    ),
    Row(
        "missing_spm_model",
        "create_pretraining_data.py",
        ("--spm_model_file={tmp}/nothing.model",),
        "{tmp}/nothing.model",
    ),
    Row(
        "sequence_of_4",
        "create_pretraining_data.py",
        ("--max_seq_length=4",),
        "max_seq_length",
    ),
    Row(
        "output_file_in_read_only_folder",
        "create_pretraining_data.py",
        expect="--output_file={out}/train.tfrecord: cannot write in {out}: ",
        output="read_only",
    ),
    # --- reliability, second round (issue 38): an input is never an output ------------
    Row(
        "output_file_is_the_corpus",
        "create_pretraining_data.py",
        ("--input_file={out}/notes.txt", "--output_file={out}/notes.txt"),
        "--output_file={out}/notes.txt is an input of this run (--input_file=",
        subprocess=True,
    ),
    Row(
        "output_file_not_ours",
        "create_pretraining_data.py",
        ("--output_file={out}/notes.txt",),
        "--output_file={out}/notes.txt: exists and is not this run's output",
    ),
    Row(
        "race_train_file_is_an_input",
        "run_race.py",
        ("--data_dir={race_copy}", "--train_file={race_copy}/RACE/train/high/all.txt"),
        "--train_file={race_copy}/RACE/train/high/all.txt is an input of this run (--data_dir=",
    ),
    Row(
        "race_eval_file_not_ours",
        "run_race.py",
        ("--do_eval", "--eval_file={out}/notes.txt"),
        "--eval_file={out}/notes.txt: exists and is not this run's output",
    ),
    Row(
        "race_train_file_a_folder",
        "run_race.py",
        ("--train_file={tmp}",),
        "--train_file={tmp}: a folder; expected the path of the TFRecord file",
    ),
    Row(
        "squad_feature_file_is_the_json",
        "run_squad.py",
        ("--train_feature_file={squad_train}",),
        "--train_feature_file={squad_train} is an input of this run (--train_file=",
    ),
    Row(
        "export_dir_is_the_data_dir",
        "run_classifier.py",
        ("--export_dir={glue}",),
        "--export_dir={glue} is an input of this run (--data_dir={glue})",
    ),
    Row(
        "export_dir_holds_user_files",
        "run_classifier.py",
        ("--export_dir={user_folder}",),
        "--export_dir={user_folder}: holds files this program did not write (notes.txt, sub, "
        "sub/results.csv)",
    ),
    Row(
        "export_dir_is_a_link",
        "run_classifier.py",
        ("--export_dir={linked_folder}",),
        "--export_dir={linked_folder}: a symbolic link (to {user_folder})",
    ),
    Row(
        "export_dir_locked_by_a_running_process",
        "run_classifier.py",
        ("--export_dir={locked_folder}",),
        "--export_dir={locked_folder}: another run writes in it (process {live_pid} ",
    ),
    Row(
        "squad_export_dir_holds_user_files",
        "run_squad.py",
        ("--export_dir={user_folder}",),
        "--export_dir={user_folder}: holds files this program did not write",
    ),
    Row(
        "output_dir_is_the_release_folder",
        "run_classifier.py",
        ("--init_checkpoint={out}",),
        "--init_checkpoint={out}: {out}/model.ckpt-best lies in --output_dir={out}, where this "
        "run writes checkpoints of that name",
        output="release_folder",
    ),
    # --- one writer per folder; resume only what fits ---------------------------------
    Row(
        "output_dir_locked_by_a_running_process",
        "run_pretraining.py",
        expect="another run writes in it (process {live_pid} on ",
        output="locked_folder",
    ),
    Row(
        "resume_with_another_input_file",
        "run_pretraining.py",
        ("--input_file={records_copy}",),
        "--input_file={records_copy}: the checkpoints in --output_dir={out} were trained "
        "with --input_file={records}",
        output="trained_pretraining_folder",
    ),
    Row(
        "resume_with_another_batch_size",
        "run_pretraining.py",
        ("--train_batch_size=16", "--num_train_steps=4"),
        "--train_batch_size=16: the checkpoints in --output_dir={out} were trained with "
        "--train_batch_size=8",
        output="trained_pretraining_folder",
    ),
    Row(
        "resume_with_another_sequence_length",
        "run_classifier.py",
        ("--max_seq_length=48", "--train_step=4"),
        "--max_seq_length=48: the checkpoints in --output_dir={out} were trained with "
        "--max_seq_length=32",
        output="trained_glue_folder",
    ),
    Row(
        "resume_ignores_an_init_checkpoint_that_does_not_fit",
        "run_pretraining.py",
        ("--init_checkpoint={narrow_ckpt}", "--num_train_steps=4"),
        "--init_checkpoint={narrow_ckpt}: does not fit this model",
        output="trained_pretraining_folder",
    ),
    Row(
        "init_checkpoint_config_disagrees",
        "run_classifier.py",
        ("--init_checkpoint={init_l2}", "--albert_config_file={config_l4}"),
        "--init_checkpoint={init_l2}: its albert_config.json ({init_l2}/albert_config.json) "
        "describes another network than --albert_config_file={config_l4} "
        "(num_hidden_layers=2 vs 4)",
    ),
    # --- damaged checkpoints --------------------------------------------------------
    Row(
        "output_checkpoint_data_truncated",
        "run_pretraining.py",
        ("--num_train_steps=4",),
        "--output_dir={out}: checkpoint ",
        output="truncated_data_folder",
    ),
    Row(
        "output_checkpoint_index_truncated",
        "run_pretraining.py",
        ("--num_train_steps=4",),
        "not a readable TensorFlow checkpoint index",
        output="truncated_index_folder",
    ),
    Row(
        "output_checkpoint_bytes_flipped",
        "run_pretraining.py",
        ("--num_train_steps=4",),
        "a checkpoint of --output_dir={out} is damaged (",
        output="flipped_folder",
    ),
    Row(
        "init_checkpoint_bytes_flipped",
        "run_classifier.py",
        ("--init_checkpoint={flipped_ckpt}",),
        "--init_checkpoint={flipped_ckpt}: damaged, nothing loaded (",
        output="absent",
    ),
    # --- resources ------------------------------------------------------------------
    Row(
        "model_larger_than_memory",
        "run_pretraining.py",
        ("--albert_config_file={config_huge}", "--max_seq_length=32"),
        "this machine has ",
        output="absent",
    ),
    # --- foreign weight folders read trusting nothing (issue 43) --------------------
    Row(
        "huggingface_config_disagrees",
        "run_classifier.py",
        ("--init_checkpoint={hf_l2}", "--albert_config_file={config_l4}"),
        "--init_checkpoint={hf_l2}: its config.json ({hf_l2}/config.json) describes another "
        "network than --albert_config_file={config_l4} (num_hidden_layers=2 vs 4)",
    ),
    Row(
        "keras_hub_config_disagrees",
        "run_classifier.py",
        ("--init_checkpoint={keras_hub_l2}", "--albert_config_file={config_l4}"),
        "--init_checkpoint={keras_hub_l2}: its config.json ({keras_hub_l2}/config.json) "
        "describes another network than --albert_config_file={config_l4} (num_hidden_layers",
    ),
    Row(
        "huggingface_int8_tensor",
        "run_classifier.py",
        ("--init_checkpoint={hf_int8}",),
        "--init_checkpoint={hf_int8}: {hf_int8}/model.safetensors: tensor albert.pooler.weight "
        "is int8; expected floating-point weights",
        output="absent",
    ),
    Row(
        "keras_hub_int32_dataset",
        "run_classifier.py",
        ("--init_checkpoint={keras_hub_int32}",),
        "{keras_hub_int32}/model.weights.h5: tensor pooled_dense/0 is int32; expected",
        output="absent",
    ),
    Row(
        "huggingface_index_names_a_parent_file",
        "run_classifier.py",
        ("--init_checkpoint={hf_index_outside}",),
        "--init_checkpoint={hf_index_outside}: {hf_index_outside}/model.safetensors.index.json: "
        "names '../outside.safetensors', which is not a path inside",
    ),
    Row(
        "keras_hub_external_storage",
        "run_classifier.py",
        ("--init_checkpoint={keras_hub_external}",),
        "dataset pooled_dense/0 keeps its data outside the file",
        output="absent",
    ),
    Row(
        "huggingface_config_deeply_nested",
        "run_classifier.py",
        ("--init_checkpoint={hf_nested}",),
        "--init_checkpoint={hf_nested}: {hf_nested}/config.json: JSON nested deeper than 64",
    ),
    # --- inputs that are no regular file, or JSON nested too deep -------------------
    Row(
        "config_is_a_folder",
        "run_classifier.py",
        ("--albert_config_file={tmp}",),
        "--albert_config_file={tmp}: a folder; expected a file",
    ),
    Row(
        "config_is_a_fifo",
        "run_pretraining.py",
        ("--albert_config_file={fifo}",),
        "--albert_config_file={fifo}: not a regular file (a FIFO",
    ),
    Row(
        "config_is_a_symlink_loop",
        "run_classifier.py",
        ("--albert_config_file={symlink_loop}",),
        "--albert_config_file={symlink_loop}: cannot read: a symlink loop",
    ),
    Row(
        "config_deeply_nested",
        "run_classifier.py",
        ("--albert_config_file={config_nested}",),
        "--albert_config_file={config_nested}: {config_nested}: JSON nested deeper than 64",
    ),
    Row(
        "init_checkpoint_is_a_fifo",
        "run_classifier.py",
        ("--init_checkpoint={fifo}",),
        "--init_checkpoint={fifo}: no checkpoint at",
    ),
    Row(
        "init_checkpoint_is_a_symlink_loop",
        "run_classifier.py",
        ("--init_checkpoint={symlink_loop}",),
        "--init_checkpoint={symlink_loop}: '{symlink_loop}' is a symlink loop",
    ),
    Row(
        "output_dir_is_a_fifo",
        "run_classifier.py",
        expect="--output_dir={fifo}: a FIFO, socket or device; expected a folder",
        output="fifo",
    ),
    Row(
        "output_dir_is_a_symlink_loop",
        "run_pretraining.py",
        expect="--output_dir={symlink_loop}: a symlink loop; expected a folder",
        output="symlink_loop",
    ),
    Row(
        "output_dir_is_a_link_to_nothing",
        "run_squad.py",
        expect="--output_dir={dangling_link}: a symlink to nothing (",
        output="dangling_link",
    ),
    Row(
        "data_dir_is_a_fifo",
        "run_classifier.py",
        ("--data_dir={fifo}",),
        "--data_dir={fifo}: a FIFO, socket or device; expected a folder",
    ),
    Row(
        "race_data_dir_is_a_symlink_loop",
        "run_race.py",
        ("--data_dir={symlink_loop}",),
        "--data_dir={symlink_loop}: a symlink loop; expected a folder",
    ),
    Row(
        "vocab_file_is_a_fifo",
        "run_classifier.py",
        ("--vocab_file={fifo}",),
        "--vocab_file={fifo}: not a regular file",
        drop=("--spm_model_file",),
    ),
    Row(
        "spm_model_is_a_folder",
        "run_classifier.py",
        ("--spm_model_file={tmp}",),
        "--spm_model_file={tmp}: a folder; expected a file",
    ),
    Row(
        "cpd_spm_model_is_a_fifo",
        "create_pretraining_data.py",
        ("--spm_model_file={fifo}",),
        "--spm_model_file={fifo}: not a regular file",
    ),
    Row(
        "squad_predict_file_is_a_fifo",
        "run_squad.py",
        ("--predict_file={fifo}",),
        "--predict_file={fifo}: not a regular file",
    ),
    Row(
        "squad_train_file_deeply_nested",
        "run_squad.py",
        ("--train_file={squad_nested}",),
        "{squad_nested}: JSON nested too deeply",
    ),
    Row(
        "race_line_deeply_nested",
        "run_race.py",
        ("--data_dir={race_nested}",),
        "{race_nested}/RACE/train/high/all.txt:{race_nested_line}: JSON nested too deeply",
    ),
]


def _write_json(path, value):
    with open(path, "w") as f:
        json.dump(value, f)
    return str(path)


def _closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed once the socket is


def _glue_copy(root, name, split=None, text=None, data=None):
    folder = write_mrpc(str(root / name))
    if split is not None:
        path = os.path.join(folder, "MRPC", f"{split}.tsv")
        if data is not None:
            with open(path, "wb") as f:
                f.write(data)
        else:
            with open(path, "w") as f:
                f.write(text)
    return folder


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    """Every input the rows name, good and bad."""
    import tensorflow as tf

    from albert_tf.model.modeling import AlbertModel, AlbertPretrainer
    from albert_tf.weights import checkpoints

    root = tmp_path_factory.mktemp("bad_inputs")
    p = {"tmp": str(root), "spm": DEMO_SPM, "spm_vocab": os.path.join(DEMO, "spm.vocab")}
    config = glue_config()
    p["config"] = str(root / "albert_config.json")
    config.to_json_file(p["config"])
    good = config.to_dict()
    for name, change in {
        "config_small_vocab": {"vocab_size": 8},
        "config_groups": {"num_hidden_groups": 3},
        "config_act_null": {"hidden_act": None},
        "config_init_range": {"initializer_range": -1},
        "config_dropout_str": {"hidden_dropout_prob": "0.1"},
        "config_one_token_type": {"type_vocab_size": 1},
    }.items():
        p[name] = _write_json(root / f"{name}.json", {**good, **change})
    p["config_no_hidden"] = _write_json(
        root / "config_no_hidden.json", {k: v for k, v in good.items() if k != "hidden_size"}
    )

    # Pretraining records (and bad ones).
    p["corpus"] = DEMO_CORPUS
    p["records"] = str(root / "train.tfrecord")
    write_demo_pretraining_records(p["records"], DEMO_SPM)
    with open(p["records"], "rb") as f:
        data = f.read()
    first = 8 + 4 + int.from_bytes(data[:8], "little") + 4  # length, its CRC, data, CRC
    p["cut_records"] = str(root / "cut.tfrecord")  # a copy cut inside its second record
    with open(p["cut_records"], "wb") as f:
        f.write(data[: first + 20])
    p["empty_records"] = str(root / "empty.tfrecord")
    open(p["empty_records"], "wb").close()
    p["garbage"] = str(root / "garbage.tfrecord")
    with open(p["garbage"], "wb") as f:
        f.write(os.urandom(200))
    p["other_records"] = str(root / "other.tfrecord")
    with tf.io.TFRecordWriter(p["other_records"]) as writer:
        feature = tf.train.Feature(int64_list=tf.train.Int64List(value=[1, 2, 3]))
        example = tf.train.Example(features=tf.train.Features(feature={"token_ids": feature}))
        writer.write(example.SerializeToString())

    # Checkpoints: truncated, a text file as the index, another hidden size.
    model = AlbertModel(config)
    model.build()
    good_ckpt = checkpoints.save_original_checkpoint(model, str(root / "good" / "model.ckpt"))
    p["truncated_ckpt"] = str(root / "truncated" / "model.ckpt")
    os.makedirs(os.path.dirname(p["truncated_ckpt"]))
    shutil.copy(good_ckpt + ".index", p["truncated_ckpt"] + ".index")
    with open(good_ckpt + ".data-00000-of-00001", "rb") as f:
        data = f.read()
    with open(p["truncated_ckpt"] + ".data-00000-of-00001", "wb") as f:
        f.write(data[: len(data) // 2])
    p["text_ckpt"] = str(root / "text" / "x")
    os.makedirs(os.path.dirname(p["text_ckpt"]))
    with open(p["text_ckpt"] + ".index", "w") as f:
        f.write("not a checkpoint index\n")
    narrow = config.replace(hidden_size=16)
    narrow_model = AlbertModel(narrow)
    narrow_model.build()
    p["narrow_ckpt"] = checkpoints.save_original_checkpoint(
        narrow_model, str(root / "narrow" / "model.ckpt")
    )
    # Output folders trained with another config.
    folder = root / "narrow_pretraining_folder"
    pretrainer = AlbertPretrainer(narrow)
    pretrainer.build()
    checkpoints.save_original_checkpoint(pretrainer, str(folder / "model.ckpt-2"), global_step=2)
    narrow.to_json_file(str(folder / "albert_config.json"))
    p["narrow_pretraining_folder"] = str(folder)
    folder = root / "narrow_classifier_folder"
    head = classifier.AlbertClassifier(narrow, 2)
    head.build()
    checkpoints.save_original_checkpoint(head, str(folder / "model.ckpt-2"), global_step=2)
    p["narrow_classifier_folder"] = str(folder)
    folder = root / "sst2_classifier_folder"  # fits an MRPC model: only task.json differs
    head = classifier.AlbertClassifier(config, 2)
    head.build()
    checkpoints.save_original_checkpoint(head, str(folder / "model.ckpt-2"), global_step=2)
    (folder / "task.json").write_text('{\n  "task_name": "sst-2"\n}\n')
    p["sst2_classifier_folder"] = str(folder)
    p["file_output"] = str(root / "file_output")
    with open(p["file_output"], "w") as f:
        f.write("a file\n")

    # GLUE.
    p["glue"] = write_mrpc(str(root / "glue"))
    header = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
    p["glue_empty_dev"] = _glue_copy(root, "glue_empty_dev", "dev", header)
    test_header = "index\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
    p["glue_empty_test"] = _glue_copy(root, "glue_empty_test", "test", test_header)
    rows = header + "1\t1\t2\ta b\tc d\n" + "7\t3\t4\ta b\tc d\n" + "0\t5\t6\ta b\tc d\n" * 8
    p["glue_bad_label"] = _glue_copy(root, "glue_bad_label", "train", rows)
    p["glue_bad_utf8"] = _glue_copy(
        root, "glue_bad_utf8", "dev", data=header.encode() + b"1\t1\t2\ta \xff b\tc\n"
    )

    # SQuAD.
    with open(os.path.join(DEMO, "squad", "train-v1.1.json")) as f:
        document = json.load(f)
    document["data"] = document["data"][:1]
    p["squad_train"] = _write_json(root / "train-v1.1.json", document)
    p["squad_dev"] = p["squad_train"]
    with open(os.path.join(DEMO, "squad", "train-v2.0.json")) as f:
        v2 = json.load(f)
    v2["data"] = v2["data"][:2]
    p["squad_v2"] = _write_json(root / "train-v2.0.json", v2)
    p["squad_no_question"] = _write_json(
        root / "no_question.json", {"version": "1.1", "data": [{"paragraphs": []}]}
    )
    p["squad_no_question_field"] = _write_json(
        root / "no_question_field.json",
        {"data": [{"paragraphs": [{"context": "x", "qas": [{"id": "a"}]}]}]},
    )
    # SQuAD reader checks, each a change of the first question(s) of the v1.1 file: an
    # is_impossible string, a repeated id, no answers (among answered questions), and a
    # byte that is not UTF-8 in the first context.
    for name, change in {
        "squad_impossible_str": {0: {"id": "q_false", "is_impossible": "false"}},
        "squad_dup_id": {0: {"id": "q_twice"}, 1: {"id": "q_twice"}},
        "squad_no_answer": {0: {"id": "q_unanswered", "answers": []}},
    }.items():
        changed = json.loads(json.dumps(document))
        qas = changed["data"][0]["paragraphs"][0]["qas"]
        for index, fields in change.items():
            qas[index].update(fields)
        p[name] = _write_json(root / f"{name}.json", changed)
    p["squad_bad_utf8"] = str(root / "bad_utf8.json")
    with open(p["squad_bad_utf8"], "wb") as f:
        f.write(json.dumps(document).encode().replace(b'"context": "', b'"context": "\xff', 1))

    # RACE.
    p["race"] = DEMO
    empty = root / "race_empty_dev"
    shutil.copytree(os.path.join(DEMO, "RACE"), empty / "RACE")
    for level in ("middle", "high"):
        for name in os.listdir(empty / "RACE" / "dev" / level):
            os.remove(empty / "RACE" / "dev" / level / name)
    p["race_empty_dev"] = str(empty)
    bad = root / "race_bad_json"
    shutil.copytree(os.path.join(DEMO, "RACE"), bad / "RACE")
    (bad / "RACE" / "train" / "high" / "all.txt").write_text('{"article": "x",\n')
    p["race_bad_json"] = str(bad)

    # RACE reader checks: train/high/all.txt with a byte that is not UTF-8, options[0] a
    # string, a JSON array for a line, or a directory.
    with open(os.path.join(DEMO, "RACE", "train", "high", "all.txt"), "rb") as f:
        line = f.readline().rstrip(b"\n")
    record = json.loads(line)
    record["options"][0] = "ABCD"
    for name, data in {
        "race_bad_utf8": line + b"\n" + line.replace(b'"article": "', b'"article": "\xff', 1),
        "race_options_str": json.dumps(record).encode() + b"\n",
        "race_json_array": b"[1, 2, 3]\n" + line + b"\n",
        "race_all_txt_dir": None,
    }.items():
        shutil.copytree(os.path.join(DEMO, "RACE"), root / name / "RACE")
        all_txt = root / name / "RACE" / "train" / "high" / "all.txt"
        if data is None:
            all_txt.unlink()
            all_txt.mkdir()
        else:
            all_txt.write_bytes(data)
        p[name] = str(root / name)

    # create_pretraining_data.
    p["corpus_bad_utf8"] = str(root / "bad_utf8.txt")
    with open(p["corpus_bad_utf8"], "wb") as f:
        f.write(b"a good line\nbad \xff byte\n")
    p["corpus_blank"] = str(root / "blank.txt")
    with open(p["corpus_blank"], "w") as f:
        f.write("\u200b\n\u200b\n\n" * 3)
    p["closed_port"] = str(_closed_port())
    _reliability_inputs(root, p, config, model, good_ckpt)
    _export_inputs(root, p)
    _foreign_and_special_inputs(root, p, config, model)
    return p


def _damage(folder, suffix, how):
    """Damages every file of the latest step's checkpoints in `folder` whose name ends
    like `suffix` (".index" or a data shard), whatever the checkpoint layout."""
    steps = [int(n.split("-")[-1].split(".")[0]) for n in os.listdir(folder) if ".index" in n]
    latest = f"-{max(steps)}."
    for name in os.listdir(folder):
        if latest in name and suffix in name:
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                data = f.read()
            with open(path, "wb") as f:
                f.write(how(data))


def _flip(data):
    middle = len(data) // 2
    return data[:middle] + bytes(b ^ 0xFF for b in data[middle : middle + 64]) + data[middle + 64 :]


def _export_inputs(root, p):
    """The --export_dir folders of the issue-43 rows: the user's files, and a link to
    them; every row leaves their bytes as they are."""
    user = root / "user_folder"
    (user / "sub").mkdir(parents=True)
    (user / "notes.txt").write_bytes(b"kept \x00 bytes\n")
    (user / "sub" / "results.csv").write_bytes(b"a,b\n1,2\n")
    p["user_folder"] = str(user)
    os.symlink(user, root / "linked_folder")
    p["linked_folder"] = str(root / "linked_folder")


def _reliability_inputs(root, p, config, model, good_ckpt):
    """The inputs of the issue-38 rows: a copy of the RACE data, trained output folders
    (and damaged copies), a locked folder, checkpoints with their own config."""
    from albert_tf.weights import checkpoints

    shutil.copytree(os.path.join(DEMO, "RACE"), root / "race_copy" / "RACE")
    p["race_copy"] = str(root / "race_copy")
    p["records_copy"] = str(root / "records_copy.tfrecord")
    shutil.copy(p["records"], p["records_copy"])
    p["live_pid"] = str(os.getppid())
    locked = root / "locked_folder"
    locked.mkdir()
    (locked / ".albert_tf.lock").write_text(
        json.dumps({"host": socket.gethostname(), "pid": os.getppid(), "started": "then"})
    )
    p["locked_folder"] = str(locked)
    p["config_l4"] = _write_json(
        root / "config_l4.json", {**config.to_dict(), "num_hidden_layers": 4}
    )
    p["config_huge"] = _write_json(
        root / "config_huge.json",
        {
            **config.to_dict(),
            "hidden_size": 65536,
            "intermediate_size": 262144,
            "num_attention_heads": 64,
        },
    )
    release = root / "release_folder"
    checkpoints.save_original_checkpoint(model, str(release / "model.ckpt-best"))
    config.to_json_file(str(release / "albert_config.json"))
    shutil.copy(DEMO_SPM, release / "30k-clean.model")
    p["release_folder"] = str(release)
    init = root / "init_l2"
    init.mkdir()
    checkpoints.save_original_checkpoint(model, str(init / "model.ckpt"))
    config.to_json_file(str(init / "albert_config.json"))
    p["init_l2"] = str(init)
    flipped = root / "flipped_init"
    shutil.copytree(os.path.dirname(good_ckpt), flipped)
    for name in os.listdir(flipped):
        if ".data-" in name:
            data = (flipped / name).read_bytes()
            (flipped / name).write_bytes(_flip(data))
    p["flipped_ckpt"] = str(flipped / "model.ckpt")
    # Output folders of two finished 2-step runs, and damaged copies.
    for name, script, base in (
        ("trained_pretraining_folder", "run_pretraining.py", PRETRAIN),
        ("trained_glue_folder", "run_classifier.py", GLUE),
    ):
        out = str(root / name)
        argv = [script, f"--output_dir={out}", *(a.format(**p) for a in base)]
        assert cli.execute(*ENTRY[script], argv) == 0
        p[name] = out
    for name, suffix, how in (
        ("truncated_data_folder", ".data-", lambda d: d[: len(d) // 2]),
        ("truncated_index_folder", ".index", lambda d: d[: len(d) // 2]),
        ("flipped_folder", ".data-", _flip),
    ):
        shutil.copytree(p["trained_pretraining_folder"], root / name)
        _damage(str(root / name), suffix, how)
        p[name] = str(root / name)


def _foreign_and_special_inputs(root, p, config, model):
    """The inputs of the issue-43 reader rows: Hugging Face folders and keras-hub presets
    of the 2-layer model (and crafted copies), a FIFO, a symlink loop, JSON nested too
    deep."""
    import h5py
    import numpy as np
    from safetensors.numpy import load_file, save_file

    from albert_tf.weights import checkpoints, huggingface, keras_hub

    values = {n: v.numpy() for n, v in checkpoints.original_variable_map(model).items()}
    for name, writer in (("hf", huggingface), ("keras_hub", keras_hub)):
        writer.write_folder(str(root / f"{name}_l2"), config, values)
        p[f"{name}_l2"] = str(root / f"{name}_l2")
    for name in ("hf_int8", "hf_index_outside", "hf_nested"):
        shutil.copytree(p["hf_l2"], root / name)
        p[name] = str(root / name)
    weights = root / "hf_int8" / huggingface.WEIGHTS_NAME
    tensors = load_file(str(weights))
    tensors["albert.pooler.weight"] = tensors["albert.pooler.weight"].astype(np.int8)
    save_file(tensors, str(weights))
    (root / "hf_index_outside" / huggingface.WEIGHTS_NAME).rename(root / "outside.safetensors")
    _write_json(
        root / "hf_index_outside" / "model.safetensors.index.json",
        {"weight_map": {name: "../outside.safetensors" for name in tensors}},
    )
    nested = {"a": 0}
    for _ in range(200):
        nested = {"a": nested}
    hf_config = json.loads((root / "hf_nested" / "config.json").read_text())
    _write_json(root / "hf_nested" / "config.json", {**hf_config, "extra": nested})
    for name in ("keras_hub_int32", "keras_hub_external"):
        shutil.copytree(p["keras_hub_l2"], root / name)
        p[name] = str(root / name)
    pooled = "layers/dense_1/vars/0"
    with h5py.File(root / "keras_hub_int32" / keras_hub.WEIGHTS_NAME, "a") as file:
        del file[pooled]
        file[pooled] = np.ones([32, 32], np.int32)
    outside = root / "outside.bin"
    outside.write_bytes(values["bert/pooler/dense/kernel"].tobytes())
    with h5py.File(root / "keras_hub_external" / keras_hub.WEIGHTS_NAME, "a") as file:
        del file[pooled]
        file.create_dataset(pooled, (32, 32), "f4", external=[(str(outside), 0, 4096)])
    p["fifo"] = str(root / "fifo")
    os.mkfifo(p["fifo"])
    p["symlink_loop"] = str(root / "symlink_loop")
    os.symlink(p["symlink_loop"], p["symlink_loop"])
    p["dangling_link"] = str(root / "dangling_link")
    os.symlink(str(root / "nothing_here"), p["dangling_link"])
    p["config_nested"] = _write_json(
        root / "config_nested.json", {**config.to_dict(), "extra": nested}
    )
    # Past Python's own parser limit (a large file is not pre-scanned for depth).
    deep = "[" * 100_000 + "]" * 100_000
    text = (root / "train-v1.1.json").read_text()
    p["squad_nested"] = str(root / "squad_nested.json")
    (root / "squad_nested.json").write_text(text[:-1] + f', "extra": {deep}}}')
    shutil.copytree(os.path.join(DEMO, "RACE"), root / "race_nested" / "RACE")
    all_txt = root / "race_nested" / "RACE" / "train" / "high" / "all.txt"
    lines = all_txt.read_text().splitlines()
    all_txt.write_text("\n".join(lines) + f'\n{{"article": {deep}}}\n')
    p["race_nested"] = str(root / "race_nested")
    p["race_nested_line"] = str(len(lines) + 1)


def _snapshot(folder):
    """None for no folder; else {relative path: bytes (None for a folder)}."""
    if not os.path.lexists(folder):
        return None
    if not os.path.isdir(folder) and not os.path.isfile(folder):  # a FIFO or a symlink loop
        return {"": os.lstat(folder).st_mode}
    if not os.path.isdir(folder):
        with open(folder, "rb") as f:
            return {"": f.read()}
    found = {}
    for parent, dirs, files in os.walk(folder):
        for name in dirs:
            found[os.path.relpath(os.path.join(parent, name), folder)] = None
        for name in files:
            path = os.path.join(parent, name)
            with open(path, "rb") as f:
                found[os.path.relpath(path, folder)] = f.read()
    return found


def _argv(row, fill):
    changed = {_flag(a) for a in row.change}
    base = [a for a in BASE[row.script] if _flag(a) not in changed and _flag(a) not in row.drop]
    args = [a.format(**fill) for a in base + list(row.change)]
    if row.script != "create_pretraining_data.py":
        args.insert(0, "--output_dir={out}".format(**fill))
    return args


def _output(row, paths, tmp_path, request):
    """The row's output folder, set up as the row says."""
    if row.output == "read_only":
        return request.getfixturevalue("read_only_folder")
    if row.output == "absent":
        return str(tmp_path / "out")
    if row.output == "kept":
        out = tmp_path / "out"
        out.mkdir()
        (out / "notes.txt").write_bytes(b"kept \x00 bytes\n")
        return str(out)
    source = paths[row.output]
    if os.path.isdir(source):
        shutil.copytree(source, tmp_path / "out")
        return str(tmp_path / "out")
    return source


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_bad_input_is_one_line_exit_1_and_changes_nothing(row, paths, tmp_path, capsys, request):
    out = _output(row, paths, tmp_path, request)
    fill = {**paths, "out": out}
    if any("{read_only_export}" in arg for arg in row.change):
        fill["read_only_export"] = os.path.join(request.getfixturevalue("read_only_folder"), "x")
    argv = _argv(row, fill)
    before = _snapshot(out)
    user_files = _snapshot(paths["user_folder"])
    start = time.monotonic()
    if row.subprocess:
        command = COMMANDS.get(row.script, [os.path.join(ROOT, row.script)])
        proc = subprocess.run(
            [sys.executable, *command, *argv],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""},
        )
        status, err = proc.returncode, proc.stderr
        lines = [line for line in err.splitlines() if line.startswith(f"{row.script}: ")]
    else:
        options_cls, run = ENTRY[row.script]
        status = cli.execute(options_cls, run, [row.script, *argv])
        err = capsys.readouterr().err
        lines = err.splitlines()
    elapsed = time.monotonic() - start
    assert status == 1, err[-3000:]
    assert len(lines) == 1 and "Traceback" not in err, err[-3000:]
    assert lines[0].startswith(f"{row.script}: error: "), lines
    assert row.expect.format(**fill) in lines[0]
    assert _snapshot(out) == before
    assert _snapshot(paths["user_folder"]) == user_files and user_files["notes.txt"]
    assert elapsed < (120 if row.subprocess else SECONDS), elapsed


def test_the_table_covers_every_entry_point_and_forty_inputs():
    assert len(ROWS) >= 59
    assert {r.script for r in ROWS} == set(ENTRY)
    assert {r.script for r in ROWS if r.subprocess} == set(ENTRY)
