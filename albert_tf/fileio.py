"""Atomic output files and the helpers every module uses for paths on any TensorFlow
filesystem (local paths, `file://`, `gs://`, `ram://`: all through tf.io.gfile).

A reader (or a crash) never sees half a file: the content goes to a temporary name in
the same folder, which is then renamed into place. On a local disk the rename is atomic.
Cloud Storage has no rename: tf.io.gfile copies the object, then deletes the temporary;
an object appears under its final name only once complete, so a reader there sees the
old file or the whole new one as well, and at worst a temporary not yet deleted (which
the next writer removes, see below).

TensorFlow is imported when first needed: `read_bytes`, `exists`, `isfile` and `isdir`
serve a plain local path with the OS, so that the processes that never import
TensorFlow (data-generation workers, reading a config) stay without it.

A process killed with SIGKILL cannot remove its temporaries, so their names carry the
host and process id (`owner_tag`), and the next writer of the same file removes those
whose process no longer runs (`remove_stale`).
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import posixpath
import re
import socket
import stat
import uuid

from albert_tf.errors import UserError

_logger = logging.getLogger(__name__)
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://[^/]*")


def _gfile():
    import tensorflow as tf

    return tf.io.gfile


def _tf_errors():
    import tensorflow as tf

    return tf.errors


def owner_tag() -> str:
    """The tag "<host>-<pid>" of this process, for the names of its temporary files."""
    host = re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname()) or "host"
    return f"{host}-{os.getpid()}"


def _pid_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def stale_names(names, name_pattern: str) -> list[str]:
    """The names among `names` left by killed processes of this host: those that match
    `name_pattern` (a regex for the whole name, with `{owner}` where the name holds
    `owner_tag()`) and whose process is not running. Our own and running processes'
    names are not stale, nor are those of other hosts, which cannot be checked from here.
    Touches no file: callers list and remove on their own filesystem."""
    host = owner_tag().rsplit("-", 1)[0]
    regex = re.compile(name_pattern.replace("{owner}", re.escape(host) + r"-(?P<pid>\d+)"))
    stale = []
    for name in names:
        match = regex.fullmatch(name)
        if match:
            pid = int(match.group("pid"))
            if pid != os.getpid() and not _pid_running(pid):
                stale.append(name)
    return stale


def stale_entries(directory: str, name_pattern: str) -> list[str]:
    """The entries of `directory` left by killed processes of this host.

    Args:
      directory: a folder on any filesystem (a missing one holds nothing).
      name_pattern: regex that a whole entry name must match, with the placeholder
        `{owner}` where the name holds `owner_tag()`; it becomes this host's name
        and a captured process id.
    Returns the paths (files or folders) whose process is not running (`stale_names`).
    """
    try:
        names = _gfile().listdir(directory)
    except _tf_errors().OpError:
        return []
    # object stores list folders with a trailing slash
    found = stale_names(sorted(n.rstrip("/") for n in names), name_pattern)
    return [join(directory, name) for name in found]


def remove_stale(directory: str, name_pattern: str) -> list[str]:
    """Removes the leftovers of killed processes of this host from `directory`
    (`stale_entries`, same arguments); returns the removed paths."""
    removed = []
    for path in stale_entries(directory, name_pattern):
        with contextlib.suppress(_tf_errors().NotFoundError):
            if _gfile().isdir(path):
                _gfile().rmtree(path)
            else:
                _gfile().remove(path)
        removed.append(path)
    if removed:
        _logger.info(
            "removed %d temporary file(s) of killed runs: %s", len(removed), ", ".join(removed)
        )
    return removed


def is_remote(path) -> bool:
    """Whether `path` names a file through a URI scheme (gs://, file://, ram://...)."""
    return bool(_SCHEME.match(os.fspath(path)))


def is_local(path) -> bool:
    """Whether `path` is a plain path of this machine's filesystem (no URI scheme)."""
    return not is_remote(path)


def join(*parts) -> str:
    """os.path.join for any filesystem (URIs use "/")."""
    return os.path.join(*map(os.fspath, parts))


def parent(path) -> str:
    """The folder of `path` ("." for a bare name; a URI's root stays itself)."""
    path = os.fspath(path)
    match = _SCHEME.match(path)
    if match:
        root, rest = match.group(0), path[match.end() :]
        return root + (posixpath.dirname(rest.rstrip("/")) or "/")
    return os.path.dirname(path) or "."


def local_kind(path) -> str | None:
    """What is at a path on this machine's disk, following links: None for nothing (or a
    link to nothing), else "a folder", "a file", "a symlink loop", "a FIFO, socket or
    device", or the OS's reason it cannot be looked at. Remote paths are not asked."""
    try:
        mode = os.stat(os.fspath(path)).st_mode  # plain local path: the OS (module docstring)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as err:
        return "a symlink loop" if err.errno == errno.ELOOP else err.strerror
    if stat.S_ISDIR(mode):
        return "a folder"
    return "a file" if stat.S_ISREG(mode) else "a FIFO, socket or device"


def check_input_folder(path, what: str) -> None:
    """UserError naming `what` (a flag "--x=<path>") unless `path` is a folder (any
    filesystem); on this machine's disk a symlink loop or a FIFO is named as such."""
    path = os.fspath(path)
    kind = local_kind(path) if is_local(path) else None
    if not is_local(path) and _gfile().exists(path):
        kind = "a folder" if _gfile().isdir(path) else "a file"
    if kind is None:
        raise UserError(f"{what}: folder not found")
    if kind != "a folder":
        raise UserError(f"{what}: {kind}; expected a folder")


def check_writable_folder(flag: str, value: str, folder: str | None = None) -> None:
    """Refuses (UserError naming --`flag`=`value`) a folder (`folder`, default `value`)
    that this process could not create or write in: a file there or in place of a
    folder above it, or a nearest existing folder that refuses a file (read-only file
    system, permissions). Creates nothing that stays: the probe file is removed at once,
    and a missing folder is left for the run to create once all its inputs proved
    usable. Any filesystem; on an object store (gs://) a missing bucket shows as a
    folder that refuses the probe."""
    folder = os.fspath(value if folder is None else folder)
    existing = folder if is_remote(folder) else os.path.abspath(folder)
    if is_local(folder):
        kind = local_kind(folder)
        if kind is None and os.path.lexists(folder):  # a link to nothing: makedirs would fail
            kind = f"a symlink to nothing ({os.readlink(folder)})"
        if kind not in (None, "a folder", "a file"):
            raise UserError(f"--{flag}={value}: {kind}; expected a folder")
    while not _gfile().exists(existing):
        above = parent(existing)
        if above == existing:
            break
        existing = above
    if _gfile().exists(existing) and not _gfile().isdir(existing):
        same = existing == (value if is_remote(value) else os.path.abspath(value))
        found = "" if same else f" ({existing})"
        raise UserError(f"--{flag}={value}: expected a folder, found a file{found}")
    probe = join(existing, f".write_check_{owner_tag()}-{uuid.uuid4().hex}")
    try:
        with _gfile().GFile(probe, "w") as f:
            f.write("")
    except _tf_errors().OpError as err:
        raise UserError(f"--{flag}={value}: cannot write in {existing}: {os_reason(err)}") from None
    _gfile().remove(probe)


def os_reason(err) -> str:
    """The operating system's words in a TensorFlow file error ("Permission denied"),
    else its whole message."""
    message = err.message.strip()
    return re.split(r": |; ", message)[-1] or message or type(err).__name__


@contextlib.contextmanager
def atomic_path(path):
    """Yields a temporary name in `path`'s folder (created if needed) to write to
    through tf.io.gfile (or a TF op); on success it is renamed to
    `path`, on an exception removed. See the module docstring for what a reader of an
    object store can rely on."""
    path = os.fspath(path)
    directory = parent(path)
    _gfile().makedirs(directory)
    prefix = f".{os.path.basename(path)}."
    remove_stale(directory, re.escape(prefix) + r"{owner}-\w+\.tmp")
    tmp = join(directory, f"{prefix}{owner_tag()}-{uuid.uuid4().hex}.tmp")
    try:
        yield tmp
        _gfile().rename(tmp, path, overwrite=True)
    except BaseException:
        with contextlib.suppress(_tf_errors().OpError):
            if _gfile().exists(tmp):
                _gfile().remove(tmp)
        raise


def atomic_write_text(path, text: str) -> None:
    """Writes `text` (UTF-8, "\n" newlines) to `path` atomically, creating its folder."""
    if not isinstance(text, str):
        raise TypeError(f"expected text for {path}, got {type(text).__name__}")
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path, data: bytes) -> None:
    """Writes `data` to `path` atomically, creating its folder."""
    with atomic_path(path) as tmp:
        with _gfile().GFile(tmp, "wb") as f:
            f.write(data)


