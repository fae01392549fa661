"""model/guest_config.py: a guest config parsed once answers as pvefiles' rules did on the
raw text (the main section split off and parsed afresh, the pending section looked up by
name): snapshots, pending changes, comments, CRLF and an unterminated last line alike."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pvegpu.diagnostic import Diagnostic
from pvegpu.errors import PlanError, RenderError
from pvegpu.model.binder_units import binder_units
from pvegpu.model.facts import ConfigFile
from pvegpu.model.guest_config import GuestConfig
from pvegpu.model.guests import guests
from pvegpu.model.mapping_cfg import pci_cfg
from pvegpu.model.modprobe import softdeps
from pvegpu.pvefiles import lxccaps, lxcconf, pcicfg, qemuconf
from pvegpu.pvefiles.guestconf import ConfLine, parse_lines, section_named, split_sections
from pvegpu.vendors import CONTAINER_NODES as NODES
from pvegpu.vendors import DeviceNodes
from pvegpu.vendors.drm import DRM_NODES
from pvegpu.vendors.nvidia import NVIDIA
from pvegpu.vendors.partitions import MigSource
from strategies import LXC_MAJORS, MAPPED_PATHS, MAPPING, NVIDIA_CAPS_MAJOR, kpro6, lxc_configs
from strategies import vm_configs as vm_confs

LXC_PATH = "etc/pve/lxc/129.conf"
VM_PATH = "etc/pve/qemu-server/140.conf"
_MIG = NVIDIA.mig
assert _MIG is not None
MIG: MigSource = _MIG


def _guest(text: str, path: str = LXC_PATH) -> GuestConfig:
    return GuestConfig(ConfigFile(path, text))


def _main(text: str) -> tuple[ConfLine, ...]:
    """The main section as the text predicates read it: split off, then parsed afresh."""
    return parse_lines(split_sections(text)[0].text)


def _pending(text: str, name: str) -> tuple[ConfLine, ...]:
    section = section_named(text, name)
    return () if section is None else parse_lines(section.text)


def _shown(problems: tuple[Diagnostic, ...]) -> list[tuple[str, str, str, str]]:
    return [(p.code, p.subject, p.message, p.fix) for p in problems]


def _cores(config: GuestConfig | tuple[ConfLine, ...]) -> int | str | None:
    try:
        if isinstance(config, GuestConfig):
            return config.cores()
        return lxcconf.cores(config, LXC_PATH)
    except PlanError as error:
        return error.problems[0].code


# Lines the generated configs lack: privilege, userspace, MIG, cores, in every spelling
# a hand edit leaves (commented, spaced, repeated).
_EXTRA_LXC = st.sampled_from(
    [
        "unprivileged: 1",
        "unprivileged: 0",
        "unprivileged:  1 ",
        "#unprivileged: 1",
        "cores: 8",
        "cores: x",
        "cores: +4",
        "lxc.mount.entry: /var/lib/pvegpu/userspace/current opt/pvegpu/driver none bind,ro",
        "# lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file",
        "lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file",
        "lxc.cgroup.devices.allow: c 509:* rwm",
        "lxc.cgroup2.devices.allow: c 235:4 rwm",
        "lxc.mount.entry: /dev/nvidia-caps dev/nvidia-caps none bind,optional,create=dir",
        "dev7: /dev/nvidia-caps/nvidia-cap12,mode=0666",
        "dev9: /dev/dri/renderD129,gid=44",
        "[PENDING]",
        "[pve:pending]",
        "[snap1]",
    ]
)


@st.composite
def lxc_texts(draw: st.DrawFn) -> str:
    """Generated container configs with extra lines anywhere (a section header among them
    moves the lines after it out of main), CRLF endings or no final newline."""
    lines = draw(lxc_configs()).text.split("\n")
    for extra in draw(st.lists(_EXTRA_LXC, max_size=6)):
        lines.insert(draw(st.integers(0, len(lines))), extra)
    text = "\n".join(lines)
    if draw(st.booleans()):
        text = text.replace("\n", "\r\n")
    if draw(st.booleans()):
        text = text.rstrip("\r\n")
    return text


@given(lxc_texts(), st.sets(st.integers(0, 7)), st.sampled_from([NODES, DRM_NODES]))
def test_container_answers_are_the_rules_on_the_text(
    text: str, minors: set[int], nodes: DeviceNodes
) -> None:
    config = _guest(text)
    main = _main(text)
    assert [ln.raw for ln in config.main] == [ln.raw for ln in main]
    assert config.unprivileged is lxcconf.unprivileged(main)
    assert config.host_userspace is lxcconf.has_userspace_mount(main)
    assert str(config.cpuset) == str(lxcconf.cpuset(main))
    assert _cores(config) == _cores(main)
    assert config.raw_uvm_majors(nodes) == lxcconf.raw_uvm_majors(main, nodes)
    assert config.keeps_a_gpu(nodes, minors) is lxcconf.keeps_a_gpu(main, nodes, minors)
    assert config.shared_node_keys(nodes, LXC_MAJORS) == lxcconf.shared_node_keys(
        main, nodes, LXC_MAJORS
    )
    assert config.gpu_line_count(nodes, LXC_MAJORS) == sum(
        lxcconf.is_gpu_line(line, nodes, LXC_MAJORS) for line in main
    )
    held, expected = (
        config.caps_held(MIG, NVIDIA_CAPS_MAJOR),
        lxccaps.caps_held(main, MIG, NVIDIA_CAPS_MAJOR),
    )
    assert (held.minors, held.every, held.keys, held.entries) == (
        expected.minors,
        expected.every,
        expected.keys,
        expected.entries,
    )
    new = lxcconf.dev_style(NODES, range(len(minors) * 40))
    pending = _pending(text, "pve:pending")
    assert _shown(config.dev_slot_problems(NODES, new)) == _shown(
        lxcconf.dev_slot_problems(main, pending, NODES, new)
    )
    assert config.value("hostname") == next(
        (ln.value for ln in main if ln.kind.value == "key" and ln.key == "hostname"), None
    )


@st.composite
def vm_texts(draw: st.DrawFn) -> str:
    text = draw(vm_confs()).text
    if draw(st.booleans()):
        text = "[pending]\n".join(text.split("[PENDING]\n"))
    if draw(st.booleans()):
        text = text.replace("\n", "\r\n")
    if draw(st.booleans()):
        text = text.rstrip("\r\n")
    return text


@given(vm_texts(), st.integers(1, 10), st.booleans())
def test_vm_answers_are_the_rules_on_the_text(text: str, count: int, numa: bool) -> None:
    config = _guest(text, VM_PATH)
    main = _main(text)
    assert config.is_q35 is qemuconf.is_q35(main)
    found = config.hostpci_problems(MAPPING, count, numa=numa, mapped=MAPPED_PATHS)
    expected = qemuconf.hostpci_problems(
        main,
        _pending(text, "PENDING"),
        MAPPING,
        count,
        numa=numa,
        mapped=MAPPED_PATHS,
        subject=VM_PATH,
    )
    assert _shown(found) == _shown(expected)


SNAPSHOT = (
    "arch: amd64\n"
    "hostname: llm\n"
    "\n[pre-split]\n"
    "unprivileged: 1\n"
    "cores: 96\n"
    "machine: q35\n"
    "lxc.cgroup2.cpuset.cpus: 0-7\n"
    "lxc.cgroup2.devices.allow: c 509:* rwm\n"
    "lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file\n"
    "dev0: /dev/nvidia-caps/nvidia-cap12\n"
)


def test_a_snapshot_answers_nothing() -> None:
    """A snapshot is history: nothing in it counts for the guest as it starts."""
    config = _guest(SNAPSHOT)
    assert not config.unprivileged
    assert config.cores() is None and config.cpuset is None and not config.is_q35
    assert config.raw_uvm_majors(NODES) is None
    assert not config.caps_held(MIG, NVIDIA_CAPS_MAJOR).any
    assert config.value("hostname") == "llm" and config.value("cores") is None
    # Moved into main, the same lines answer.
    main = _guest(SNAPSHOT.replace("\n[pre-split]\n", "\n"))
    assert main.unprivileged and main.cores() == 96 and str(main.cpuset) == "0-7"
    assert main.raw_uvm_majors(NODES) == (509,)
    assert main.caps_held(MIG, NVIDIA_CAPS_MAJOR).minors == {12}


def test_only_the_guests_own_pending_section_takes_indices() -> None:
    """`[pve:pending]` holds a container's pending devN (any case); a `[PENDING]` section
    in a container config is a snapshot's name to pve-container, as to the old rule."""
    new = lxcconf.dev_style(NODES, [0])
    taken = "".join(f"dev{i}: /dev/loop{i}\n" for i in range(256 - len(new.devices)))
    assert _guest(taken).dev_slot_problems(NODES, new) == ()
    (full,) = _guest(taken + "[PVE:pending]\ndev255: /dev/fuse\n").dev_slot_problems(NODES, new)
    assert full.code == "lxc-dev-slots-full"
    assert _guest(taken + "[PENDING]\ndev255: /dev/fuse\n").dev_slot_problems(NODES, new) == ()
    vm = "".join(f"hostpci{i}: 0000:4{i:x}:00\n" for i in range(15))
    assert _guest(vm, VM_PATH).hostpci_problems(MAPPING, 1) == ()
    (vm_full,) = _guest(vm + "[pending]\nhostpci15: 0000:c1:00\n", VM_PATH).hostpci_problems(
        MAPPING, 1
    )
    assert (vm_full.code, vm_full.subject) == ("vm-hostpci-full", VM_PATH)


@pytest.mark.parametrize(
    ("text", "unprivileged", "userspace"),
    [
        ("unprivileged: 1\n", True, False),
        ("#unprivileged: 1\n", False, False),
        ("unprivileged: 1\r\narch: amd64\r\n", True, False),
        ("arch: amd64\nunprivileged: 1", True, False),
        ("unprivileged: 1\nunprivileged: 0\n", False, False),
        ("[pve:pending]\nunprivileged: 1\n", False, False),
        (
            "lxc.mount.entry: /var/lib/pvegpu/userspace/current opt/pvegpu/driver none bind\r\n",
            False,
            True,
        ),
        (
            "#lxc.mount.entry: /var/lib/pvegpu/userspace/current opt/pvegpu/driver none\n",
            False,
            False,
        ),
    ],
)
def test_privilege_and_userspace_by_line(text: str, unprivileged: bool, userspace: bool) -> None:
    config = _guest(text)
    assert (config.unprivileged, config.host_userspace) == (unprivileged, userspace)
    assert config.unprivileged is lxcconf.unprivileged(_main(text))


def test_a_cores_value_proxmox_skips_is_refused_naming_the_file() -> None:
    with pytest.raises(PlanError) as caught:
        _guest("cores: 4.5\r\n").cores()
    (problem,) = caught.value.problems
    assert (problem.code, problem.subject) == ("lxc-config-value-invalid", LXC_PATH)
    assert _guest("cores: 12").cores() == 12


