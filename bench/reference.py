"""A same-facts reference reader: `discover --json` of a benchmark tree, in plain Python.

    python bench/reference.py ROOT

What a careful pure-Python reader of the same tree costs, the yardstick for pvegpu's own
per-function work (issue 24). It reads the facts `pvegpu discover --json` prints for the
trees `make bench` writes (GPUs with their audio, NVMe drives, NICs with SR-IOV virtual
functions, root ports, one NVIDIA driver) and prints the same document, byte for byte:
`make bench` compares the two outputs and refuses to report a ratio when they differ, so
the reference cannot get ahead by skipping facts. It keeps pvegpu's guarantees too:

- every path is resolved inside the root (links component by component, a directory
  known real is cached; a target that leaves the root or is missing is an error);
- only regular files are opened (the listing's d_type, then fstat of the open file, with
  O_NOFOLLOW|O_NONBLOCK), each capped at 64 MiB;
- the values are checked (uevent's ids and slot name, link targets, numbers, group
  membership both ways).

It builds no objects but dicts and tuples, imports only the standard library, and stops
with exit status 3 at anything the benchmark trees do not have (a host it was not written
for), rather than guess. It is not a second discovery: pvegpu never imports it.
"""

# os, not pathlib: the reference is the plain system calls, as a careful script makes them.
# ruff: noqa: PTH115, PTH208

from __future__ import annotations

import json
import os
import re
import stat
import sys
from json.encoder import encode_basestring_ascii as _string

CAP = 64 * 1024 * 1024
CHUNK = 64 * 1024
FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC
DEVICES = "sys/bus/pci/devices"
GROUPS = "sys/kernel/iommu_groups"
HEX = frozenset("0123456789ABCDEF")
_UUID = re.compile(r"GPU-[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}")


class RefusedError(Exception):
    """The tree is not one this reader was written for, or breaks a rule."""


class Tree:
    """Paths relative to the root; links resolved inside it; directories cached."""

    def __init__(self, root: str) -> None:
        self.prefix = root.rstrip("/") + "/"
        self.real_dirs: set[str] = {""}

    def _is_real_dir(self, rel: str) -> bool:
        """Is `rel` (no links in its parent) a directory, not a link?"""
        if rel in self.real_dirs:
            return True
        try:
            mode = os.lstat(self.prefix + rel).st_mode
        except FileNotFoundError:
            return False
        if stat.S_ISDIR(mode):
            self.real_dirs.add(rel)
            return True
        return False

    def follow(self, link: str, target: str) -> str:
        """The real directory `target`, the text of link `link`, names inside the root."""
        parts = link.split("/")[:-1]
        for name in target.split("/"):
            if name == "..":
                if not parts:
                    raise RefusedError(f"{link}: {target!r} leaves the root")
                parts.pop()
            elif name and name != ".":
                parts.append(name)
                here = "/".join(parts)
                if not self._is_real_dir(here):
                    raise RefusedError(f"{link}: {target!r} is not a real directory in the root")
        return "/".join(parts)

    def is_file(self, rel: str) -> bool:
        """Is `rel` a regular file, its directories real (no link on the way)?"""
        parent = rel.rpartition("/")[0]
        parts = parent.split("/")
        if not all(self._is_real_dir("/".join(parts[: i + 1])) for i in range(len(parts))):
            return False
        try:
            return stat.S_ISREG(os.lstat(self.prefix + rel).st_mode)
        except FileNotFoundError:
            return False

    def listing(self, rel: str) -> dict[str, os.DirEntry[str]]:
        with os.scandir(self.prefix + rel) as entries:
            return {e.name: e for e in entries}

    def read(self, rel: str, entry: os.DirEntry[str] | None = None) -> str:
        if entry is not None and not entry.is_file(follow_symlinks=False):
            raise RefusedError(f"{rel}: not a regular file")
        fd = os.open(self.prefix + rel, FLAGS)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise RefusedError(f"{rel}: not a regular file")
            # Small reads until EOF (one read of CAP bytes would allocate 64 MiB each time).
            data = chunk = os.read(fd, CHUNK)
            while chunk:
                chunk = os.read(fd, CHUNK)
                data += chunk
                if len(data) > CAP:
                    raise RefusedError(f"{rel}: larger than {CAP} bytes")
        finally:
            os.close(fd)
        return data.decode()


def one_line(text: str, what: str) -> str:
    if text.count("\n") > 1 or (text and not text.endswith("\n")):
        raise RefusedError(f"{what}: expected one line")
    return text[:-1]


