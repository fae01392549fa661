"""Replace an output directory with a new set of files, all or nothing, and nothing else.

`--out` is the only place `pvegpu render` writes. The new bundle is written into a fresh
directory beside `--out` (same filesystem, so the final rename is atomic), then swapped
in; a failure at any point removes the half-written directory and leaves the previous
bundle as it was. The previous bundle is only replaced when every file in it is one its
own MANIFEST.json lists: anything else (notes, a symlink someone put there) is refused
rather than deleted. No symlink is followed: new files are created with O_EXCL and
O_NOFOLLOW inside the fresh directory, and old ones are only ever removed.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path, PurePosixPath

from pvegpu.errors import Problem, RenderError

Files = Mapping[str, tuple[str, int]]
"""OUT-relative POSIX path -> (content, mode)."""

NEW_PREFIX = ".pvegpu-new-"
OLD_PREFIX = ".pvegpu-old-"


def _refuse(code: str, subject: str, message: str, fix: str) -> RenderError:
    return RenderError([Problem(code, subject, message, fix)])


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


def previous_files(
    out: Path, manifest: str, schema: str, also: Iterable[str] = ()
) -> set[PurePosixPath] | None:
    """The files the bundle in `out` says it holds (its manifest lists them, plus the
    manifest itself and `also`); None when `out` holds no pvegpu bundle."""
    path = out / manifest
    try:
        st = path.lstat()
        if not stat.S_ISREG(st.st_mode):
            return None
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("schema") != schema:
        return None
    entries = doc.get("artifacts", [])
    if not isinstance(entries, list):
        return None
    listed = {PurePosixPath(manifest), *(PurePosixPath(a) for a in also)}
    for index, entry in enumerate(entries):
        file = entry.get("file") if isinstance(entry, dict) else None
        if file is not None:
            listed.add(relative_path(file, subject=f"{path}: artifacts[{index}].file"))
    return listed


def _tree(root: Path) -> tuple[set[PurePosixPath], list[PurePosixPath]]:
    """(regular files, any other non-directory) under `root`; links are never followed."""
    files: set[PurePosixPath] = set()
    odd: list[PurePosixPath] = []
    for dirpath, dirnames, filenames in os.walk(root):  # os.walk does not follow links
        base = Path(dirpath)
        for name in [*filenames, *[d for d in dirnames if (base / d).is_symlink()]]:
            rel = PurePosixPath((base / name).relative_to(root).as_posix())
            if stat.S_ISREG((base / name).lstat().st_mode):
                files.add(rel)
            else:
                odd.append(rel)
    return files, sorted(odd)


def check_replaceable(out: Path, listed: Callable[[Path], set[PurePosixPath] | None]) -> None:
    """Refuse unless `out` is absent, an empty directory, or exactly a previous bundle."""
    try:
        st = out.lstat()
    except FileNotFoundError:
        return
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
    present, odd = _tree(out)
    if not present and not odd:
        return
    known = listed(out)
    if known is None:
        raise _refuse(
            "output-not-empty",
            str(out),
            "holds files that are not a pvegpu bundle (no pvegpu MANIFEST.json)",
            "choose a new or empty --out directory",
        )
    foreign = sorted(present - known) + odd
    if foreign:
        shown = ", ".join(str(p) for p in foreign[:5]) + (" ..." if len(foreign) > 5 else "")
        raise _refuse(
            "output-not-empty",
            str(out),
            f"holds files its MANIFEST.json does not list ({shown}); replacing the bundle "
            "would delete them",
            "move them out of --out, or choose a new --out directory",
        )


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


def replace_directory(out: Path, files: Files, *, check: Callable[[Path], None]) -> list[Path]:
    """Make `out` hold exactly `files`; returns their final paths. All or nothing.

    `check(out)` runs first and raises when `out` must not be replaced.
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
        old = _swap(out, new, parent)
    except OSError as err:
        shutil.rmtree(new, ignore_errors=True)
        raise _os_problem(out, err) from err
    except BaseException:
        shutil.rmtree(new, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return [out.joinpath(*rels[name].parts) for name in files]


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
