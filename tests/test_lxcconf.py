from __future__ import annotations

import inspect
import re

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pvegpu.errors import RenderError
from pvegpu.model.facts import ConfigFile
from pvegpu.model.guest_config import GuestConfig
from pvegpu.model.schema import DeviceStyle
from pvegpu.pci import CpuList
from pvegpu.pvefiles import lxcconf
from pvegpu.pvefiles.guestconf import ConfLine, split_sections
from pvegpu.vendors import CONTAINER_NODES as NODES
from strategies import LXC_MAJORS, NVIDIA_UVM_MAJOR, GuestConf, cpusets, kpro6, lxc_configs

# LXC 129 on kpro6 before the split: all eight GPUs, raw style, `195:*` and the uvm major.
BEFORE = """\
#SGLang Qwen3.5 inference, 8x RTX PRO 6000
arch: amd64
cores: 64
features: nesting=1
hostname: sglang
memory: 524288
mp0: /tank/models,mp=/models,backup=0
net0: name=eth0,bridge=vmbr0,firewall=1,hwaddr=BC:24:11:3C:9D:12,ip=dhcp,type=veth
onboot: 1
ostype: ubuntu
parent: pre-split
rootfs: local-zfs:subvol-129-disk-0,size=300G
swap: 0
unprivileged: 0
lxc.apparmor.profile: unconfined
lxc.cgroup2.devices.allow: c 195:* rwm
lxc.cgroup2.devices.allow: c 509:* rwm
lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file
lxc.mount.entry: /dev/nvidia1 dev/nvidia1 none bind,optional,create=file
lxc.mount.entry: /dev/nvidia2 dev/nvidia2 none bind,optional,create=file
lxc.mount.entry: /dev/nvidia3 dev/nvidia3 none bind,optional,create=file
lxc.mount.entry: /dev/nvidia4 dev/nvidia4 none bind,optional,create=file
lxc.mount.entry: /dev/nvidia5 dev/nvidia5 none bind,optional,create=file
lxc.mount.entry: /dev/nvidia6 dev/nvidia6 none bind,optional,create=file
lxc.mount.entry: /dev/nvidia7 dev/nvidia7 none bind,optional,create=file
lxc.mount.entry: /dev/nvidiactl dev/nvidiactl none bind,optional,create=file
lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file
lxc.mount.entry: /dev/nvidia-uvm-tools dev/nvidia-uvm-tools none bind,optional,create=file
lxc.mount.entry: /dev/nvidia-caps dev/nvidia-caps none bind,optional,create=dir
lxc.mount.entry: /tank/hf-cache root/.cache/huggingface none bind,create=dir

[pre-split]
#SGLang Qwen3.5 inference, 8x RTX PRO 6000
arch: amd64
cores: 64
hostname: sglang
memory: 524288
rootfs: local-zfs:subvol-129-disk-0,size=300G
snaptime: 1733000000
lxc.cgroup2.devices.allow: c 195:* rwm
lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file
"""
MAJORS = (195, 236, NVIDIA_UVM_MAJOR)


def _guest(text: str) -> GuestConfig:
    return GuestConfig(ConfigFile("etc/pve/lxc/129.conf", text))


def test_sections_split_and_rejoin() -> None:
    """Main, `[pve:pending]` and snapshots are separate sections that rejoin byte for byte."""
    text = BEFORE.replace("\n[pre-split]", "\n[pve:pending]\ncores: 32\n\n[pre-split]")
    sections = split_sections(text)
    assert [s.name for s in sections] == [None, "pve:pending", "pre-split"]
    assert "".join(s.text for s in sections) == text


@given(
    st.lists(st.sampled_from(["a", ":", " ", "\n", "\x0c", "[", "]", "#", "pve:pending"])).map(
        "".join
    )
)
def test_sections_rejoin_any_text(text: str) -> None:
    """Splitting never loses or changes a byte, whatever the text holds."""
    assert "".join(s.text for s in split_sections(text)) == text


def test_bracketed_line_that_proxmox_does_not_know_stays_in_its_section() -> None:
    """Only headers pve-container recognises start a section; `[a b]` is a stray line."""
    assert len(split_sections("arch: amd64\n[not a header]\ncores: 2\n")) == 1