def number(text: str, what: str) -> int:
    value = one_line(text, what)
    if not value.isascii() or not value.isdigit():
        raise RefusedError(f"{what}: expected a number, got {value!r}")
    return int(value)


def uevent(text: str, slot: str, what: str) -> tuple[int, int, int, int, int]:
    fields = dict(line.split("=", 1) for line in text.splitlines())
    ids = fields["PCI_ID"].split(":")
    subsys = fields["PCI_SUBSYS_ID"].split(":")
    klass = fields["PCI_CLASS"]
    for part in (*ids, *subsys):
        if len(part) != 4 or not HEX.issuperset(part):
            raise RefusedError(f"{what}: bad ids")
    if fields["PCI_SLOT_NAME"] != slot or not 4 <= len(klass) <= 6 or not HEX.issuperset(klass):
        raise RefusedError(f"{what}: bad slot or class")
    return int(ids[0], 16), int(ids[1], 16), int(subsys[0], 16), int(subsys[1], 16), int(klass, 16)


def function(tree: Tree, name: str) -> dict[str, object]:
    base = f"{DEVICES}/{name}"
    real = tree.follow(base, os.readlink(tree.prefix + base))
    entries = tree.listing(real)

    def text(file: str) -> str | None:
        entry = entries.get(file)
        return None if entry is None else tree.read(f"{real}/{file}", entry)

    def link(file: str) -> tuple[str, str] | None:
        entry = entries.get(file)
        if entry is None:
            return None
        if not entry.is_symlink():
            raise RefusedError(f"{base}/{file}: not a link")
        target = os.readlink(tree.prefix + f"{real}/{file}")
        return target, tree.follow(f"{real}/{file}", target)

    ids = uevent(text("uevent") or "", name, f"{base}/uevent")
    fn: dict[str, object] = {"address": name, "ids": ids, "sysfs_path": real}
    numa = int(one_line(text("numa_node") or "-1\n", f"{base}/numa_node"))
    fn["numa_node"] = None if numa == -1 else numa
    group = link("iommu_group")
    if group is not None:
        if group[1] != f"{GROUPS}/{group[0].rpartition('/')[2]}":
            raise RefusedError(f"{base}/iommu_group: not a group directory")
        fn["iommu_group"] = number(group[0].rpartition("/")[2] + "\n", base)
    else:
        fn["iommu_group"] = None
    driver = link("driver")
    fn["driver"] = None if driver is None else driver[0].rpartition("/")[2]
    override = one_line(text("driver_override") or "(null)\n", base)
    fn["driver_override"] = None if override == "(null)" else override
    cpus = text("local_cpulist")
    fn["local_cpus"] = None if cpus is None else one_line(cpus, base)
    speed = text("current_link_speed")
    fn["link"] = None
    if speed is not None:
        fn["link"] = (
            one_line(speed, base),
            number(text("current_link_width") or "", base),
            one_line(text("max_link_speed") or speed, base),
            number(text("max_link_width") or "", base),
        )
    if any(d in entries for d in ("mdev_supported_types", "nvidia")):
        raise RefusedError(f"{base}: mdev directories are not in the benchmark trees")
    physfn = link("physfn")
    fn["physfn"] = None if physfn is None else physfn[0].rpartition("/")[2]
    fn["sriov"] = None
    if "sriov_totalvfs" in entries:
        total = number(text("sriov_totalvfs") or "", base)
        num = number(text("sriov_numvfs") or "", base)
        autoprobe = one_line(text("sriov_drivers_autoprobe") or "1\n", base)
        if num > total or autoprobe not in ("0", "1"):
            raise RefusedError(f"{base}: bad SR-IOV attributes")
        vfs = []
        for index in range(num):
            vf = link(f"virtfn{index}")
            if vf is None:
                raise RefusedError(f"{base}/virtfn{index}: missing")
            vfs.append(vf[0].rpartition("/")[2])
        fn["sriov"] = {
            "total_vfs": total,
            "num_vfs": num,
            "drivers_autoprobe": autoprobe == "1",
            "vfs": vfs,
        }
    return fn


def _null(value: object) -> str:
    return "null" if value is None else str(value)


