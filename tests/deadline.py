"""Fail instead of spinning: what was a minutes-long loop must end within seconds."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


class HangError(Exception):
    """The code under test ran past its deadline."""


@contextmanager
def deadline(seconds: int) -> Iterator[None]:
    """Raise HangError in the block once `seconds` have passed (SIGALRM, main thread)."""

    def expire(signum: int, frame: FrameType | None) -> None:
        raise HangError(f"no result within {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
