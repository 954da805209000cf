"""GrammarDiskCache: compiled grammars kept on disk, so a restarted or second process skips the compile.

One file per compiled grammar, named by the SHA-256 of (format, code fingerprint, vocabulary
fingerprint, cache key). The code fingerprint hashes this package's sources, those of the front ends
that build grammars (``source_dirs``: the JSON Schema compiler), the version and the versions of Lark,
numpy and interegular, so an upgrade (or an edited checkout) never loads an automaton other code built. A file is::

    MAGIC (8 bytes) | SHA-256 of the payload (32 bytes) | payload (pickle of the key and disk_state)

* Writes are atomic: a temporary file in the same directory, then ``os.replace``. Two processes
  writing the same entry both write whole files; the last rename wins and both are valid.
* A file that is truncated, corrupt (digest mismatch), from another format, or for another key is
  ignored, removed, and the grammar compiled again; it is never trusted. Unpickling accepts only
  the classes a compiled grammar is made of (``guided.grammar.safe_pickle``).
* The directory is bounded (``max_bytes``): after each write the least recently used files go (a load
  touches its file's mtime). Only grammars whose cold build took ``min_build_s`` or more are written.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import pickle
import tempfile
import threading
import time
from pathlib import Path

from guided.grammar.safe_pickle import safe_loads
from guided.grammar.tokens.compiled import AutomatonQueries

__all__ = ["GrammarDiskCache", "code_fingerprint"]

logger = logging.getLogger("guided.grammar.disk_cache")

MAGIC = b"GUIDEDG1"
FORMAT = 2
_HEADER = len(MAGIC) + 32
_SUFFIX = ".grammar"
_STALE_TMP_S = 3600.0  # temporary files older than this are leftovers of a killed writer
_GRAMMAR_DIR = Path(__file__).resolve().parent
_digests: dict[Path, str] = {}


def code_fingerprint(version: str = "", source_dirs=()) -> str:
    """A digest of the grammar compiler's sources, of ``source_dirs`` and of ``version``: entries built by
    any other code are never loaded."""
    h = hashlib.sha256(f"{FORMAT}|{version}|{_dependency_versions()}".encode())
    for root in (_GRAMMAR_DIR, *(Path(d).resolve() for d in source_dirs)):
        digest = _digests.get(root)
        if digest is None:
            d = hashlib.sha256()
            for path in sorted(p for p in root.rglob("*") if p.suffix in (".py", ".lark", ".json")):
                d.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
            digest = _digests[root] = d.hexdigest()
        h.update(digest.encode())
    return h.hexdigest()


def _dependency_versions() -> str:
    """The versions of the libraries whose behaviour a compiled grammar holds (Lark's grammar loader and
    common.lark, numpy's pickles)."""
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for name in ("lark", "numpy", "interegular"):
        try:
            out.append(f"{name}={version(name)}")
        except PackageNotFoundError:
            out.append(f"{name}=-")
    return ",".join(out)


def _plain(key) -> bool:
    """Whether ``key`` is made of values whose repr is the same in every process."""
    if isinstance(key, tuple):
        return all(_plain(k) for k in key)
    return key is None or isinstance(key, (str, bytes, int, float, bool))


class GrammarDiskCache:
    """Compiled grammars on disk for one directory.

    Parameters
    ----------
    directory : path
        Created when missing.
    max_bytes : int
        Bound on the directory's entries together (least recently used removed past it).
    version : str
        Goes into every key with the code fingerprint (pass the package version).
    source_dirs : sequence of paths
        Sources of the front ends whose grammars are cached (their edits invalidate every entry).
    min_build_s : float
        Grammars built faster than this are not written (reading them back would not be faster).
    """

    def __init__(self, directory: str | os.PathLike, max_bytes: int = 1 << 30, version: str = "",
                 source_dirs=(), min_build_s: float = 0.02):  # fmt: skip
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.max_bytes = int(max_bytes)
        self.min_build_s = min_build_s
        self._code = code_fingerprint(version, source_dirs)
        self._lock = threading.Lock()
        self.hits = self.misses = self.writes = self.rejected = 0  # statistics

    def path_of(self, key: tuple, vocabulary_fingerprint: str) -> Path | None:
        """The entry's file, or None when ``key`` cannot name one across processes."""
        if not _plain(key):
            return None
        digest = hashlib.sha256(f"{self._code}|{vocabulary_fingerprint}|{key!r}".encode()).hexdigest()
        return self.directory / f"{digest}{_SUFFIX}"

    def load(self, key: tuple, vocabulary, encode=None, **bounds) -> AutomatonQueries | None:
        """The grammar stored for ``key`` and ``vocabulary``, or None (missing, unreadable, corrupt)."""
        path = self.path_of(key, vocabulary.fingerprint)
        if path is None:
            return None
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            self.misses += 1
            return None
        except OSError as e:
            logger.warning("grammar cache: cannot read %s (%s); compiling", path.name, e)
            self.misses += 1
            return None
        try:
            stored_key, cls, state = self._decode(data)
            if stored_key != repr(key) or not (isinstance(cls, type) and issubclass(cls, AutomatonQueries)):
                raise ValueError("the entry is for another key")
            compiled = cls.from_disk_state(state, vocabulary, encode, **bounds)
        except Exception as e:  # noqa: BLE001 - whatever is wrong with the file, it is rebuilt
            logger.warning("grammar cache: ignoring %s (%s: %s); compiling again", path.name, type(e).__name__, e)
            self.rejected += 1
            _unlink(path)
            return None
        self.hits += 1
        try:
            os.utime(path)  # recently used
        except OSError:
            pass
        return compiled

    def save(self, key: tuple, compiled: AutomatonQueries, build_s: float | None = None) -> Path | None:
        """Write ``compiled`` (before it is shared with other threads); never raises."""
        if build_s is not None and build_s < self.min_build_s:
            return None
        path = self.path_of(key, compiled.vocabulary.fingerprint)
        if path is None:
            return None
        try:
            buf = io.BytesIO()
            pickle.dump((repr(key), type(compiled), compiled.disk_state()), buf, protocol=5)
            payload = buf.getvalue()
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-", suffix=_SUFFIX)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(MAGIC + hashlib.sha256(payload).digest() + payload)
                os.replace(tmp, path)
            except BaseException:
                _unlink(Path(tmp))
                raise
        except Exception as e:  # noqa: BLE001 - a cache that cannot write only costs a compile later
            logger.warning("grammar cache: cannot write an entry (%s: %s)", type(e).__name__, e)
            return None
        self.writes += 1
        self._evict()
        return path

    def entries(self) -> list[Path]:
        return sorted(self.directory.glob(f"*{_SUFFIX}"))

    def _decode(self, data: bytes):
        if len(data) < _HEADER or data[: len(MAGIC)] != MAGIC:
            raise ValueError("not a grammar cache entry of this format (or truncated)")
        payload = data[_HEADER:]
        if hashlib.sha256(payload).digest() != data[len(MAGIC) : _HEADER]:
            raise ValueError("the entry's digest does not match its contents (truncated or corrupt)")
        return safe_loads(payload)

    def _evict(self) -> None:
        """Remove least recently used entries past ``max_bytes``, and stale temporary files."""
        with self._lock:
            files, total, now = [], 0, time.time()
            for path in self.directory.iterdir():
                try:
                    st = path.stat()
                except OSError:
                    continue  # removed by another process meanwhile
                if path.name.startswith(".tmp-"):
                    if now - st.st_mtime > _STALE_TMP_S:
                        _unlink(path)
                    continue
                if path.name.endswith(_SUFFIX):
                    files.append((st.st_mtime, st.st_size, path))
                    total += st.st_size
            for _, size, path in sorted(files):
                if total <= self.max_bytes:
                    break
                _unlink(path)
                total -= size


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass
