"""One way to write an output folder (every export, release folder and --export_dir):
`replace_output` yields a new folder to fill, and puts it in place of the destination
only once it is complete. A writer never deletes a file it did not write.

Before any work, `check_destination` refuses with one line (UserError):
- `.`, the current folder or a folder holding it;
- an input of the run, or a folder holding one (albert_tf/output_paths.py);
- a folder a running run holds (its lock, albert_tf/run/run_lock.py);
- a destination that is itself a symbolic link: it is never followed, into writing or
  into deletion; the line names its target, which the user may give instead. Links in
  the folders above it are resolved, and the resolved path is logged;
- a file, or a non-empty folder that is not an earlier output of the same kind.

An output is recognised by its marker `.albert_tf_output.json`, written last into
every output: {"kind": ..., "entries": [every file and folder written, relative]}. An
earlier output is replaced only if its kind is the same and it holds nothing beyond
its entries (a file the user put into it stops the export, naming the file). Folders
without a marker (exports of versions before the marker) are refused: remove them, or
choose another path.

The replacement, beside the destination `<parent>/<name>`:
1. the new output is written into `.<name>.new-<host>-<pid>-<hex>`, its marker last;
2. the earlier output is moved aside to `.<name>.old-<host>-<pid>-<hex>`;
3. the new one is moved to `<name>`;
4. the earlier one is deleted.
An exception at any step (an error, SIGINT, SIGTERM) puts the earlier output back and
removes the new one. After a kill (SIGKILL), `<name>` or the moved-aside earlier output
is intact; the next writer of the same destination (`check_destination`) finds the
leftovers of processes no longer running by their names, puts an earlier output that
is not in place back (it carries the marker), and deletes the rest.

Local folders are moved with rename (atomic: a reader sees the old or the new folder)
and deleted with the OS's rmtree, which never follows a symbolic link. Object stores
(gs://) have no folder rename: a move copies every object (the marker last), then
deletes the source, so there a reader should wait for the writer to finish; a kill
during a copy leaves a destination without a marker, which the next writer removes
before putting the earlier output back.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import uuid
from typing import Iterable, Mapping

from albert_tf import fileio, interrupts, output_paths
from albert_tf.errors import UserError
from albert_tf.run import run_lock

_logger = logging.getLogger(__name__)
MARKER = ".albert_tf_output.json"


def _gfile():
    import tensorflow as tf

    return tf.io.gfile


def _place(path: str, flag: str) -> str:
    """The destination's path with the links above it resolved (local) or normalised
    (remote); UserError for a destination that is a symbolic link."""
    if fileio.is_remote(path):
        return output_paths.resolved(path).rstrip("/")
    absolute = os.path.abspath(path)
    if os.path.islink(absolute):
        try:
            target = os.path.realpath(absolute, strict=True)
        except OSError:
            target = "nothing: a broken link or a loop"
        raise UserError(
            f"{flag}={path}: a symbolic link (to {target}); expected a real folder (a link "
            f"is never followed into a replacement): give its target as {flag} to write there"
        )
    real = os.path.realpath(absolute)
    if real != absolute:
        _logger.info("%s=%s: through symbolic links, the folder %s", flag, path, real)
    return real


def _entries(folder: str) -> set[str]:
    """Every file and folder below `folder`, as paths relative to it; symbolic links
    are listed, never entered."""
    found = set()
    if fileio.is_local(folder):
        for parent, dirs, files in os.walk(folder):  # plain local path: the OS (docstring)
            for name in dirs + files:
                found.add(os.path.relpath(os.path.join(parent, name), folder))
        return found
    for parent, dirs, files in _gfile().walk(folder):
        for name in dirs + files:
            path = fileio.join(parent, name.rstrip("/"))
            found.add(path[len(folder.rstrip("/")) + 1 :])
    return found


_MARKER_LIMIT = 16 << 20  # bytes; a marker lists a few hundred names


def _marker(folder: str) -> dict | None:
    """The marker of the output `folder`, or None when it has none or one this module
    did not write (not a plain file, too large, not the JSON it writes)."""
    path = fileio.join(folder, MARKER)
    if fileio.is_local(path) and (os.path.islink(path) or not os.path.isfile(path)):
        return None  # plain local path: the OS; a link, FIFO or folder is never read
    try:
        if not fileio.exists(path) or fileio.size(path) > _MARKER_LIMIT:
            return None
        marker = json.loads(fileio.read_bytes(path))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(marker, dict) or not isinstance(marker.get("entries"), list):
        return None
    if not all(isinstance(name, str) for name in marker["entries"]):
        return None
    return marker


def _check_contents(folder: str, kind: str, shown: str, flag: str) -> None:
    """UserError unless `folder` is absent, empty, or an earlier output of `kind` that
    holds nothing it did not write."""
    if not fileio.exists(folder):
        return
    if not fileio.isdir(folder):
        raise UserError(f"{shown}: a file; expected a folder (absent, empty or an earlier export)")
    found = _entries(folder)
    if not found:
        return
    marker = _marker(folder)
    if marker is None:
        names = ", ".join(sorted(found)[:3]) + (", ..." if len(found) > 3 else "")
        raise UserError(
            f"{shown}: holds files this program did not write ({names}); expected an absent "
            f"or empty folder, or an earlier output of this export ({kind}), which is "
            f"replaced as a whole: choose another {flag}"
        )
    if marker.get("kind") != kind:
        raise UserError(
            f"{shown}: holds an export of another kind ({marker.get('kind')}); expected an "
            f"absent or empty folder, or an earlier output of this export ({kind}): choose "
            f"another {flag}"
        )
    foreign = sorted(found - set(marker["entries"]) - {MARKER})
    if foreign:
        raise UserError(
            f"{shown}: an earlier output of this export ({kind}) that also holds files it "
            f"did not write ({', '.join(foreign[:3])}); move them out, or choose another {flag}"
        )


def _exists(path: str) -> bool:
    # lexists: a link left where a folder was is found, not followed
    return os.path.lexists(path) if fileio.is_local(path) else fileio.exists(path)


def _remove(path: str) -> None:
    if fileio.is_local(path):
        shutil.rmtree(path)  # plain local path: the OS's rmtree never follows a link
    else:
        _gfile().rmtree(path)


def _move(source: str, target: str) -> None:
    """Moves the folder `source` to `target` (absent): a rename on a local disk; on an
    object store a copy of every object, the marker last, then the source deleted, its
    marker first (so a folder with a marker is always complete)."""
    if fileio.is_local(source):
        os.rename(source, target)  # plain local path: the OS (an atomic rename)
        return
    gfile = _gfile()
    names = sorted(_entries(source), key=lambda name: name == MARKER)
    for name in names:
        source_path, target_path = fileio.join(source, name), fileio.join(target, name)
        if gfile.isdir(source_path):
            gfile.makedirs(target_path)
        else:
            gfile.makedirs(fileio.parent(target_path))
            gfile.copy(source_path, target_path, overwrite=True)
    if gfile.exists(fileio.join(source, MARKER)):  # no longer complete from here on
        gfile.remove(fileio.join(source, MARKER))
    gfile.rmtree(source)


def _sides(target: str) -> tuple[str, str]:
    """(the destination's folder, its name)."""
    return fileio.parent(target), target.rstrip("/").rsplit("/", 1)[-1]


def _put_back(old: str, target: str, kind: str) -> None:
    """Puts `old`, an earlier output moved aside, back to `target` unless a complete
    output is there; deletes it otherwise."""
    marker = _marker(old)
    if _marker(target) is not None or marker is None or marker.get("kind") != kind:
        _logger.info("removing %s, an earlier output moved aside", old)
        _remove(old)
        return
    if _exists(target):
        if fileio.is_local(target):  # not left by a rename: someone else's, kept
            return
        _remove(target)  # object stores: our copy cut short
    _logger.warning("putting back %s, moved aside by a writer that did not finish", target)
    _move(old, target)


def _recover(target: str, kind: str) -> None:
    """Cleans what killed writers of `target` left beside it: an earlier output they had
    moved aside goes back in place if none is there, every other leftover is deleted."""
    folder, name = _sides(target)
    for old in fileio.stale_entries(folder, re.escape(f".{name}.old-") + r"{owner}-[0-9a-f]{32}"):
        _put_back(old, target, kind)
    for new in fileio.stale_entries(folder, re.escape(f".{name}.new-") + r"{owner}-[0-9a-f]{32}"):
        _logger.info("removing %s, the unfinished output of a killed run", new)
        _remove(new)


def check_destination(
    path,
    kind: str,
    *,
    flag: str,
    inputs: Mapping[str, Iterable[str] | str | None] | None = None,
) -> str:
    """Returns the folder an output of `kind` given as `flag`=`path` will be written to
    (links above it resolved); UserError for a destination the module docstring lists
    as refused. `inputs`: flag -> the run's input path(s). Cleans what killed writers of
    the same destination left (module docstring); writes nothing else."""
    path = os.fspath(path)
    shown = f"{flag}={path}"
    target = _place(path, flag)
    if fileio.is_local(target):
        here = os.path.realpath(os.getcwd())  # plain local path: the OS
        if here == target or here.startswith(target.rstrip("/") + "/"):
            what = "the current folder" if here == target else "a folder holding the current one"
            raise UserError(
                f"{shown}: {what} ({here}); expected a folder of its own for the {kind} "
                "export (it is replaced as a whole)"
            )
    if not _sides(target)[1] or _sides(target)[0] == target:
        raise UserError(f"{shown}: expected a folder below the root of the filesystem")
    output_paths.check_not_an_input({flag: target}, inputs or {})
    run_lock.check_free(target, flag)
    _recover(target, kind)
    _check_contents(target, kind, shown, flag)
    return target


def _write_marker(folder: str, kind: str) -> None:
    marker = {"kind": kind, "entries": sorted(_entries(folder))}
    with _gfile().GFile(fileio.join(folder, MARKER), "w") as f:
        f.write(json.dumps(marker, indent=1) + "\n")


@contextlib.contextmanager
def replace_output(
    path,
    kind: str,
    *,
    flag: str,
    inputs: Mapping[str, Iterable[str] | str | None] | None = None,
):
    """Yields a new, empty folder to write the output of `kind` into; when the block ends
    without an exception it replaces `path` (given as `flag`), else it is removed and
    `path` is left as it was. Checks and steps: the module docstring."""
    target = check_destination(path, kind, flag=flag, inputs=inputs)
    folder, name = _sides(target)
    fileio.makedirs(folder)
    new = fileio.join(folder, f".{name}.new-{fileio.owner_tag()}-{uuid.uuid4().hex}")
    old = fileio.join(folder, f".{name}.old-{fileio.owner_tag()}-{uuid.uuid4().hex}")
    fileio.makedirs(new)
    try:
        yield new
        _write_marker(new, kind)
        interrupts.hold_for_test("output_written")  # the new output complete beside
        if _exists(target):
            # Still only what an earlier export wrote (nothing came in meanwhile).
            _check_contents(target, kind, f"{flag}={path}", flag)
            _move(target, old)
        _move(new, target)
    except BaseException:
        if _exists(new):
            _remove(new)
        if _exists(old):
            _put_back(old, target, kind)
        raise
    if _exists(old):
        _remove(old)


__all__ = ["MARKER", "check_destination", "replace_output"]