def read_text(path) -> str:
    """The file's text, or "" when it does not exist."""
    path = os.fspath(path)
    return read_bytes(path).decode("utf-8") if exists(path) else ""


def read_bytes(path) -> bytes:
    """The file's bytes. Raises OSError (FileNotFoundError when missing) with the
    reason in `strerror`, whatever the filesystem."""
    path = os.fspath(path)
    if is_local(path):
        with open(path, "rb") as f:  # plain local path: the OS (module docstring)
            return f.read()
    errors = _tf_errors()
    try:
        with _gfile().GFile(path, "rb") as f:
            return f.read()
    except errors.NotFoundError as err:
        raise FileNotFoundError(errno.ENOENT, os_reason(err), path) from None
    except errors.OpError as err:
        raise OSError(errno.EIO, os_reason(err), path) from None


def check_input_file(path, what: str) -> None:
    """UserError naming `what` (a flag "--x=<path>", or the file that names `path`) unless
    `path` is a regular file this process can read. On this machine's disk it is
    checked with stat before anything opens it, so a FIFO cannot make a reader wait
    forever; a folder, a symlink loop and a file without read permission are named as
    such."""
    path = os.fspath(path)
    if is_remote(path):
        if not _gfile().exists(path):
            raise UserError(f"{what}: file not found")
        if _gfile().isdir(path):
            raise UserError(f"{what}: a folder; expected a file")
        return
    kind = local_kind(path)
    if kind is None:
        raise UserError(f"{what}: file not found")
    if kind == "a folder":
        raise UserError(f"{what}: a folder; expected a file")
    if kind == "a FIFO, socket or device":
        raise UserError(f"{what}: not a regular file (a FIFO, socket or device); expected a file")
    if kind != "a file":
        raise UserError(f"{what}: cannot read: {kind}; expected a file")
    if not os.access(path, os.R_OK):
        raise UserError(f"{what}: cannot read: permission denied")