def test_dev_style_replaces_raw_lines() -> None:
    """Raw GPU lines of all eight GPUs give way to devN entries for the pool's four minors."""
    out = lxcconf.patch_gpu_lines(BEFORE, NODES, lxcconf.dev_style(NODES, [0, 1, 2, 3]), MAJORS)
    main, snapshot = out.split("\n[pre-split]\n")
    assert main == (
        "#SGLang Qwen3.5 inference, 8x RTX PRO 6000\n"
        "arch: amd64\n"
        "cores: 64\n"
        "dev0: /dev/nvidia0,mode=0666\n"
        "dev1: /dev/nvidia1,mode=0666\n"
        "dev2: /dev/nvidia2,mode=0666\n"
        "dev3: /dev/nvidia3,mode=0666\n"
        "dev4: /dev/nvidiactl,mode=0666\n"
        "dev5: /dev/nvidia-uvm,mode=0666\n"
        "dev6: /dev/nvidia-uvm-tools,mode=0666\n"
        "features: nesting=1\n"
        "hostname: sglang\n"
        "memory: 524288\n"
        "mp0: /tank/models,mp=/models,backup=0\n"
        "net0: name=eth0,bridge=vmbr0,firewall=1,hwaddr=BC:24:11:3C:9D:12,ip=dhcp,type=veth\n"
        "onboot: 1\n"
        "ostype: ubuntu\n"
        "parent: pre-split\n"
        "rootfs: local-zfs:subvol-129-disk-0,size=300G\n"
        "swap: 0\n"
        "unprivileged: 0\n"
        "lxc.apparmor.profile: unconfined\n"
        "lxc.mount.entry: /tank/hf-cache root/.cache/huggingface none bind,create=dir\n"
    )
    assert snapshot == BEFORE.split("\n[pre-split]\n")[1]


def test_raw_style_grants_only_the_pool_minors() -> None:
    """Per-minor cgroup rules (never 195:*), nvidiactl 255, uvm major :0/:1, bind mounts."""
    out = lxcconf.patch_gpu_lines(BEFORE, NODES, lxcconf.raw_style(NODES, [0, 2], 509), MAJORS)
    main = split_sections(out)[0].text
    raw = [line for line in main.splitlines() if line.startswith("lxc.")]
    assert raw == [
        "lxc.apparmor.profile: unconfined",
        "lxc.cgroup2.devices.allow: c 195:0 rwm",
        "lxc.cgroup2.devices.allow: c 195:2 rwm",
        "lxc.cgroup2.devices.allow: c 195:255 rwm",
        "lxc.cgroup2.devices.allow: c 509:0 rwm",
        "lxc.cgroup2.devices.allow: c 509:1 rwm",
        "lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file",
        "lxc.mount.entry: /dev/nvidia2 dev/nvidia2 none bind,optional,create=file",
        "lxc.mount.entry: /dev/nvidiactl dev/nvidiactl none bind,optional,create=file",
        "lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file",
        "lxc.mount.entry: /dev/nvidia-uvm-tools dev/nvidia-uvm-tools none bind,optional,"
        "create=file",
        "lxc.mount.entry: /tank/hf-cache root/.cache/huggingface none bind,create=dir",
    ]
    assert "195:*" not in main


def test_dev_numbering_skips_other_devices_and_pending_indices() -> None:
    """devN for GPUs avoid indices of non-GPU devices and of pending dev changes."""
    text = (
        "arch: amd64\n"
        "dev0: /dev/dri/renderD128,gid=104\n"
        "dev1: /dev/nvidia5,mode=0666\n"
        "dev2: /dev/nvidia6\n"
        "hostname: ct\n"
        "\n[pve:pending]\ndev3: /dev/kfd\ndelete: dev1;mp0\n"
    )
    out = lxcconf.patch_gpu_lines(text, NODES, lxcconf.dev_style(NODES, [0], gid=44))
    assert split_sections(out)[0].text == (
        "arch: amd64\n"
        "dev0: /dev/dri/renderD128,gid=104\n"
        "dev2: /dev/nvidia0,gid=44,mode=0666\n"
        "dev4: /dev/nvidiactl,gid=44,mode=0666\n"
        "dev5: /dev/nvidia-uvm,gid=44,mode=0666\n"
        "dev6: /dev/nvidia-uvm-tools,gid=44,mode=0666\n"
        "hostname: ct\n"
        "\n"
    )