def function_text(fn: dict[str, object]) -> str:
    vendor, device, sub_vendor, sub_device, klass = fn["ids"]  # type: ignore[misc]
    link = fn["link"]
    link_text = "null"
    if link is not None:
        speed, width, max_speed, max_width = link  # type: ignore[misc]
        link_text = (
            "{\n"
            f'      "current_speed": {_string(speed)},\n'
            f'      "current_width": {width},\n'
            f'      "max_speed": {_string(max_speed)},\n'
            f'      "max_width": {max_width}\n'
            "    }"
        )
    tail = ""
    if fn["physfn"] is not None:
        tail += f',\n    "physfn": "{fn["physfn"]}"'
    if fn["sriov"] is not None:
        tail += ',\n    "sriov": ' + json.dumps(fn["sriov"], indent=2).replace("\n", "\n    ")
    driver, override, cpus = fn["driver"], fn["driver_override"], fn["local_cpus"]
    return (
        "  {\n"
        f'    "address": "{fn["address"]}",\n'
        f'    "vendor": "{vendor:04x}",\n'
        f'    "device": "{device:04x}",\n'
        f'    "subsystem_vendor": "{sub_vendor:04x}",\n'
        f'    "subsystem_device": "{sub_device:04x}",\n'
        f'    "class": "{klass:06x}",\n'
        f'    "sysfs_path": {_string(fn["sysfs_path"])},\n'  # type: ignore[arg-type]
        f'    "numa_node": {_null(fn["numa_node"])},\n'
        f'    "iommu_group": {_null(fn["iommu_group"])},\n'
        f'    "driver": {"null" if driver is None else _string(driver)},\n'  # type: ignore[arg-type]
        f'    "driver_override": {"null" if override is None else _string(override)},\n'  # type: ignore[arg-type]
        f'    "local_cpus": {"null" if cpus is None else _string(cpus)},\n'  # type: ignore[arg-type]
        f'    "link": {link_text},\n'
        f'    "mdev_capable": false{tail}\n'
        "  }"
    )


def gpu_information(tree: Tree, address: str) -> tuple[int | None, str | None, str | None]:
    path = f"proc/driver/nvidia/gpus/{address}/information"
    if not tree.is_file(path):
        return None, None, None
    fields = {}
    for line in tree.read(path).splitlines():
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    if fields.get("Bus Location", address) != address:
        raise RefusedError(f"{path}: another GPU's file")
    uuid = fields.get("GPU UUID")
    if uuid is not None and not _UUID.fullmatch(uuid):
        raise RefusedError(f"{path}: {uuid!r} is not a GPU UUID")
    return int(fields["Device Minor"]), fields.get("Model"), uuid


def char_majors(text: str) -> list[dict[str, object]]:
    lines = text.splitlines()
    if not lines or lines[0] != "Character devices:":
        raise RefusedError("proc/devices: no 'Character devices:' line")
    majors = []
    for line in lines[1:]:
        if not line.strip() or line.endswith(":"):
            break
        major, _, name = line.strip().partition(" ")
        majors.append((int(major), name.strip()))
    return [{"major": m, "name": n} for m, n in sorted(majors)]


def nvidia_driver(tree: Tree) -> dict[str, str] | None:
    path = "proc/driver/nvidia/version"
    if not tree.is_file(path):
        return None
    # `NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  590.48.01  Release ...`
    # (the proprietary one: `... UNIX x86_64 Kernel Module  590.48.01  ...`).
    kind, version = tree.read(path).splitlines()[0].split("  ")[:2]
    open_module = " Open Kernel Module" in kind
    return {"version": version, "flavor": "open" if open_module else "proprietary"}


def config_files(tree: Tree) -> list[dict[str, str]]:
    files = []
    for directory in ("etc/pve/lxc", "etc/pve/qemu-server"):
        # /etc/pve/lxc is a link to nodes/<node>/lxc: followed inside the root.
        try:
            is_link = stat.S_ISLNK(os.lstat(tree.prefix + directory).st_mode)
        except FileNotFoundError:
            continue
        real = directory
        if is_link:
            real = tree.follow(directory, os.readlink(tree.prefix + directory))
        elif not tree._is_real_dir(real):
            continue
        for entry in sorted(tree.listing(real).values(), key=lambda e: e.name):
            if entry.name.endswith(".conf"):
                path = f"{directory}/{entry.name}"
                files.append({"path": path, "content": tree.read(f"{real}/{entry.name}", entry)})
    for absent in ("etc/pve/mapping/pci.cfg", "etc/modprobe.d", "etc/systemd/system"):
        if os.path.lexists(tree.prefix + absent):
            raise RefusedError(f"{absent}: not in the benchmark trees")
    return files


