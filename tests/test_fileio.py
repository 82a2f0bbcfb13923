"""Atomic result files."""

import os

import pytest
import tensorflow as tf

from albert_tf import fileio
from albert_tf.errors import UserError
from albert_tf.fileio import atomic_write_text


def test_atomic_write_creates_folder_and_leaves_no_temporaries(tmp_path):
    path = tmp_path / "sub" / "out.txt"
    atomic_write_text(path, "a\n")
    atomic_write_text(path, "b\n")
    assert path.read_text() == "b\n"
    assert os.listdir(tmp_path / "sub") == ["out.txt"]


def test_results_get_the_mode_of_any_new_file(tmp_path):
    """Not mkstemp's private 0600: a result file is readable as any file this process
    creates (umask 022 -> 0644, umask 077 -> 0600)."""
    for mask, mode in ((0o022, 0o644), (0o077, 0o600), (0o002, 0o664)):
        previous = os.umask(mask)
        try:
            path = tmp_path / f"out-{mask:o}.txt"
            atomic_write_text(path, "a\n")
        finally:
            os.umask(previous)
        assert path.stat().st_mode & 0o777 == mode, oct(path.stat().st_mode)


def test_failed_write_keeps_old_content(tmp_path):
    path = tmp_path / "out.txt"
    atomic_write_text(path, "old")
    with pytest.raises(TypeError):
        atomic_write_text(path, None)  # not text: fails while writing
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["out.txt"]


def test_atomic_path_renames_on_success_and_cleans_up_on_error(tmp_path):
    target = tmp_path / "sub" / "records.bin"
    with fileio.atomic_path(target) as tmp:
        assert os.path.dirname(tmp) == str(tmp_path / "sub") and tmp != str(target)
        with open(tmp, "wb") as f:
            f.write(b"one")
        assert not target.exists()  # nothing visible before the block ends
    assert target.read_bytes() == b"one"
    with pytest.raises(RuntimeError):
        with fileio.atomic_path(target) as tmp:
            with open(tmp, "wb") as f:
                f.write(b"two, half written")
            raise RuntimeError("crash")
    assert target.read_bytes() == b"one"
    assert os.listdir(tmp_path / "sub") == ["records.bin"]