def test_dev_entries_in_proxmox_key_order() -> None:
    """Past dev9 the entries are in the order Proxmox writes keys, as plain strings: a
    config Proxmox wrote with these lines comes out byte for byte (pvegpu init's round
    trip), and the next `pct set` moves nothing pvegpu wrote."""
    text = (
        "arch: amd64\n"
        "dev0: /dev/nvidia0,mode=0666\n"
        "dev1: /dev/nvidia1,mode=0666\n"
        "dev10: /dev/nvidia-uvm-tools,mode=0666\n"
        "dev2: /dev/nvidia2,mode=0666\n"
        "dev3: /dev/nvidia3,mode=0666\n"
        "dev4: /dev/nvidia4,mode=0666\n"
        "dev5: /dev/nvidia5,mode=0666\n"
        "dev6: /dev/nvidia6,mode=0666\n"
        "dev7: /dev/nvidia7,mode=0666\n"
        "dev8: /dev/nvidiactl,mode=0666\n"
        "dev9: /dev/nvidia-uvm,mode=0666\n"
        "hostname: ct\n"
    )
    out = lxcconf.patch_gpu_lines(text, NODES, lxcconf.dev_style(NODES, range(8)))
    assert out == text


@pytest.mark.parametrize(
    ("line", "gpu"),
    [
        ("dev3: /dev/nvidia12,mode=0666", True),
        ("dev3: path=/dev/nvidia-caps/nvidia-cap2", True),
        ("dev3: /dev/nvidia-modeset", True),
        ("dev3: /dev/dri/card0", False),
        ("dev3: /dev/nvidiafoo", False),
        ("mp0: /dev/nvidia0,mp=/x", False),
        ("lxc.cgroup2.devices.allow: c 195:* rwm", True),
        ("lxc.cgroup2.devices.allow = c 236:1 rwm", True),
        ("lxc.cgroup2.devices.allow: c 226:* rwm", False),
        ("lxc.cgroup2.devices.allow: a", False),
        # cgroup v1 rules are inert on PVE's cgroup2-only hosts; they are left alone.
        ("lxc.cgroup.devices.allow: c 195:* rwm", False),
        ("lxc.mount.entry: /dev/nvidia-caps dev/nvidia-caps none bind,create=dir", True),
        ("lxc.mount.entry = /dev/nvidia3 dev/nvidia3 none bind,optional,create=file", True),
        ("lxc.mount.entry: /dev/dri dev/dri none bind,optional,create=dir", False),
        ("#lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind", False),
    ],
)
def test_gpu_line_classification(line: str, gpu: bool) -> None:
    """Exactly the lines handing NVIDIA nodes (by path or NVIDIA major) are GPU lines."""
    assert lxcconf.is_gpu_line(ConfLine.parse(line + "\n"), NODES, MAJORS) is gpu


def test_no_gpu_lines_yet_dev_entries_go_to_their_sorted_place() -> None:
    """A container without GPUs gets devN where Proxmox's sorted writer would put them."""
    text = "#desc\narch: amd64\nhostname: ct\nlxc.apparmor.profile: unconfined\n"
    out = lxcconf.patch_gpu_lines(text, NODES, lxcconf.dev_style(NODES, [3]))
    assert out.splitlines()[2:4] == [
        "dev0: /dev/nvidia3,mode=0666",
        "dev1: /dev/nvidiactl,mode=0666",
    ]
    assert out.splitlines()[-2:] == ["hostname: ct", "lxc.apparmor.profile: unconfined"]


def test_no_gpu_lines_yet_raw_lines_go_after_everything() -> None:
    """Raw lines land after all normal and raw keys, before the blank line of the section."""
    text = "arch: amd64\nlxc.apparmor.profile: unconfined\n\n[snap]\nsnaptime: 1\n"
    out = lxcconf.patch_gpu_lines(text, NODES, lxcconf.raw_style(NODES, [0], 509))
    assert out.splitlines()[2] == "lxc.cgroup2.devices.allow: c 195:0 rwm"
    assert out.endswith("create=file\n\n[snap]\nsnaptime: 1\n")


def test_unterminated_last_line_gets_its_newline_when_lines_follow() -> None:
    """A file whose last line has no newline does not glue the new lines onto it."""
    out = lxcconf.patch_gpu_lines(
        "arch: amd64\nhostname: ct", NODES, lxcconf.raw_style(NODES, [0], 509)
    )
    assert out.startswith("arch: amd64\nhostname: ct\nlxc.cgroup2.devices.allow: c 195:0 rwm\n")


def test_gpu_lines_use_the_real_device_minor() -> None:
    """Lines name /dev/nvidia<Device Minor>, not the GPU's position in the pool."""
    gpus = kpro6().gpus
    picked = (attrs.evolve(gpus[4], node_minor=1), attrs.evolve(gpus[5], node_minor=0))
    lines = lxcconf.gpu_lines(NODES, picked, DeviceStyle.DEV)
    assert lines.devices[:2] == ("/dev/nvidia1,mode=0666", "/dev/nvidia0,mode=0666")


