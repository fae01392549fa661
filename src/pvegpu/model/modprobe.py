"""The `softdep` lines of the host's /etc/modprobe.d, as the facts' files say, worked out
once per facts value.

kmod honours only the first `softdep` line for a module, taking the files in name order;
pvegpu's own modprobe.d file makes a moved function's host driver load vfio-pci first,
so an earlier file's softdep for that driver wins over it (`softdep-shadowed`,
planning/findings.py). Discovery keeps each file of /etc/modprobe.d whole
(`HostFacts.files`); the planner asks here, so it looks no file up by path and scans no
text. No I/O here.
"""

from __future__ import annotations

import attrs

from pvegpu.model.facts import HostFacts
from pvegpu.values import value_class

MODPROBE_DIR = "etc/modprobe.d"


@value_class
@attrs.frozen(eq=False, repr=False)
class Softdep:
    """One `softdep MODULE ...` line of a modprobe.d file."""

    path: str
    """The file, root-relative (`etc/modprobe.d/nvidia.conf`)."""
    name: str
    """The file's name, the order kmod reads the directory in."""
    line: str
    """The line as written, without its surrounding blanks."""
    module: str
    words: tuple[str, ...]
    """Every word of the line, `softdep` and the module first."""


def softdeps(facts: HostFacts) -> tuple[Softdep, ...]:
    """Every softdep line of the facts' /etc/modprobe.d files, in the facts' file order,
    then line order. Kept per facts value (`HostFacts.derived`)."""
    return facts.derived(_softdeps)


def _softdeps(facts: HostFacts) -> tuple[Softdep, ...]:
    found = []
    for file in facts.files:
        directory, _, name = file.path.rpartition("/")
        if directory != MODPROBE_DIR:
            continue
        for line in file.content.splitlines():
            words = tuple(line.split())
            if len(words) >= 2 and words[0] == "softdep":
                found.append(Softdep(file.path, name, line.strip(), words[1], words))
    return tuple(found)
