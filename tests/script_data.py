"""The split script as template text plus the data the plan fills in.

Every example's split script is the same template around three data sections (the host
name in the header, the VFIO and HOST tables). One full script is pinned as a golden;
the others pin only their data, and `join_script(body, data)` rebuilds them exactly.
"""

from __future__ import annotations

import re

# The lines of the split script the plan fills in: the host's name in the header, and
# the VFIO and HOST tables (rows hold no quote: the renderer sanitises pool names).
SCRIPT_DATA = re.compile(
    r"^(?:# pvegpu-vfio-split: GPU split of Proxmox VE host .*"
    r"|(?:VFIO|HOST)='\n(?:[^'\n]*\n)*')$",
    re.MULTILINE,
)
DATA_MARK = "@DATA@"


def script_parts(script: str) -> tuple[str, str]:
    """(body, data) of a split script: data holds its data lines, body the template text
    around them, each data section replaced by DATA_MARK."""
    sections = SCRIPT_DATA.findall(script)
    assert len(sections) == 3, f"{len(sections)} data sections, not header + VFIO + HOST"
    return SCRIPT_DATA.sub(DATA_MARK, script), "".join(f"{s}\n" for s in sections)


def join_script(body: str, data: str) -> str:
    """The inverse of script_parts: the data sections put back in the body, in order."""
    pieces = body.split(DATA_MARK)
    sections = SCRIPT_DATA.findall(data)
    assert len(pieces) == len(sections) + 1
    return pieces[0] + "".join(s + rest for s, rest in zip(sections, pieces[1:], strict=True))
