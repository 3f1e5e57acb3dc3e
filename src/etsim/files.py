"""Reading inputs and writing outputs, with one-line errors instead of tracebacks.

Every YAML/JSON configuration etsim reads goes through :func:`read_text` (a file that is not UTF-8
is named with the offset of its first bad byte), every trace through :func:`read_bytes` — both read regular
files only (``/dev/zero``, a FIFO or a socket would never end) of at most :data:`MAX_TEXT_BYTES` or
:data:`MAX_FILE_BYTES` — and every
file etsim writes goes through :func:`write_text`/:func:`write_bytes` or :func:`make_parent` (a parent
that cannot be created is named, and a path component that is a file is called that, not "File exists").
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import gzip
import io
import json
import os
import shutil
import stat
import tempfile
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from etsim.errors import ConfigError, EtsimError

__all__ = [
    "MAX_FILE_BYTES",
    "MAX_NESTING",
    "MAX_TEXT_BYTES",
    "MAX_VALUES",
    "ProcessDirectory",
    "check_size",
    "directory_locked",
    "lock_directory",
    "make_parent",
    "parse_json",
    "parse_yaml",
    "read_bytes",
    "read_into",
    "read_text",
    "read_yaml_mapping",
    "write_bytes",
    "write_text",
]

_GZIP_MAGIC = b"\x1f\x8b"


#: The largest file etsim reads (a trace, an MSCCL-IR file): the gzip limit's size (4 GiB).
MAX_FILE_BYTES = 1 << 32
#: The largest text file etsim reads (a YAML or JSON configuration, a result to report): 512 MiB.
MAX_TEXT_BYTES = 1 << 29


def read_text(path: str | os.PathLike[str], what: str = "file", error: type[EtsimError] = ConfigError) -> str:
    """The text of *path* (a regular file of at most :data:`MAX_TEXT_BYTES`), decoded as UTF-8.

    Args:
        path: the file.
        what: what the file is, for messages ("comm-group file").
        error: the exception class to raise.

    Raises:
        EtsimError: (of class *error*) the file cannot be read or is not UTF-8 text; the message names
            the file and, for bad bytes, the byte offset.
    """
    p = Path(path)
    data = read_bytes(p, what, error, limit=MAX_TEXT_BYTES)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{p}: the {what} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})") from None


def read_bytes(
    path: str | os.PathLike[str],
    what: str = "file",
    error: type[EtsimError] = ConfigError,
    *,
    gunzip: bool = False,
    limit: int = MAX_FILE_BYTES,
) -> bytes:
    """The bytes of *path*; with *gunzip*, decompressed when they start with gzip's magic bytes.

    Raises:
        EtsimError: (of class *error*) the file cannot be read, is not a regular file (a device such as
            ``/dev/zero``, a FIFO: reading would not end), is larger than *limit* bytes, or is corrupt gzip
            data (named).
    """
    p = Path(path)
    try:
        # Non-blocking open: opening a FIFO to read would otherwise wait for a writer before fstat can refuse it.
        with open(os.open(p, os.O_RDONLY | os.O_NONBLOCK), "rb") as stream:
            info = os.fstat(stream.fileno())
            if not stat.S_ISREG(info.st_mode):
                kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file (a device, FIFO or socket)"
                raise error(f"{p}: cannot read the {what}: it is {kind}")
            if info.st_size > limit:
                raise error(f"{p}: the {what} has {info.st_size:,} bytes, more than etsim reads ({limit:,})")
            data = stream.read(limit + 1)
    except OSError as exc:
        raise error(f"{p}: cannot read the {what}: {exc.strerror or exc}") from None
    if len(data) > limit:  # it grew while read
        raise error(f"{p}: the {what} has more than {limit:,} bytes, more than etsim reads")
    if gunzip and data[:2] == _GZIP_MAGIC:
        data = _gunzip(data, p, what, error)
    return data


def read_into(path: str | os.PathLike[str], buffer: bytearray) -> tuple[bytearray, int] | None:
    """The bytes of a plain file read into *buffer*: the buffer (a larger one if it was too small) and their count.

    A buffer reused from file to file spares each file a new ``bytes`` object, whose pages the kernel must
    fault in (half of reading an 800 KB file). None: the file is gzipped, changed size while read, or cannot be
    read; callers then use :func:`read_bytes`, which decompresses or says what is wrong.
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        size = os.fstat(fd).st_size
        if len(buffer) <= size:
            buffer = bytearray(size + 1)  # (one byte more: a file that grew fills it, and is refused)
        count = 0
        with memoryview(buffer) as view:
            while count < len(buffer):
                got = os.readv(fd, [view[count:]])
                if not got:
                    break
                count += got
    except OSError:
        return None
    finally:
        os.close(fd)
    if count != size or buffer.startswith(_GZIP_MAGIC):
        return None
    return buffer, count


