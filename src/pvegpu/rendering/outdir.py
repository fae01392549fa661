"""Replace an output directory with a new set of files, all or nothing, and nothing else.

`--out` is the only place `pvegpu render` writes. The new bundle is written into a fresh
directory beside `--out` (same filesystem, so the final rename is atomic), then swapped
in; a failure at any point removes the half-written directory and leaves the previous
bundle as it was. The previous bundle is only replaced when every entry in it is one its
own MANIFEST.json lists, or a directory one of those files is in: anything else (notes,
a symlink someone put there, an empty directory, a MANIFEST.json that is a directory or
not pvegpu's) is refused rather than deleted. OUT is checked again just before the swap,
and afterwards only the files the check found listed are deleted, so nothing that appears
meanwhile is lost. No symlink is followed: new files are created with O_EXCL and
O_NOFOLLOW inside the fresh directory, and old ones are only ever removed.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path, PurePosixPath

from pvegpu.diagnostic import Diagnostic
from pvegpu.errors import RenderError

Files = Mapping[str, tuple[str, int]]
"""OUT-relative POSIX path -> (content, mode)."""

NEW_PREFIX = ".pvegpu-new-"
OLD_PREFIX = ".pvegpu-old-"


def _refuse(code: str, subject: str, message: str, fix: str) -> RenderError:
    return RenderError([Diagnostic.error(code, subject, message, fix)])


def relative_path(text: object, *, subject: str) -> PurePosixPath:
    """A bundle-relative path: relative, no `..`, no empty or `.` parts; else refused."""
    if not isinstance(text, str) or not text or "\x00" in text:
        raise _refuse("manifest-path", subject, f"{text!r} is not a file path", _REDO)
    path = PurePosixPath(text)
    if path.is_absolute() or any(p in ("..", ".") for p in text.split("/")) or "//" in text:
        raise _refuse(
            "manifest-path",
            subject,
            f"{text!r} is absolute or leaves the bundle directory",
            _REDO,
        )
    return path


_REDO = "render into a new, empty --out directory"
_MOVE = "move it out of --out, or choose a new --out directory"


def _kind(path: Path, mode: int) -> str:
    if stat.S_ISLNK(mode):
        try:
            return f"a symbolic link (to {str(path.readlink())!r})"
        except OSError:  # gone since the lstat: still not a file pvegpu wrote
            return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device node"


def _unreadable(path: Path, err: OSError) -> RenderError:
    return _refuse(
        "output-unreadable",
        str(path),
        f"cannot be read ({err.strerror or err}); pvegpu replaces a previous bundle only "
        "when it can tell every file in it is its own",
        "make it readable for this user, or choose a new --out directory",
    )


def _read_text(path: Path) -> str:
    # No link followed and no wait on a FIFO put there after the lstat.
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    with os.fdopen(os.open(path, flags), "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        return handle.read().decode("utf-8", errors="strict")


def previous_files(
    out: Path, manifest: str, schema: str, also: Iterable[str] = ()
) -> set[PurePosixPath] | None:
    """The files the bundle in `out` says it holds (its manifest lists them, plus the
    manifest itself and `also`); None when `out` has no `manifest`.

    A manifest that is there but is not a regular file, cannot be read, or is not this
    `schema`'s is refused: without it nothing in `out` is known to be pvegpu's.
    """
    path = out / manifest
    try:
        st = path.lstat()
    except FileNotFoundError:
        return None
    except OSError as err:
        raise _unreadable(path, err) from err
    if not stat.S_ISREG(st.st_mode):
        raise _refuse(
            "output-not-empty",
            str(path),
            f"is {_kind(path, st.st_mode)}, not the file pvegpu writes; pvegpu deletes "
            "only what a previous bundle's manifest lists",
            _MOVE,
        )
    try:
        text = _read_text(path)
    except OSError as err:
        raise _unreadable(path, err) from err
    except ValueError:  # not UTF-8
        text = ""
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    entries = doc.get("artifacts", []) if isinstance(doc, dict) else None
    if not isinstance(doc, dict) or doc.get("schema") != schema or not isinstance(entries, list):
        raise _refuse(
            "output-not-empty",
            str(path),
            f'is not a pvegpu bundle\'s manifest (JSON with "schema": "{schema}"), so '
            "nothing beside it is known to be pvegpu's",
            _MOVE,
        )
    listed = {PurePosixPath(manifest), *(PurePosixPath(a) for a in also)}
    for index, entry in enumerate(entries):
        file = entry.get("file") if isinstance(entry, dict) else None
        if file is not None:
            listed.add(relative_path(file, subject=f"{path}: artifacts[{index}].file"))
    return listed


def _raise(err: OSError) -> None:
    raise err


def _tree(root: Path) -> tuple[set[PurePosixPath], set[PurePosixPath], list[PurePosixPath]]:
    """(regular files, directories, anything else) under `root`; links are never followed.

    A directory that cannot be listed raises: what it holds cannot be judged."""
    files: set[PurePosixPath] = set()
    dirs: set[PurePosixPath] = set()
    odd: list[PurePosixPath] = []
    # os.walk lists a link to a directory among the directories but does not enter it.
    for dirpath, dirnames, filenames in os.walk(root, onerror=_raise):
        base = Path(dirpath)
        for name in [*filenames, *dirnames]:
            rel = PurePosixPath((base / name).relative_to(root).as_posix())
            mode = (base / name).lstat().st_mode
            if stat.S_ISREG(mode):
                files.add(rel)
            elif stat.S_ISDIR(mode):
                dirs.add(rel)
            else:
                odd.append(rel)
    return files, dirs, sorted(odd)


def check_replaceable(
    out: Path, listed: Callable[[Path], set[PurePosixPath] | None]
) -> frozenset[PurePosixPath]:
    """Refuse unless `out` is absent, an empty directory, or exactly a previous bundle.

    Returns the previous bundle's files present in `out` (none when it is absent or
    empty): the only files `replace_directory` deletes."""
    try:
        st = out.lstat()
    except FileNotFoundError:
        return frozenset()
    except OSError as err:
        raise _os_problem(out, err) from err
    if stat.S_ISLNK(st.st_mode):
        raise _refuse(
            "output-is-symlink",
            str(out),
            "is a symbolic link; pvegpu never writes through a link",
            f"pass the directory it points to ({out.readlink()}) or a new path",
        )
    if not stat.S_ISDIR(st.st_mode):
        raise _refuse("output-not-a-directory", str(out), "exists and is not a directory", _REDO)
    try:
        present, dirs, odd = _tree(out)
    except OSError as err:
        raise _unreadable(Path(err.filename or out), err) from err
    if not present and not dirs and not odd:
        return frozenset()
    known = listed(out)
    if known is None:
        raise _refuse(
            "output-not-empty",
            str(out),
            f"holds {_shown([*sorted(present), *_slashed(dirs), *odd])} but no pvegpu "
            "MANIFEST.json: none of it is known to be pvegpu's",
            "choose a new or empty --out directory",
        )
    # A bundle's directories are the ones its files are in. Any other directory (an
    # empty one, or one where the manifest names a file) is not pvegpu's to delete.
    parents = {p for rel in known for p in rel.parents if p.parts}
    foreign = [*sorted(present - known), *_slashed(dirs - parents), *odd]
    if foreign:
        shown = _shown(foreign)
        raise _refuse(
            "output-not-empty",
            str(out),
            f"holds files its MANIFEST.json does not list ({shown}); replacing the bundle "
            "would delete them",
            "move them out of --out, or choose a new --out directory",
        )
    return frozenset(present & known)


def _slashed(dirs: Iterable[PurePosixPath]) -> list[str]:
    return [f"{d}/" for d in sorted(dirs)]


def _shown(entries: Sequence[object]) -> str:
    return ", ".join(str(p) for p in entries[:5]) + (" ..." if len(entries) > 5 else "")


def _os_problem(path: Path, err: OSError) -> RenderError:
    if err.errno == errno.ENAMETOOLONG:
        return _refuse("output-path-too-long", str(path)[:200], "the path is too long", _REDO)
    return _refuse(
        "output-unwritable",
        str(path),
        f"cannot write: {err.strerror or err}",
        "choose an --out directory whose parent exists and is writable",
    )


def _write_new(directory: Path, rel: PurePosixPath, content: str, mode: int) -> None:
    target = directory.joinpath(*rel.parts)
    target.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(target, flags, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
        handle.write(content)
        os.fchmod(handle.fileno(), mode)


def replace_directory(
    out: Path, files: Files, *, check: Callable[[Path], Collection[PurePosixPath]]
) -> list[Path]:
    """Make `out` hold exactly `files`; returns their final paths. All or nothing.

    `check(out)` raises when `out` must not be replaced, and returns the files of it that
    may be deleted (`check_replaceable`). It runs before anything is written and again
    just before the swap, so a file put into `out` meanwhile is refused, not deleted.
    """
    rels = {name: relative_path(name, subject=f"bundle file {name!r}") for name in files}
    check(out)
    parent = out.parent if str(out.parent) else Path()
    try:
        new = Path(tempfile.mkdtemp(prefix=NEW_PREFIX, dir=parent))
    except OSError as err:
        raise _os_problem(out, err) from err
    try:
        for name, (content, mode) in files.items():
            _write_new(new, rels[name], content, mode)
        new.chmod(0o755)
        previous = check(out)
        old = _swap(out, new, parent)
    except OSError as err:
        shutil.rmtree(new, ignore_errors=True)
        raise _os_problem(out, err) from err
    except BaseException:
        shutil.rmtree(new, ignore_errors=True)
        raise
    if old is not None:
        _remove_previous(old, previous)
    return [out.joinpath(*rels[name].parts) for name in files]


def _remove_previous(old: Path, previous: Collection[PurePosixPath]) -> None:
    """Delete the previous bundle's files, then every directory left empty. Not a
    recursive delete: whatever else is in `old` by now (only a race since the last check
    can put it there) stays, in `old`, rather than being lost."""
    for rel in previous:
        path = old.joinpath(*rel.parts)
        with contextlib.suppress(OSError):
            if stat.S_ISREG(path.lstat().st_mode):
                path.unlink()
    for dirpath, _, _ in os.walk(old, topdown=False):  # children before their parents
        with contextlib.suppress(OSError):
            Path(dirpath).rmdir()


def _swap(out: Path, new: Path, parent: Path) -> Path | None:
    """Rename `new` to `out`; an existing `out` is moved aside first and returned."""
    if not out.exists():
        new.rename(out)
        return None
    old = Path(tempfile.mkdtemp(prefix=OLD_PREFIX, dir=parent))
    old.rmdir()  # mkdtemp reserved a fresh name; rename needs it absent
    out.rename(old)
    try:
        new.rename(out)
    except OSError:
        old.rename(out)  # put the previous bundle back before reporting
        raise
    return old
