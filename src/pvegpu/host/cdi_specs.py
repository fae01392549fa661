"""The GPU references in CDI specs (`/etc/cdi`, `/var/run/cdi`): the device nodes each named
device of a spec hands to a container, by number (`nvidia-ctk cdi generate` writes
`/dev/nvidia1`, `/dev/dri/renderD129`), so they are stale once the numbers change. The
spec's own structure says which device a node belongs to, whatever order its keys are
written in (nvidia-ctk sorts them: `containerEdits` before `name`); a JSON spec may be
one line. Pure: the texts are handed in (`host/references.py` reads them).
"""

from __future__ import annotations

import json
import re

import attrs

from pvegpu.host.gpu_index import GpuIndex
from pvegpu.host.host_references import Texts, host_ref
from pvegpu.model.references import GpuReference, NodeRef, ReferenceKind
from pvegpu.values import value_class

CDI_DIRS = ("etc/cdi", "var/run/cdi", "run/cdi")

_CDI_KIND = re.compile(r"""^\s*"?kind"?\s*:\s*"?([^",\s]+)""", re.MULTILINE)
_CDI_NODE = re.compile(r"""^-?\s*"?(?:hostPath|path)"?\s*:\s*"?(/dev/[^",\s]+)"?""")
_CDI_JSON_NODE = re.compile(r'"(?:hostPath|path)"\s*:\s*"(/dev/[^"]+)"')
_CDI_KEY = re.compile(r"""^-?\s*"?([A-Za-z_]+)"?\s*:\s*(.*?)\s*$""")


@value_class
@attrs.frozen(eq=False, repr=False)
class _CdiNode:
    """One device node of a CDI spec: the device it belongs to (None for the spec's
    top-level edits, which every device gets), where it is written, its host path."""

    device: str | None
    line: int
    text: str
    path: str


def cdi_references(files: Texts, index: GpuIndex) -> list[GpuReference]:
    """The device nodes a CDI spec hands each of its devices (`nvidia-ctk cdi generate`
    writes them by number: they are stale once the numbers change). The spec's own
    structure says which device a node is for, whatever order its keys are written in
    (nvidia-ctk sorts them: `containerEdits` before `name`); JSON specs may be one line."""
    found: list[GpuReference] = []
    for path, text in files:
        if text.lstrip().startswith("{"):
            kind, nodes = _cdi_json(text)
        else:
            found_kind = _CDI_KIND.search(text)
            kind, nodes = (found_kind[1] if found_kind else None), _cdi_yaml(text)
        if nodes is None:
            found.append(
                host_ref(
                    ReferenceKind.CDI,
                    path,
                    None,
                    path.rpartition("/")[2],
                    unresolved="it is not a CDI spec pvegpu can read (YAML or JSON with "
                    "`devices` and their `containerEdits.deviceNodes`), so pvegpu cannot "
                    "tell which device nodes it hands to containers",
                )
            )
            continue
        for node in nodes:
            target = index.path(node.path)
            if target is None or target.node is None:
                continue
            major, minor = target.node
            gpu = index.node(major, minor)
            selector = None
            if node.device is not None:
                selector = node.device if kind is None else f"{kind}={node.device}"
            found.append(
                host_ref(
                    ReferenceKind.CDI,
                    path,
                    node.line,
                    node.text,
                    node=NodeRef(major, minor),
                    node_path=node.path,
                    selector=selector,
                    gpus=() if gpu is None else (gpu,),
                )
            )
    return found


def _cdi_yaml(text: str) -> list[_CdiNode]:
    """The nodes of a YAML spec, by indentation: `devices:` at the top level holds a list
    whose items (`- ` at one indentation) are devices; each item's own `name:` key names
    it, before or after its edits."""
    found: list[_CdiNode] = []
    pending: list[tuple[int, str, str]] = []
    name: str | None = None
    in_devices = False
    item_indent: int | None = None

    def flush() -> None:
        nonlocal name
        device = name if in_devices else None
        found.extend(_CdiNode(device, n, t, p) for n, t, p in pending)
        pending.clear()
        name = None

    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.rstrip("\r")
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or stripped == "---":
            continue
        indent = len(line) - len(line.lstrip(" "))
        item = stripped.startswith("-")
        if indent == 0 and not item:
            flush()
            in_devices = stripped.startswith(("devices:", '"devices":'))
            item_indent = None
            continue
        if in_devices and item and (item_indent is None or indent == item_indent):
            item_indent = indent
            flush()
        key = _CDI_KEY.match(stripped)
        # The item's own name: its first key (`- name: x`) or a key at the item's keys'
        # indentation, two past the dash.
        own = item_indent is not None and (
            (item and indent == item_indent) or indent == item_indent + 2
        )
        if in_devices and own and key is not None and key[1] == "name":
            name = key[2].strip("'\"")
        node = _CDI_NODE.match(stripped)
        if node is not None:
            pending.append((number, stripped, node[1]))
    flush()
    return found


def _cdi_json(text: str) -> tuple[str | None, list[_CdiNode] | None]:
    """The kind and nodes of a JSON spec, each node at the line its path is written on;
    no nodes when the text is not JSON."""
    try:
        spec = json.loads(text)
    except ValueError:
        return None, None
    if not isinstance(spec, dict):
        return None, None
    kind = spec.get("kind") if isinstance(spec.get("kind"), str) else None
    owners: list[str | None] = []

    def walk(value: object, device: str | None) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                if key in ("path", "hostPath") and isinstance(item, str):
                    if item.startswith("/dev/"):
                        owners.append(device)
                else:
                    walk(item, device)
        elif isinstance(value, list):
            for item in value:
                walk(item, device)

    for key, value in spec.items():
        if key == "devices" and isinstance(value, list):
            for device in value:
                name = device.get("name") if isinstance(device, dict) else None
                walk(device, name if isinstance(name, str) else None)
        else:
            walk(value, None)
    hits = list(_CDI_JSON_NODE.finditer(text))
    if len(hits) != len(owners):
        return kind, None  # a /dev path pvegpu's walk and the text disagree on: unread
    return kind, [
        _CdiNode(device, text.count("\n", 0, hit.start()) + 1, hit[0], hit[1])
        for device, hit in zip(owners, hits, strict=True)
    ]