#: The most bytes a gzipped file may decompress to (a gzip bomb is refused once it reaches this).
MAX_DECOMPRESSED = 1 << 32
#: Past 64 MiB, the most a gzipped file may expand (traces compress about 5-20x; a gzip bomb ~1000x).
MAX_EXPANSION = 200


def _gunzip(data: bytes, p: Path, what: str, error: type[EtsimError]) -> bytes:
    """*data* decompressed, in steps, refusing more than :data:`MAX_DECOMPRESSED` bytes or a bomb's expansion."""
    out = bytearray()
    limit = min(MAX_DECOMPRESSED, max(1 << 26, MAX_EXPANSION * len(data)))
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as stream:
            while chunk := stream.read(1 << 24):
                out += chunk
                if len(out) > limit:
                    raise error(
                        f"{p}: the {what} decompresses to more than {limit:,} bytes from {len(data):,} "
                        f"(etsim's limits: {MAX_EXPANSION}x past 64 MiB, {MAX_DECOMPRESSED:,} in all): refused as a "
                        "gzip bomb"
                    )
    except (OSError, EOFError, zlib.error) as exc:
        raise error(f"{p}: the {what} is corrupt gzip data ({exc})") from None
    return bytes(out)


def make_parent(path: str | os.PathLike[str], error: type[EtsimError] = ConfigError) -> Path:
    """Create the directory *path* will be written in; return *path* as a :class:`Path`.

    Raises:
        EtsimError: (of class *error*) the directory cannot be created — a component of it is a file,
            or the operating system refuses (named).
    """
    p = Path(path)
    parent = p.parent
    ancestor = parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if ancestor.exists() and not ancestor.is_dir():
        raise error(f"{p}: cannot create its directory {parent}: {ancestor} is a file, not a directory")
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise error(f"{p}: cannot create its directory {parent}: {exc.strerror or exc}") from None
    return p


def write_bytes(path: str | os.PathLike[str], data: bytes, error: type[EtsimError] = ConfigError) -> Path:
    """Write *data* to *path*, creating its directory; errors name the file."""
    p = make_parent(path, error)
    try:
        p.write_bytes(data)
    except IsADirectoryError:
        raise error(f"{p}: cannot write: it is a directory") from None
    except OSError as exc:
        raise error(f"{p}: cannot write: {exc.strerror or exc}") from None
    return p


