"""JSON text from files and specs, read so that every way it can fail is a ValueError.

json.loads raises JSONDecodeError for bad syntax, but RecursionError for nesting past
the interpreter's limit (a few thousand levels of `[`) and a plain ValueError for an
integer of more than 4300 digits (Python's int/str conversion limit). Callers turn one
ValueError into their own typed refusal, naming their file or key.
"""

from __future__ import annotations

import json
from typing import Any


def load_json(text: str) -> Any:
    """json.loads, raising only ValueError (JSONDecodeError included)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise ValueError("nested deeper than Python's JSON reader goes") from None
    except ValueError:
        raise ValueError("a number with more digits than Python reads (4300)") from None