def test_gpu_lines_leave_refusals_to_plan() -> None:
    """gpu_lines only formats: a GPU without a minor and raw lines without nvidia-uvm's
    major are plan()'s refusals (planning/guests.py), which never ask for these lines."""
    assert "raise" not in inspect.getsource(lxcconf.gpu_lines)
    lines = lxcconf.gpu_lines(NODES, kpro6().gpus[:1], DeviceStyle.RAW, uvm_major=509)
    assert lines == lxcconf.raw_style(NODES, [0], 509)


def test_bad_mode_is_refused() -> None:
    """A device mode must be octal: anything else would break the container's start."""
    with pytest.raises(ValueError, match="not octal"):
        lxcconf.dev_style(NODES, [0], mode="rw")


def test_out_of_dev_slots_is_refused() -> None:
    """With dev0..dev255 all used by other devices there is nowhere to put GPUs."""
    text = "".join(f"dev{i}: /dev/loop{i}\n" for i in range(256))
    with pytest.raises(RenderError, match="lxc-dev-slots-full"):
        lxcconf.patch_gpu_lines(text, NODES, lxcconf.dev_style(NODES, [0]))


NODE0 = CpuList.parse("0-31,64-95")


def _raw(text: str) -> list[str]:
    return [line for line in split_sections(text)[0].text.splitlines() if line.startswith("lxc.")]


def test_cpuset_goes_with_the_raw_lines_dev_style() -> None:
    """dev style: the cpuset line takes the place of the old raw GPU lines, alone."""
    out = lxcconf.patch_gpu_lines(
        BEFORE, NODES, lxcconf.dev_style(NODES, [0, 1, 2, 3]), MAJORS, cpuset=NODE0
    )
    assert _raw(out) == [
        "lxc.apparmor.profile: unconfined",
        "lxc.cgroup2.cpuset.cpus: 0-31,64-95",
        "lxc.mount.entry: /tank/hf-cache root/.cache/huggingface none bind,create=dir",
    ]
    assert out.split("\n[pre-split]\n")[1] == BEFORE.split("\n[pre-split]\n")[1]


def test_cpuset_heads_the_raw_gpu_block() -> None:
    """raw style: one block, cpuset first, where the first old raw GPU line was."""
    out = lxcconf.patch_gpu_lines(
        BEFORE, NODES, lxcconf.raw_style(NODES, [0], 509), MAJORS, cpuset=NODE0
    )
    assert _raw(out)[1:3] == [
        "lxc.cgroup2.cpuset.cpus: 0-31,64-95",
        "lxc.cgroup2.devices.allow: c 195:0 rwm",
    ]


def test_existing_cpuset_lines_are_replaced_once() -> None:
    """Every cgroup2 cpuset line of main goes (either separator); one line takes the place
    of the first; the inert cgroup v1 line and the snapshot's line stay."""
    text = (
        "arch: amd64\n"
        "lxc.cgroup2.cpuset.cpus = 0-7\n"
        "lxc.apparmor.profile: unconfined\n"
        "lxc.cgroup.cpuset.cpus: 0-3\n"
        "lxc.cgroup2.cpuset.cpus: 8-15\n"
        "\n[snap]\nlxc.cgroup2.cpuset.cpus: 0-7\nsnaptime: 1\n"
    )
    out = lxcconf.patch_gpu_lines(text, NODES, lxcconf.dev_style(NODES, []), cpuset=NODE0)
    assert out == (
        "arch: amd64\n"
        "dev0: /dev/nvidiactl,mode=0666\n"
        "dev1: /dev/nvidia-uvm,mode=0666\n"
        "dev2: /dev/nvidia-uvm-tools,mode=0666\n"
        "lxc.cgroup2.cpuset.cpus: 0-31,64-95\n"
        "lxc.apparmor.profile: unconfined\n"
        "lxc.cgroup.cpuset.cpus: 0-3\n"
        "\n[snap]\nlxc.cgroup2.cpuset.cpus: 0-7\nsnaptime: 1\n"
    )


def test_cpuset_line_is_left_alone_without_a_cpuset() -> None:
    """A pool that pins nothing does not own the container's cpuset line."""
    text = "arch: amd64\nlxc.cgroup2.cpuset.cpus: 0-7\n"
    out = lxcconf.patch_gpu_lines(text, NODES, lxcconf.raw_style(NODES, [0], 509))
    assert _raw(out)[0] == "lxc.cgroup2.cpuset.cpus: 0-7"
    assert sum("cpuset" in line for line in _raw(out)) == 1