def write_text(path: str | os.PathLike[str], text: str, error: type[EtsimError] = ConfigError) -> Path:
    """Write *text* (UTF-8) to *path*, creating its directory; errors name the file."""
    return write_bytes(path, text.encode("utf-8"), error)


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys (PyYAML keeps the last one silently)."""


def _no_duplicates(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
        try:
            duplicate = key in seen
        except TypeError:
            continue  # an unhashable key: construct_mapping reports it
        if duplicate:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicates)


#: The deepest nesting and the most values (aliases expanded) etsim reads from one configuration file: enough for
#: any real file, and far below what would exhaust the recursion limit or memory of the code walking it.
MAX_NESTING = 100
MAX_VALUES = 1_000_000


def parse_yaml(text: str, where: str, error: type[EtsimError] = ConfigError) -> Any:
    """YAML *text*, strictly: duplicate keys, deep nesting and alias bombs are errors naming *where*.

    Nesting past :data:`MAX_NESTING` levels and more than :data:`MAX_VALUES` values once aliases are expanded (a
    "billion laughs" file) are refused before anything walks the data.
    """
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass
    except RecursionError:
        raise error(f"{where}: invalid YAML: nested more than {MAX_NESTING} levels deep") from None
    except yaml.YAMLError as exc:
        raise error(f"{where}: invalid YAML: {exc}") from None
    check_size(data, where, error)
    return data


def parse_json(text: str, where: str, error: type[EtsimError] = ConfigError) -> Any:
    """JSON *text*, strictly: a duplicate key in an object and nesting past :data:`MAX_NESTING` levels are errors."""

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in items:
            if key in out:
                raise ValueError(f"duplicate key {key!r}")
            out[key] = value
        return out

    try:
        data = json.loads(text, object_pairs_hook=pairs)
    except RecursionError:
        raise error(f"{where}: invalid JSON: nested more than {MAX_NESTING} levels deep") from None
    except ValueError as exc:  # json.JSONDecodeError is a ValueError
        raise error(f"{where}: invalid JSON: {exc}") from None
    check_size(data, where, error)
    return data


def check_size(data: Any, where: str, error: type[EtsimError] = ConfigError) -> None:
    """Raise *error* if *data* nests too deeply or holds too many values (:data:`MAX_NESTING`, :data:`MAX_VALUES`).

    Values are counted with every alias of a shared value again: what ``json.dumps`` or a deep copy makes of it.
    """
    sizes: dict[int, int] = {}
    stack: list[tuple[Any, int, bool]] = [(data, 1, False)]
    while stack:
        node, depth, children_done = stack.pop()
        if not isinstance(node, dict | list):
            continue
        if depth > MAX_NESTING:
            raise error(f"{where}: nested more than {MAX_NESTING} levels deep")
        items = list(node.values()) if isinstance(node, dict) else node
        if children_done:
            total = 1 + sum(sizes.get(id(c), 1) for c in items)
            if total > MAX_VALUES:
                raise error(f"{where}: more than {MAX_VALUES:,} values once its aliases are expanded")
            sizes[id(node)] = total
            continue
        if id(node) in sizes:
            continue
        stack.append((node, depth, True))
        stack.extend((c, depth + 1, False) for c in items if isinstance(c, dict | list) and id(c) not in sizes)


def read_yaml_mapping(path: str | os.PathLike[str], what: str = "experiment") -> tuple[dict[str, Any], str]:
    """Read a YAML mapping from *path*; return it and its text.

    Raises:
        ConfigError: unreadable file, bytes that are not UTF-8, invalid YAML, duplicate keys, or a
            document that is not a mapping; the message names the file.
    """
    p = Path(path)
    text = read_text(p, f"{what} file")
    data = parse_yaml(text, str(p))
    if not isinstance(data, dict):
        kind = "empty" if data is None else f"a {type(data).__name__}"
        raise ConfigError(f"{p}: expected a mapping of {what} keys at the top level, got {kind}")
    return data, text


def lock_directory(directory: str | os.PathLike[str], what: str, lock: str = ".etsim-lock") -> int:
    """Take *directory*'s lock (``flock`` on its file *lock*, which names this process); return its descriptor.

    The lock lasts until the descriptor is closed (or this process ends, however it ends).

    Raises:
        ConfigError: another process holds it (named, with *what* it is doing), or the file cannot be made.
    """
    path = Path(directory) / lock
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise ConfigError(f"{directory}: cannot write there: {exc.strerror or exc}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = os.read(fd, 64).decode("ascii", "replace").strip() or "another process"
        os.close(fd)
        raise ConfigError(
            f"{directory} is being written by another {what} (etsim process {holder}): wait for it to end, or "
            "choose another output directory"
        ) from None
    os.ftruncate(fd, 0)
    os.write(fd, str(os.getpid()).encode())
    return fd


@contextlib.contextmanager
def directory_locked(directory: str | os.PathLike[str], what: str, lock: str = ".etsim-lock") -> Iterator[None]:
    """Hold *directory*'s lock (:func:`lock_directory`) while the block runs."""
    fd = lock_directory(directory, what, lock)
    try:
        yield
    finally:
        os.close(fd)


class ProcessDirectory:
    """A temporary directory of this process: made on first use, removed when the process exits (or on request).

    Args:
        prefix: the start of its name.
    """

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._path: str | None = None
        self._lock = threading.Lock()  # a worker's lifeline thread and its own exit may both remove it

    def path(self) -> str:
        """The directory (made now if it is not there yet)."""
        with self._lock:
            if self._path is None:
                self._path = tempfile.mkdtemp(prefix=self.prefix)
                atexit.register(self.remove)
            return self._path

    def remove(self) -> None:
        """Remove the directory and what it holds (if made); the next :meth:`path` makes another."""
        with self._lock:
            path, self._path = self._path, None
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)