def test_answers_are_kept_per_facts_value() -> None:
    """One parse per config per facts value: the same GuestConfig, the same answers."""
    text = SNAPSHOT.replace("\n[pre-split]\n", "\n")
    facts = kpro6({LXC_PATH: text})
    config = guests(facts).container(129)
    assert config is not None and config is guests(facts).config(config.file)
    assert config.caps_held(MIG, NVIDIA_CAPS_MAJOR) is config.caps_held(MIG, NVIDIA_CAPS_MAJOR)
    assert config.device_lines == tuple(
        ln for ln in config.main if ln.key.startswith(("dev", "lxc.cgroup2.dev", "lxc.mount"))
    )
    assert guests(facts).container(130) is None


PCI_CFG = (
    "pro6000-vm\n"
    "# owned: printed anew\n"
    "\tmap id=10de:2bb5,node=kpro6,path=0000:81:00\n"
    "\n"
    "other\n"
    "# kept\n"
    "\tmap id=1002:74a1,node=kpro6,path=0000:c1:00\n"
)


def test_pci_cfg_comments_dropped_as_the_text_rule_says() -> None:
    cfg = pci_cfg(kpro6({pcicfg.PATH: PCI_CFG}))
    for ids in (["pro6000-vm"], ["other"], ["pro6000-vm", "other"], []):
        assert cfg.dropped_comment_lines(ids) == pcicfg.dropped_comment_lines(PCI_CFG, ids)
    drop = {"other": ["id=1002:74a1,node=kpro6,path=0000:c1:00"]}
    assert cfg.dropped_comment_lines([], drop) == pcicfg.dropped_comment_lines(PCI_CFG, [], drop)
    assert pci_cfg(kpro6()).dropped_comment_lines(["pro6000-vm"]) == ()
    broken = pci_cfg(kpro6({pcicfg.PATH: "pro6000-vm\n\tmap nonsense\n"}))
    with pytest.raises(RenderError) as caught:
        broken.dropped_comment_lines(["pro6000-vm"])
    assert caught.value is broken.error