def test_next_write_removes_the_temporary_of_a_killed_writer(tmp_path):
    """A writer killed inside atomic_path cannot remove its temporary; the next writer of the
    same file does (only when its process is gone, only for that file)."""
    import signal
    import subprocess
    import sys

    target = tmp_path / "eval_results.txt"
    code = (
        "import os, signal, sys\nfrom albert_tf import fileio\n"
        "with fileio.atomic_path(sys.argv[1]) as tmp:\n"
        "    open(tmp, 'w').write('half')\n    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(target)], timeout=60)
    assert proc.returncode == -signal.SIGKILL
    [stale] = os.listdir(tmp_path)
    assert stale.startswith(".eval_results.txt.") and stale.endswith(".tmp")
    tag = fileio.owner_tag()
    others = [
        f".eval_results.txt.{tag.rsplit('-', 1)[0]}-{os.getppid()}-live.tmp",
        f".other.txt.{tag.rsplit('-', 1)[0]}-999999999-x.tmp",
    ]
    for name in others:
        (tmp_path / name).write_text("")
    atomic_write_text(target, "done\n")
    assert sorted(os.listdir(tmp_path)) == sorted(["eval_results.txt", *others])
    assert target.read_text() == "done\n"


# --- check_writable_folder: output flags refused before any work ------------------------
def test_a_writable_folder_passes_and_nothing_is_created(tmp_path):
    fileio.check_writable_folder("output_dir", str(tmp_path))
    fileio.check_writable_folder("output_dir", str(tmp_path / "new" / "deeper"))
    fileio.check_writable_folder("output_dir", f"file://{tmp_path}/new/deeper")
    fileio.check_writable_folder("output_dir", "ram://fileio_check/run")
    assert os.listdir(tmp_path) == []  # neither the probe file nor the missing folders
    assert not tf.io.gfile.exists("ram://fileio_check/run")


def test_a_file_where_a_folder_goes_is_refused(tmp_path):
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(
        UserError, match=r"^--output_dir=\S+a_file: expected a folder, found a file$"
    ):
        fileio.check_writable_folder("output_dir", str(tmp_path / "a_file"))
    above = str(tmp_path / "a_file" / "run")
    with pytest.raises(UserError, match=r"found a file \(\S+a_file\)$"):
        fileio.check_writable_folder("output_dir", above)
    # `folder` checks one place and names the flag's value (an output file's folder).
    with pytest.raises(UserError, match=r"^--output_file=\S+run/x.tfrecord: expected a folder"):
        fileio.check_writable_folder("output_file", above + "/x.tfrecord", above)
    uri = f"file://{tmp_path}/a_file"
    with pytest.raises(
        UserError, match=r"^--output_dir=file://\S+: expected a folder, found a file$"
    ):
        fileio.check_writable_folder("output_dir", uri)


def test_a_read_only_folder_is_refused(read_only_folder):
    for path in (read_only_folder, os.path.join(read_only_folder, "run")):
        with pytest.raises(UserError) as err:
            fileio.check_writable_folder("export_dir", path)
        assert str(err.value) == (
            f"--export_dir={path}: cannot write in {read_only_folder}: "
            + ("Read-only file system" if os.geteuid() == 0 else "Permission denied")
        )
    assert os.listdir(read_only_folder) == []


def test_atomic_writes_and_reads_on_any_tensorflow_filesystem(tmp_path):
    """ram:// (in memory) and file:// URIs go through tf.io.gfile: no temporaries stay,
    and nothing of a file:// path appears relative to the working directory."""
    for folder in ("ram://fileio_test/sub", f"file://{tmp_path}/sub"):
        path = f"{folder}/out.txt"
        assert fileio.read_text(path) == ""
        with pytest.raises(FileNotFoundError):
            fileio.read_bytes(path)
        atomic_write_text(path, "a\n")
        atomic_write_text(path, "b\n")
        assert fileio.read_text(path) == "b\n"
        assert tf.io.gfile.listdir(folder) == ["out.txt"]
    assert (tmp_path / "sub" / "out.txt").read_text() == "b\n"
    assert fileio.parent("gs://bucket/a/b.txt") == "gs://bucket/a"
    assert fileio.parent("gs://bucket/a") == "gs://bucket/"
    assert fileio.parent("file:///a") == "file:///"
    assert fileio.is_remote("ram://x") and fileio.is_local("/x") and fileio.is_local("x")


def test_an_input_that_is_no_regular_file_is_named_without_opening_it(tmp_path):
    good = tmp_path / "good.json"
    good.write_text("{}")
    fileio.check_input_file(str(good), "--x")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # opening it for reading would wait for a writer forever
    loop = tmp_path / "loop"
    os.symlink(loop, loop)
    for path, said in (
        (tmp_path / "missing", "file not found"),
        (tmp_path, "a folder; expected a file"),
        (fifo, "not a regular file (a FIFO, socket or device); expected a file"),
        (loop, "cannot read: a symlink loop; expected a file"),
    ):
        with pytest.raises(UserError) as err:
            fileio.check_input_file(str(path), f"--x={path}")
        assert str(err.value) == f"--x={path}: {said}"


def test_an_input_folder_is_a_folder_on_any_filesystem(tmp_path):
    fileio.check_input_folder(str(tmp_path), "--x")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    loop = tmp_path / "loop"
    os.symlink(loop, loop)
    (tmp_path / "file").write_text("")
    tf.io.gfile.makedirs("ram://folder_check/sub")
    with tf.io.gfile.GFile("ram://folder_check/file", "w") as f:
        f.write("")
    fileio.check_input_folder("ram://folder_check/sub", "--x")
    for path, said in (
        (tmp_path / "missing", "folder not found"),
        (tmp_path / "file", "a file; expected a folder"),
        (fifo, "a FIFO, socket or device; expected a folder"),
        (loop, "a symlink loop; expected a folder"),
        (loop / "below", "a symlink loop; expected a folder"),
        ("ram://folder_check/missing", "folder not found"),
        ("ram://folder_check/file", "a file; expected a folder"),
    ):
        with pytest.raises(UserError) as err:
            fileio.check_input_folder(str(path), f"--x={path}")
        assert str(err.value) == f"--x={path}: {said}"


def test_an_output_folder_that_is_a_loop_fifo_or_dangling_link_is_refused(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    loop = tmp_path / "loop"
    os.symlink(loop, loop)
    dangling = tmp_path / "dangling"
    os.symlink(tmp_path / "nothing", dangling)
    for path, said in (
        (fifo, "a FIFO, socket or device; expected a folder"),
        (loop, "a symlink loop; expected a folder"),
        (dangling, f"a symlink to nothing ({tmp_path / 'nothing'}); expected a folder"),
    ):
        with pytest.raises(UserError) as err:
            fileio.check_writable_folder("out", str(path))
        assert str(err.value) == f"--out={path}: {said}"
    fileio.check_writable_folder("out", str(tmp_path / "new" / "folder"))
    assert not (tmp_path / "new").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file")
def test_an_unreadable_input_is_named(tmp_path):
    path = tmp_path / "secret.json"
    path.write_text("{}")
    path.chmod(0)
    with pytest.raises(UserError, match="^--x: cannot read: permission denied$"):
        fileio.check_input_file(str(path), "--x")


def test_json_nesting_is_limited_before_parsing():
    assert fileio.parse_json('{"a": [[1], {"b": "[[[["}]}', "f") == {"a": [[1], {"b": "[[[["}]}
    assert fileio.json_depth('{"a": [[1], {"b": "[[[[\\"]]"}]}') == 3
    deep = "[" * (fileio.MAX_JSON_DEPTH + 1) + "]" * (fileio.MAX_JSON_DEPTH + 1)
    fileio.parse_json(deep[1:-1], "f")
    with pytest.raises(UserError, match=f"^f: JSON nested deeper than {fileio.MAX_JSON_DEPTH}"):
        fileio.parse_json(deep, "f")
    # Far past Python's recursion limit: still one line, never a RecursionError.
    with pytest.raises(UserError, match="^f: JSON nested deeper"):
        fileio.parse_json("[" * 100_000, "f")
    with pytest.raises(UserError, match=r"^f: not valid JSON \(line 1, column 2\)"):
        fileio.parse_json("{", "f")
    with pytest.raises(UserError, match="^f: not UTF-8 text"):
        fileio.parse_json(b'{"a": "\xff"}', "f")
