"""albert_tf/run/output_writer.py: the one way an output folder is written and replaced."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys

import pytest
import tensorflow as tf

from albert_tf.errors import UserError
from albert_tf.run import output_writer
from albert_tf.run.output_folder import LOCK_NAME
from albert_tf.run.output_writer import MARKER, check_destination, replace_output

from repo_paths import REPO_ROOT

KIND = "test export"


def _write(path, kind=KIND, files=None, **kwargs):
    """One export of `kind` to `path`: {relative name: text} (default one file)."""
    with replace_output(str(path), kind, flag="--export_path", **kwargs) as tmp:
        for name, text in (files or {"model.bin": "v2"}).items():
            target = os.path.join(tmp, name)
            tf.io.gfile.makedirs(os.path.dirname(target))
            with tf.io.gfile.GFile(target, "w") as f:
                f.write(text)


def _tree(folder):
    """{relative path: bytes} of every file below `folder` (links not followed)."""
    found = {}
    for parent, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(parent, name)
            found[os.path.relpath(path, folder)] = open(path, "rb").read()
    return found


def _user_folder(folder):
    (folder / "sub").mkdir(parents=True)
    (folder / "notes.txt").write_bytes(b"mine \x00\n")
    (folder / "sub" / "results.csv").write_bytes(b"a,b\n1,2\n")
    return _tree(folder)


def _siblings(folder):
    """The names beside `folder` that the writer makes (its temporary and aside names)."""
    return sorted(n for n in os.listdir(folder.parent) if n.startswith(f".{folder.name}."))


def test_a_new_export_holds_its_files_and_a_marker_listing_them(tmp_path):
    out = tmp_path / "a" / "export"
    _write(out, files={"model.bin": "v1", "assets/vocab.txt": "x"})
    assert _tree(out).keys() == {"model.bin", os.path.join("assets", "vocab.txt"), MARKER}
    marker = json.loads((out / MARKER).read_text())
    assert marker == {"kind": KIND, "entries": ["assets", "assets/vocab.txt", "model.bin"]}
    assert _siblings(out) == []


def test_an_earlier_export_of_the_same_kind_is_replaced(tmp_path):
    out = tmp_path / "export"
    _write(out, files={"old.bin": "v1", "sub/old.txt": "v1"})
    _write(out, files={"model.bin": "v2"})
    assert _tree(out) == {"model.bin": b"v2", MARKER: (out / MARKER).read_bytes()}
    assert _siblings(out) == []
    out_empty = tmp_path / "empty"
    out_empty.mkdir()
    _write(out_empty)
    assert (out_empty / "model.bin").read_text() == "v2"


def test_user_files_are_never_replaced(tmp_path):
    out = tmp_path / "export"
    before = _user_folder(out)
    with pytest.raises(UserError) as err:
        _write(out)
    assert str(err.value) == (
        f"--export_path={out}: holds files this program did not write (notes.txt, sub, "
        "sub/results.csv); expected an absent or empty folder, or an earlier output of this "
        f"export ({KIND}), which is replaced as a whole: choose another --export_path"
    )
    assert _tree(out) == before and _siblings(out) == []


def test_an_export_with_a_file_added_or_of_another_kind_is_kept(tmp_path):
    out = tmp_path / "export"
    _write(out, files={"model.bin": "v1"})
    with pytest.raises(
        UserError, match=r"^--export_path=.*: holds an export of another kind \(test export\); "
    ):
        _write(out, kind="other export")
    (out / "notes.txt").write_text("mine")
    before = _tree(out)
    with pytest.raises(UserError, match=r"also holds files it did not write \(notes.txt\)"):
        _write(out)
    assert _tree(out) == before
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match="^--export_path=.*/file: a file; expected a folder"):
        _write(tmp_path / "file")


@pytest.mark.parametrize("marker", ["fifo", "nested", "link", "not a list"])
def test_a_marker_this_module_did_not_write_makes_the_folder_foreign(tmp_path, marker):
    out = tmp_path / "export"
    _write(out, files={"model.bin": "v1"})
    (out / MARKER).unlink()
    if marker == "fifo":  # never opened: reading it would wait for a writer
        os.mkfifo(out / MARKER)
    elif marker == "nested":
        (out / MARKER).write_text('{"entries": ' + "[" * 100000 + "]" * 100000 + "}")
    elif marker == "link":
        (tmp_path / "elsewhere.json").write_text(json.dumps({"kind": KIND, "entries": []}))
        (out / MARKER).symlink_to(tmp_path / "elsewhere.json")
    else:
        (out / MARKER).write_text(json.dumps({"kind": KIND, "entries": "model.bin"}))
    with pytest.raises(UserError, match="holds files this program did not write"):
        _write(out)
    assert (out / "model.bin").read_text() == "v1"


@pytest.mark.parametrize("given", [".", "", "..", "/"])
def test_the_current_folder_and_those_holding_it_are_refused(tmp_path, monkeypatch, given):
    here = tmp_path / "work"
    before = _user_folder(here)
    monkeypatch.chdir(here)
    with pytest.raises(UserError, match=f"^--export_path={given}: .*current"):
        _write(given)
    assert _tree(here) == before and sorted(os.listdir(tmp_path)) == ["work"]


def test_inputs_and_their_folders_are_refused(tmp_path):
    source = tmp_path / "release"
    before = _user_folder(source)
    inputs = {"--albert_directory": [str(source)]}
    for out in (source, tmp_path):
        with pytest.raises(UserError, match=f"^--export_path={out} (is|holds) an input"):
            _write(out, inputs=inputs)
    assert _tree(source) == before


def test_a_folder_a_running_run_holds_is_refused(tmp_path):
    out = tmp_path / "training"
    out.mkdir()
    holder = {"host": socket.gethostname(), "pid": os.getppid(), "started": "t0"}
    (out / LOCK_NAME).write_text(json.dumps(holder))
    with pytest.raises(UserError, match=f"^--export_path={out}: another run writes in it"):
        _write(out)
    assert os.listdir(out) == [LOCK_NAME]


def test_a_symbolic_link_is_never_followed(tmp_path):
    target = tmp_path / "target"
    before = _user_folder(target)
    link = tmp_path / "link"
    link.symlink_to(target)
    with pytest.raises(
        UserError, match=f"^--export_path={link}: a symbolic link \\(to {target}\\)"
    ):
        _write(link)
    assert _tree(target) == before and link.is_symlink()
    # Also to an earlier export: the user names the folder itself.
    _write(tmp_path / "earlier", files={"model.bin": "v1"})
    (tmp_path / "link2").symlink_to(tmp_path / "earlier")
    with pytest.raises(UserError, match="a symbolic link"):
        _write(tmp_path / "link2")
    assert (tmp_path / "earlier" / "model.bin").read_text() == "v1"
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    with pytest.raises(UserError, match=r"\(to nothing: a broken link or a loop\)"):
        _write(tmp_path / "loop")


def test_links_above_the_destination_are_resolved_and_logged(tmp_path, caplog):
    (tmp_path / "real").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "real")
    with caplog.at_level(logging.INFO, logger=output_writer.__name__):
        _write(tmp_path / "alias" / "export")
    assert f"through symbolic links, the folder {tmp_path / 'real' / 'export'}" in caplog.text
    assert (tmp_path / "real" / "export" / "model.bin").read_text() == "v2"


class Stop(Exception):
    pass


def _fail_at(monkeypatch, function, call):
    """Makes output_writer.`function` raise Stop at its `call`-th call (1-based)."""
    original = getattr(output_writer, function)
    calls = []

    def fail(*args):
        calls.append(args)
        if len(calls) == call:
            raise Stop(function)
        return original(*args)

    monkeypatch.setattr(output_writer, function, fail)


@pytest.mark.parametrize(
    "function, call",
    [
        pytest.param("_write_marker", 1, id="marking_the_new"),
        pytest.param("_move", 1, id="moving_the_old_aside"),
        pytest.param("_move", 2, id="moving_the_new_in"),
    ],
)
def test_an_error_at_any_step_leaves_the_earlier_export(tmp_path, monkeypatch, function, call):
    out = tmp_path / "export"
    _write(out, files={"model.bin": "v1"})
    before = _tree(out)
    _fail_at(monkeypatch, function, call)
    with pytest.raises(Stop):
        _write(out)
    assert _tree(out) == before and _siblings(out) == []


# A writer that kills itself (SIGKILL: nothing of it runs after) at one step.
_KILLED = r"""
import os, signal, sys
from albert_tf.run import output_writer
out, function, call = sys.argv[1], sys.argv[2], int(sys.argv[3])
original, calls = getattr(output_writer, function), []
def kill_at(*args):
    calls.append(args)
    if len(calls) == call:
        os.kill(os.getpid(), signal.SIGKILL)
    return original(*args)