def document(root: str) -> str:
    tree = Tree(root)
    node = tree.read("etc/hostname").strip().split(".", 1)[0]
    group_names = sorted(os.listdir(tree.prefix + GROUPS))
    tree.real_dirs.update(f"{GROUPS}/{g}" for g in group_names)
    functions = [function(tree, name) for name in sorted(os.listdir(tree.prefix + DEVICES))]
    by_address = {fn["address"]: fn for fn in functions}
    nodes_dir = "sys/devices/system/node"
    numa = []
    for name in os.listdir(tree.prefix + nodes_dir):
        if name.startswith("node") and name[4:].isdigit():
            cpus = one_line(tree.read(f"{nodes_dir}/{name}/cpulist"), name)
            numa.append({"id": int(name[4:]), "cpus": cpus})
    numa.sort(key=lambda n: n["id"])  # type: ignore[arg-type, return-value]
    groups = []
    for name in group_names:
        members = sorted(os.listdir(tree.prefix + f"{GROUPS}/{name}/devices"))
        for member in members:
            fn = by_address.get(member)
            if fn is None or fn["iommu_group"] != int(name):
                raise RefusedError(f"{GROUPS}/{name}/devices/{member}: not a function of the group")
        kind = one_line(tree.read(f"{GROUPS}/{name}/type"), name)
        groups.append((int(name), members, kind))
    groups.sort()
    listed = {gid: set(members) for gid, members, _ in groups}
    by_slot: dict[str, list[dict[str, object]]] = {}
    for fn in functions:
        group = fn["iommu_group"]
        if group is not None and fn["address"] not in listed.get(group, ()):  # type: ignore[call-overload]
            raise RefusedError(f"{fn['address']}: its group does not list it")
        by_slot.setdefault(str(fn["address"]).rpartition(".")[0], []).append(fn)
    gpus = []
    for fn in functions:
        klass = fn["ids"][4]  # type: ignore[index]
        if klass >> 16 not in (0x03, 0x12) or fn["physfn"] is not None:
            continue
        address = str(fn["address"])
        slot = address.rpartition(".")[0]
        companions = [
            o["address"]
            for o in by_slot[slot]
            if o["address"] != address
            and o["iommu_group"] == fn["iommu_group"]
            and o["ids"][4] >> 8 != 0x0604  # type: ignore[index]
            and o["physfn"] is None
        ]
        minor, model, uuid = gpu_information(tree, address)
        gpu = {"address": address, "companions": companions, "nvidia_minor": minor, "model": model}
        gpus.append(gpu if uuid is None else gpu | {"uuid": uuid})
    units = sorted(os.listdir(tree.prefix + "sys/class/iommu"))
    cmdline = tree.read("proc/cmdline")
    if "vfio" in cmdline:
        raise RefusedError("proc/cmdline: vfio-pci ids are not in the benchmark trees")
    snp = tree.read("sys/module/kvm_amd/parameters/sev_snp").strip()
    fields: list[tuple[str, object]] = [
        ("schema", "pvegpu.facts/1"),
        ("node", node),
        ("functions", "[\n" + ",\n".join(function_text(fn) for fn in functions) + "\n]"),
        ("gpus", gpus),
        ("numa_nodes", numa),
        (
            "iommu_groups",
            "[\n"
            + ",\n".join(
                "  {\n"
                f'    "id": {gid},\n'
                '    "members": [\n' + ",\n".join(f'      "{m}"' for m in members) + "\n    ],\n"
                f'    "type": "{kind}"\n'
                "  }"
                for gid, members, kind in groups
            )
            + "\n]",
        ),
        ("iommu", {"enabled": bool(units), "units": units}),
        ("sev_snp", snp in ("Y", "1")),
        ("nvidia", nvidia_driver(tree)),
        ("char_majors", char_majors(tree.read("proc/devices"))),
        ("cmdline", cmdline.strip()),
        ("vfio_ids", []),
        ("files", config_files(tree)),
        ("stats", []),
    ]
    out = []
    for name, value in fields:
        text = value if name in ("functions", "iommu_groups") else json.dumps(value, indent=2)
        out.append(f'  "{name}": {str(text).replace(chr(10), chr(10) + "  ")}')
    return "{\n" + ",\n".join(out) + "\n}\n"


def main(root: str) -> int:
    try:
        text = document(root)
    except (RefusedError, OSError, KeyError, ValueError, IndexError, StopIteration) as err:
        print(f"reference reader: {err!r}", file=sys.stderr)
        return 3
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
