"""What `pvegpu plan` prints for a file: its unified diff against what the root holds now."""

from __future__ import annotations

from pathlib import Path

from pvegpu.host.reader import RootReader
from pvegpu.model.artifact import HOST, Artifact
from pvegpu.redact import redact_text


def current(root: Path, artifact: Artifact) -> str | None:
    """What the file is now: the host file under root, else the base the patch read."""
    if artifact.target == HOST:
        # Through the root reader, like discovery: links stay inside the root, only
        # regular files are opened, a non-UTF-8 file is a typed error.
        text = RootReader(root).read(artifact.path)
        if text is not None:
            return text
    return artifact.base.content if artifact.base else None


def diff(root: Path, artifact: Artifact) -> str:
    # Imported here: `render` imports this module (cli/plan.py runs both) but never diffs,
    # and difflib costs a kpro6 render about 18 ms.
    import difflib

    before = current(root, artifact)
    where = artifact.path if artifact.target == HOST else f"{artifact.target}/{artifact.path}"
    # Diffs are pasted into tickets: secret values (a token in the old unit) are blanked
    # on both sides, so a changed secret still shows as a changed line, never its value.
    lines = difflib.unified_diff(
        redact_text(before or "").splitlines(keepends=True),
        redact_text(artifact.content).splitlines(keepends=True),
        fromfile=f"a/{where}" if before is not None else "/dev/null",
        tofile=f"b/{where}",
    )
    return "".join(
        line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines
    )