setattr(output_writer, function, kill_at)
with output_writer.replace_output(out, "test export", flag="--export_path") as tmp:
    with open(os.path.join(tmp, "model.bin"), "w") as f:
        f.write("v2")
"""


@pytest.mark.parametrize(
    "step, function, call, found",
    [
        pytest.param("new written", "_move", 1, "v1", id="new_written"),
        pytest.param("old moved aside", "_move", 2, "v1", id="old_moved_aside"),
        pytest.param("new moved in", "_remove", 1, "v2", id="new_moved_in"),
    ],
)
def test_a_rerun_after_a_kill_at_any_step_finds_an_export_and_cleans_up(
    tmp_path, step, function, call, found
):
    out = tmp_path / "export"
    _write(out, files={"model.bin": "v1"})
    proc = subprocess.run(
        [sys.executable, "-c", _KILLED, str(out), function, str(call)],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": REPO_ROOT, "TF_CPP_MIN_LOG_LEVEL": "3"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    assert _siblings(out), step  # the kill left something beside the export
    assert check_destination(str(out), KIND, flag="--export_path") == str(out)
    assert (out / "model.bin").read_text() == found and _siblings(out) == []
    _write(out, files={"model.bin": "v3"})
    assert (out / "model.bin").read_text() == "v3" and _siblings(out) == []


@pytest.mark.parametrize("scheme", ["ram", "file"])
def test_object_stores_copy_the_folder_and_replace_an_earlier_export(tmp_path, scheme):
    """ram:// has no folder rename, as gs://: the move copies, the marker last; file://
    paths take the same way (tf.io.gfile treats them as it treats gs://)."""
    bucket = (
        f"ram://output_writer_test/{tmp_path.name}" if scheme == "ram" else f"file://{tmp_path}"
    )
    out = f"{bucket}/export"
    _write(out, files={"old.bin": "v1", "sub/a.txt": "v1"})
    _write(out, files={"model.bin": "v2"})
    found = sorted(
        os.path.join(parent, name)[len(out) + 1 :]
        for parent, _, files in tf.io.gfile.walk(out)
        for name in files
    )
    assert found == [MARKER, "model.bin"]
    assert tf.io.gfile.listdir(bucket) in (["export"], ["export/"])
    with pytest.raises(UserError, match="holds an export of another kind"):
        _write(out, kind="other export")