@pytest.mark.parametrize(
    ("text", "cores"),
    [("cores: 96\n", 96), ("arch: amd64\n", None), ("#cores: 4\n", None)],
)
def test_cores_of_the_main_section(text: str, cores: int | None) -> None:
    """`cores:` as a number, None when unset; snapshots do not count. (An unreadable
    value is refused: tests/test_odd_input.py.)"""
    assert _guest(text + "\n[snap]\ncores: 2\n").cores() == cores


new_lines = st.one_of(
    st.lists(st.integers(0, 7), unique=True, max_size=4).map(lambda m: lxcconf.dev_style(NODES, m)),
    st.lists(st.integers(0, 7), unique=True, max_size=4).map(
        lambda m: lxcconf.raw_style(NODES, m, NVIDIA_UVM_MAJOR)
    ),
)


def _expected_lines(new: lxcconf.GpuLines, cpuset: CpuList | None = None) -> list[str]:
    head = [f"{lxcconf.CPUSET}: {cpuset}"] if cpuset is not None else []
    return head + [f"{k}: {v}" for k, v in new.raw]


def _main_lines(text: str, rest: str) -> list[str]:
    assert text.endswith(rest)
    lines = text[: len(text) - len(rest)].split("\n")
    return lines[:-1] if lines[-1] == "" else lines


@given(lxc_configs(), new_lines, st.none() | cpusets)
def test_patch_is_idempotent(
    conf: GuestConf, new: lxcconf.GpuLines, cpuset: CpuList | None
) -> None:
    """Patching a patched config again changes nothing, with or without a cpuset."""
    once = lxcconf.patch_gpu_lines(conf.text, NODES, new, LXC_MAJORS, cpuset=cpuset)
    assert lxcconf.patch_gpu_lines(once, NODES, new, LXC_MAJORS, cpuset=cpuset) == once


_CPUSET_LINE = re.compile(r"^lxc\.cgroup2\.cpuset\.cpus\s*[:=]")


@given(lxc_configs(), new_lines, st.none() | cpusets)
def test_patch_keeps_everything_but_gpu_lines(
    conf: GuestConf, new: lxcconf.GpuLines, cpuset: CpuList | None
) -> None:
    """Other main lines keep their order and bytes; pending and snapshots are untouched;
    the main section's GPU lines are exactly the new ones, on free dev indices in
    Proxmox's key order; with a cpuset, the one cgroup2 cpuset line is the new one."""
    out = lxcconf.patch_gpu_lines(conf.text, NODES, new, LXC_MAJORS, cpuset=cpuset)
    lines = _main_lines(out, conf.rest)
    dev = re.compile(r"^dev(\d+): (.*)$")
    added_dev = [
        (int(m[1]), m[2]) for line in lines if (m := dev.match(line)) and m[2] in new.devices
    ]
    expected = _expected_lines(new, cpuset)
    added_raw = [line for line in lines if line in expected]
    # The new devices on increasing free indices, in the order Proxmox writes keys (plain
    # strings: dev10 before dev7).
    assert [value for _, value in sorted(added_dev)] == list(new.devices)
    assert [f"dev{index}" for index, _ in added_dev] == sorted(f"dev{i}" for i, _ in added_dev)
    assert added_raw == expected
    assert not {index for index, _ in added_dev} & conf.taken
    if cpuset is not None:
        assert [line for line in lines if _CPUSET_LINE.match(line)] == [expected[0]]
    kept = [
        line
        for line in lines
        if line not in added_raw and not ((m := dev.match(line)) and m[2] in new.devices)
    ]
    owned = cpuset is not None
    assert kept == [line for line in conf.others if not (owned and _CPUSET_LINE.match(line))]


@given(lxc_configs(), new_lines, st.integers(-2, 2))
def test_dev_slot_problems_are_what_the_patch_refuses(
    conf: GuestConf, new: lxcconf.GpuLines, spare: int
) -> None:
    """plan() asks dev_slot_problems: empty exactly when the patch finds devN indices.
    Other devices take every index but the top `len(new.devices) + spare` (the generated
    config uses dev0..dev20 only), so both sides of the limit are tried."""
    free = max(0, len(new.devices) + spare)
    text = "".join(f"dev{i}: /dev/loop{i}\n" for i in range(256 - free)) + conf.text
    found = _guest(text).dev_slot_problems(NODES, new)
    try:
        lxcconf.patch_gpu_lines(text, NODES, new, LXC_MAJORS)
    except RenderError as error:
        assert found == error.problems
    else:
        assert found == ()