def test_only_ascii_ids_name_a_guest() -> None:
    """A config whose name is not ASCII digits is no guest (`int()` reads other digits)."""
    facts = kpro6(
        {"etc/pve/lxc/\u0661\u0662\u0663.conf": "arch: amd64\n", LXC_PATH: "arch: amd64\n"}
    )
    assert [vmid for vmid, _ in guests(facts).containers] == [129]


def test_binder_units_are_the_host_units_that_write_a_mark() -> None:
    facts = kpro6(
        {
            "etc/systemd/system/bind.service": "ExecStart=/bin/sh -c 'echo vfio-pci > x'\n",
            "etc/systemd/system/web.service": "ExecStart=/usr/bin/nginx\n",
            "etc/modprobe.d/vfio.conf": "options vfio-pci ids=10de:2bb5\n",
        }
    )
    assert binder_units(facts) == {"etc/systemd/system/bind.service": ("vfio-pci",)}
    assert binder_units(facts) is binder_units(facts)


def test_softdeps_are_the_modprobe_d_softdep_lines() -> None:
    facts = kpro6(
        {
            "etc/modprobe.d/nvidia.conf": (
                "# softdep nvidia pre: commented\n"
                "  softdep nvidia post: nvidia-uvm  \n"
                "softdep\n"
                "options nvidia NVreg_X=1\n"
            ),
            "etc/modprobe.d/sub/deep.conf": "softdep nvidia pre: vfio-pci\n",
            "etc/systemd/system/x.service": "softdep nvidia pre: vfio-pci\n",
        }
    )
    found = softdeps(facts)
    assert [(d.path, d.name, d.line, d.module) for d in found] == [
        ("etc/modprobe.d/nvidia.conf", "nvidia.conf", "softdep nvidia post: nvidia-uvm", "nvidia")
    ]
    assert found[0].words == ("softdep", "nvidia", "post:", "nvidia-uvm")
    assert softdeps(facts) is found


# --- the rule that keeps it: past discovery, guest configs and pci.cfg are parsed in model/

SRC = Path(__file__).resolve().parent.parent / "src" / "pvegpu"
CONSUMERS = ("planning", "serving", "engines", "rendering", "apply")
TEXT_PARSERS = {
    "pvegpu.pvefiles.guestconf": {"split_sections", "parse_lines", "section_named", "split_lines"},
    "pvegpu.pvefiles.pcicfg": {"parse", "parse_mappings", "comment_lines", "dropped_comment_lines"},
}


def text_parser_uses(source: str) -> set[str]:
    """The guest config and pci.cfg text parsers a module's source names: imported by
    name, or as an attribute of its module (`pcicfg.parse`)."""
    found: set[str] = set()
    modules = {m.rsplit(".", 1)[1]: m for m in TEXT_PARSERS}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module in TEXT_PARSERS:
            names = TEXT_PARSERS[node.module]
            found |= {f"{node.module}.{a.name}" for a in node.names if a.name in names}
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            module = modules.get(node.value.id)
            if module is not None and node.attr in TEXT_PARSERS[module]:
                found.add(f"{module}.{node.attr}")
    return found


def test_no_consumer_parses_a_guest_config_or_pci_cfg() -> None:
    """Planning, serving, engines, rendering and apply ask model/ (GuestConfig, pci_cfg)
    and hand raw files only to pvefiles' patchers."""
    found = {
        f"{path.relative_to(SRC)}: {name}"
        for package in CONSUMERS
        for path in sorted((SRC / package).rglob("*.py"))
        for name in text_parser_uses(path.read_text())
    }
    assert not found, "\n".join(sorted(found))


def test_the_parser_rule_sees_both_spellings() -> None:
    """Control: an import by name and a module attribute are both found."""
    source = (
        "from pvegpu.pvefiles.guestconf import LineKind, split_sections\n"
        "from pvegpu.pvefiles import pcicfg\n"
        "x = pcicfg.parse(text)\ny = pcicfg.patch(text, [])\n"
    )
    assert text_parser_uses(source) == {
        "pvegpu.pvefiles.guestconf.split_sections",
        "pvegpu.pvefiles.pcicfg.parse",
    }
