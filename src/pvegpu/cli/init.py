"""`pvegpu init`: the host's GPU split as it is now, written as a spec to start from.

Thin: discovery reads the root, `planning.current` decides which pools express the
current state, `rendering.init_spec` writes the TOML. What the spec cannot express goes
to stderr too, so it is seen when the spec is written to a file.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from pvegpu.diagnostic import Diagnostic
from pvegpu.errors import RenderError
from pvegpu.model.current import CurrentSplit
from pvegpu.pipeline import init_host
from pvegpu.rendering.init_spec import pool_summaries

SCHEMA = "pvegpu.init/1"


def _refuse_existing(out: Path) -> None:
    if os.path.lexists(out):
        raise RenderError(
            [
                Diagnostic.error(
                    "output-exists",
                    str(out),
                    "the file exists; init never overwrites a spec (it may be the one you edited)",
                    f"name another file, or remove this one first: rm {out}",
                )
            ]
        )


def _write(out: Path, text: str) -> None:
    try:
        # "x": created here or refused, even if another process made it since the check.
        with out.open("x", encoding="utf-8") as file:
            file.write(text)
    except FileExistsError:
        _refuse_existing(out)
        raise
    except OSError as err:
        raise RenderError(
            [
                Diagnostic.error(
                    "output-unwritable",
                    str(out),
                    f"cannot write the spec: {err.strerror}",
                    "choose a path in a directory you can write",
                )
            ]
        ) from None


def document(split: CurrentSplit, text: str, out: Path | None) -> dict[str, Any]:
    """What `init --json` prints (docs/cli.md)."""
    return {
        "schema": SCHEMA,
        "node": split.node,
        "out": None if out is None else str(out),
        "spec": text,
        "pools": [
            {
                "name": p.name,
                "kind": str(p.kind),
                "gpus": [str(a) for a in p.gpus],
                "vmid": p.vmid,
                "devices": p.devices,
                "mapping": p.mapping,
            }
            for p in split.pools
        ],
        "free": [str(a) for a in split.free],
        "not_expressed": [{"subject": n.subject, "message": n.message} for n in split.unexpressed],
    }


def run_init(args: argparse.Namespace) -> int:
    if args.out is not None:
        _refuse_existing(args.out)  # before reading the host: nothing to do if it fails
    split, text = init_host(args.root)
    if args.out is not None:
        _write(args.out, text)
    for line in pool_summaries(split):
        print(f"pvegpu init: {line}", file=sys.stderr)
    if not split.pools:
        print("pvegpu init: no pool: the spec needs one before it plans", file=sys.stderr)
    for note in split.unexpressed:
        print(f"pvegpu init: not expressed: {note.subject}: {note.message}", file=sys.stderr)
    if args.json:
        print(json.dumps(document(split, text, args.out), indent=2))
    elif args.out is None:
        sys.stdout.write(text)
    else:
        print(f"pvegpu init: wrote {args.out}", file=sys.stderr)
    return 0