# JSON inputs nest a few levels; deeper nesting is refused before it is parsed, so that
# neither the parser nor any later walk over the value can exhaust Python's stack.
MAX_JSON_DEPTH = 64
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def json_depth(text: str) -> int:
    """How deep the arrays and objects of JSON `text` nest (0 for a scalar)."""
    depth = deepest = 0
    for char in _NOT_BRACKET.sub("", _JSON_STRING.sub("", text)):
        depth += 1 if char in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def parse_json(text, source: str):
    """The value of JSON `text` (str, or UTF-8 bytes); UserError naming `source` when it
    is not JSON or nests deeper than MAX_JSON_DEPTH."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as err:
            raise UserError(
                f"{source}: not UTF-8 text ({err.reason} at byte {err.start})"
            ) from None
    if json_depth(text) > MAX_JSON_DEPTH:
        raise UserError(f"{source}: JSON nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise UserError(
            f"{source}: not valid JSON (line {err.lineno}, column {err.colno}): {err.msg}"
        ) from None
    except RecursionError:  # nesting hidden from json_depth: still one line
        raise UserError(f"{source}: JSON nested too deeply") from None


def read_json(path, what: str | None = None):
    """The JSON value of the file `path` (any filesystem), its file checked first
    (`check_input_file`); UserError naming `what` (default: the path) otherwise."""
    path = os.fspath(path)
    what = what or path
    check_input_file(path, what)
    try:
        data = read_bytes(path)
    except OSError as err:
        raise UserError(f"{what}: cannot read: {err.strerror or err}") from None
    return parse_json(data, what)


def exists(path) -> bool:
    path = os.fspath(path)
    # plain local path: the OS (module docstring)
    return os.path.exists(path) if is_local(path) else _gfile().exists(path)  # local: OS


def isfile(path) -> bool:
    path = os.fspath(path)
    if is_local(path):
        return os.path.isfile(path)  # plain local path: the OS (module docstring)
    return _gfile().exists(path) and not _gfile().isdir(path)


def isdir(path) -> bool:
    path = os.fspath(path)
    # plain local path: the OS (module docstring)
    return os.path.isdir(path) if is_local(path) else _gfile().isdir(path)  # local: OS


def glob(pattern) -> list[str]:
    """The paths matching `pattern`, sorted (tf.io.gfile.glob, any filesystem)."""
    return sorted(_gfile().glob(os.fspath(pattern)))


def open_binary(path):
    """A binary file object (read, seek) of `path`: the OS's for a plain local path (no
    TensorFlow in data workers), tf.io.gfile's otherwise."""
    path = os.fspath(path)
    if is_local(path):
        return open(path, "rb")  # plain local path: the OS (module docstring)
    return _gfile().GFile(path, "rb")


def size(path) -> int:
    """The size in bytes of the file `path`."""
    path = os.fspath(path)
    # plain local path: the OS (module docstring)
    return os.path.getsize(path) if is_local(path) else _gfile().stat(path).length


def local_glob(pattern) -> list[str]:
    """`glob` that needs no TensorFlow for a plain local pattern."""
    pattern = os.fspath(pattern)
    if is_local(pattern):
        import glob as os_glob

        return sorted(os_glob.glob(pattern))  # plain local path: the OS (module docstring)
    return glob(pattern)


def copy_from_local(local_path, path) -> None:
    """Copies the machine-local file `local_path` to `path` on any filesystem."""
    _gfile().copy(os.fspath(local_path), os.fspath(path), overwrite=True)


def makedirs(path) -> None:
    """Creates the folder `path` and its parents (any filesystem; existing is fine)."""
    _gfile().makedirs(os.fspath(path))
