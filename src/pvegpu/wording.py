"""Small helpers for the sentences pvegpu writes into reasons, findings and summaries."""

from __future__ import annotations


def plural(n: int, noun: str) -> str:
    """`1 GPU`, `4 GPUs`, `0 functions`."""
    return f"{n} {noun}{'' if n == 1 else 's'}"
