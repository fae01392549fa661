"""Hypothesis strategies for Proxmox files: pci.cfg mappings, LXC and VM configs.

Generated configs know which of their lines are GPU lines (or lines of the mapping being
patched), so properties can check patches against the generator, not the classifier.
"""

from __future__ import annotations

import operator

import attrs
from hypothesis import strategies as st

from pvegpu.model.facts import (
    GPU,
    CharMajor,
    ConfigFile,
    GpuDriver,
    HostFacts,
    IommuGroup,
    IommuGroupType,
    IommuState,
    KernelModuleFlavor,
    NumaNode,
    PciFunction,
)
from pvegpu.model.plan import PciMap, PciMapping
from pvegpu.pci import CpuList, PciAddress

# --- pci.cfg ---------------------------------------------------------------------------

_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
_DIGITS = "0123456789"
# Built from characters rather than st.from_regex, which is slow to warm up.
mapping_ids = st.builds(
    operator.add,
    st.sampled_from(_LETTERS),
    st.text(_LETTERS + _DIGITS + "_-", min_size=1, max_size=15),
)
node_names = st.builds(
    operator.add,
    st.text(_LETTERS.lower() + _DIGITS, min_size=1, max_size=1),
    st.text(_LETTERS.lower() + _DIGITS + "-", max_size=10).map(lambda s: s.rstrip("-")),
)
# Several fields from one integer draw: generation cost grows with the number of draws,
# and pci.cfg strategies draw hundreds per example.
vendor_devices = st.integers(0, 0xFFFF_FFFF).map(lambda n: f"{n >> 16:04x}:{n & 0xFFFF:04x}")
# domain (16 bits), bus (8), device (5); then a function, or none for the whole slot.
_slots = st.integers(0, (1 << 29) - 1).map(
    lambda n: f"{n >> 13:04x}:{n >> 5 & 0xFF:02x}:{n & 0x1F:02x}"
)
_devices = st.tuples(_slots, st.none() | st.integers(0, 7)).map(
    lambda p: p[0] if p[1] is None else f"{p[0]}.{p[1]}"
)
pci_paths = st.lists(_devices, min_size=1, max_size=2).map(";".join)
"""`dddd:bb:dd` (whole slot), `dddd:bb:dd.f`, or a `;` list of devices used together."""


def free_text(exclude: str = "") -> st.SearchStrategy[str]:
    """One line of text as a reviewer writes it: no control characters, trimmed."""
    return (
        st.text(
            st.characters(
                min_codepoint=0x20, max_codepoint=0x24F, exclude_characters="\x7f" + exclude
            ),
            min_size=1,
            max_size=30,
        )
        .map(str.strip)
        .filter(bool)
    )


pci_maps = st.builds(
    PciMap,
    id=vendor_devices,
    node=node_names,
    path=pci_paths,
    iommugroup=st.none() | st.integers(0, 500),
    subsystem_id=st.none() | vendor_devices,
    # Property strings split on `,`: a map description cannot hold one.
    description=st.none() | free_text(exclude=","),
)


@st.composite
def pci_mapping(draw: st.DrawFn, mapping_id: str | None = None) -> PciMapping:
    return PciMapping(
        id=mapping_id if mapping_id is not None else draw(mapping_ids),
        maps=tuple(draw(st.lists(pci_maps, min_size=1, max_size=4))),
        description=draw(st.none() | free_text()),
        live_migration_capable=draw(st.none() | st.booleans()),
        mdev=draw(st.none() | st.booleans()),
    )


pci_mappings = st.lists(pci_mapping(), max_size=4, unique_by=lambda m: m.id)

_BOOLEANS = st.sampled_from(["1", "0", "yes", "no", "on", "off", "true", "FALSE"])


@st.composite
def _map_string(draw: st.DrawFn) -> str:
    """A map property string with its keys in any order, as a hand may write one."""
    entry = draw(pci_maps)
    fields = [("id", entry.id), ("node", entry.node), ("path", entry.path)]
    if entry.iommugroup is not None:
        fields.append(("iommugroup", str(entry.iommugroup)))
    if entry.subsystem_id is not None:
        fields.append(("subsystem-id", entry.subsystem_id))
    return ",".join(f"{k}={v}" for k, v in draw(st.permutations(fields)))


@st.composite
def hand_written_section(draw: st.DrawFn, mapping_id: str) -> str:
    """A pci.cfg section as a hand (or another tool) may leave it, which Proxmox reads:
    its properties in any order (`description` before `map`), indented by TABs or
    spaces, booleans spelled `yes`/`on`, an unknown key, `#` and whitespace-only lines
    among them. Its text without the empty line that ends it."""
    properties = [("map", m) for m in draw(st.lists(_map_string(), min_size=1, max_size=3))]
    if draw(st.booleans()):
        properties.append(("description", draw(free_text())))
    for key in ("mdev", "live-migration-capable"):
        if draw(st.booleans()):
            properties.append((key, draw(_BOOLEANS)))
    if draw(st.booleans()):
        properties.append(("x-future", "3"))
    indents = st.sampled_from(["\t", "  ", " \t", "\t\t"])
    lines = [
        f"{draw(indents)}{key}{draw(st.sampled_from([' ', '  ', chr(9)]))}{value}"
        + draw(st.sampled_from(["", " "]))
        for key, value in draw(st.permutations(properties))
    ]
    for _ in range(draw(st.integers(0, 2))):
        at = draw(st.integers(0, len(lines)))
        lines.insert(at, draw(st.sampled_from(["# hand note", "  # indented note", " \t"])))
    return "\n".join([mapping_id, *lines])


# --- guest configs ---------------------------------------------------------------------


@attrs.frozen
class GuestConf:
    """A generated guest config: main-section lines tagged as target lines or not."""

    main: tuple[tuple[str, bool], ...]
    """(line without newline, is a line the patch replaces)."""
    rest: str
    """Everything from the first section header on (pending, snapshots), verbatim."""
    terminated: bool = True
    """False: the last main line has no newline (only when `rest` is empty)."""
    taken: frozenset[int] = frozenset()
    """Indices the patch must not give out (used by other lines, main or pending)."""

    @property
    def text(self) -> str:
        body = "\n".join(line for line, _ in self.main)
        if self.main and (self.terminated or self.rest):
            body += "\n"
        return body + self.rest

    @property
    def others(self) -> list[str]:
        return [line for line, target in self.main if not target]


descriptions = free_text().map(lambda text: "#" + text)

NVIDIA_UVM_MAJOR = 509
NVIDIA_CAPS_MAJOR = 235
LXC_MAJORS = frozenset({195, NVIDIA_UVM_MAJOR, NVIDIA_CAPS_MAJOR})
_NVIDIA_NODES = (
    "/dev/nvidiactl",
    "/dev/nvidia-uvm",
    "/dev/nvidia-uvm-tools",
    "/dev/nvidia-modeset",
    "/dev/nvidia-caps/nvidia-cap1",
)
_OTHER_NODES = ("/dev/dri/renderD128", "/dev/dri/card0", "/dev/kfd", "/dev/net/tun", "/dev/fuse")

lxc_normal_lines = st.sampled_from(
    [
        "arch: amd64",
        "cores: 32",
        "features: nesting=1",
        "hostname: sglang",
        "memory: 262144",
        "mp0: /tank/models,mp=/models,backup=0",
        "net0: name=eth0,bridge=vmbr0,hwaddr=BC:24:11:0A:0B:0C,ip=dhcp,type=veth",
        "onboot: 1",
        "ostype: ubuntu",
        "parent: pre-split",
        "rootfs: local-zfs:subvol-129-disk-0,size=200G",
        "swap: 0",
        "tags: gpu;llm",
        "unprivileged: 0",
    ]
)
lxc_other_raw_lines = st.tuples(
    st.sampled_from(
        [
            ("lxc.apparmor.profile", "unconfined"),
            ("lxc.cap.drop", ""),
            ("lxc.cgroup2.devices.allow", "c 226:* rwm"),
            ("lxc.cgroup2.devices.allow", "c 10:200 rwm"),
            ("lxc.cgroup2.devices.allow", "a"),
            ("lxc.mount.entry", "/dev/dri dev/dri none bind,optional,create=dir"),
            ("lxc.mount.entry", "/dev/net/tun dev/net/tun none bind,create=file"),
            ("lxc.environment", "NVIDIA_VISIBLE_DEVICES=all"),
        ]
    ),
    st.sampled_from([": ", " = ", "="]),
).map(lambda p: f"{p[0][0]}{p[1]}{p[0][1]}".rstrip())


# CPU pinning lines a container may already have: the patch owns the cgroup2 one only
# when asked to (a serving pool), never the inert cgroup v1 one.
lxc_cpuset_lines = st.tuples(
    st.sampled_from(["lxc.cgroup2.cpuset.cpus", "lxc.cgroup.cpuset.cpus"]),
    st.sampled_from([": ", " = ", "="]),
    st.sampled_from(["0-15", "0-31,64-95", "8"]),
).map("".join)
cpusets = st.sampled_from(["0-31,64-95", "32-63,96-127", "0-15"]).map(CpuList.parse)


@st.composite
def lxc_gpu_raw_lines(draw: st.DrawFn) -> str:
    key_sep = draw(st.sampled_from([": ", " = "]))
    if draw(st.booleans()):
        major = draw(st.sampled_from(sorted(LXC_MAJORS)))
        minor = draw(st.sampled_from(["*", "0", "1", "3", "255"]))
        return f"lxc.cgroup2.devices.allow{key_sep}c {major}:{minor} rwm"
    node = draw(st.sampled_from([f"/dev/nvidia{draw(st.integers(0, 7))}", *_NVIDIA_NODES]))
    return f"lxc.mount.entry{key_sep}{node} {node[1:]} none bind,optional,create=file"


def _dev_value(node: str, draw: st.DrawFn) -> str:
    prefix = draw(st.sampled_from(["", "path="]))
    options = draw(st.sampled_from(["", ",mode=0666", ",gid=44,mode=0660", ",uid=0"]))
    return f"{prefix}{node}{options}"


@st.composite
def lxc_configs(draw: st.DrawFn) -> GuestConf:
    """A container config in any order (hand edits happen), GPU lines of both styles
    mixed in, other devN, cpuset lines (not targets: the patch owns them only when given
    a cpuset), a pending section and snapshots that carry GPU and cpuset lines too."""
    dev_indices = draw(st.lists(st.integers(0, 20), unique=True, max_size=8))
    main: list[tuple[str, bool]] = []
    taken: set[int] = set()
    for index in dev_indices:
        if draw(st.booleans()):
            node = draw(st.sampled_from([f"/dev/nvidia{draw(st.integers(0, 7))}", *_NVIDIA_NODES]))
            main.append((f"dev{index}: {_dev_value(node, draw)}", True))
        else:
            node = draw(st.sampled_from(_OTHER_NODES))
            main.append((f"dev{index}: {_dev_value(node, draw)}", False))
            taken.add(index)
    main += [(line, False) for line in draw(st.lists(lxc_normal_lines, max_size=6))]
    main += [(line, False) for line in draw(st.lists(lxc_other_raw_lines, max_size=4))]
    main += [(line, False) for line in draw(st.lists(lxc_cpuset_lines, max_size=2))]
    main += [(line, True) for line in draw(st.lists(lxc_gpu_raw_lines(), max_size=6))]
    main += [(line, False) for line in draw(st.lists(descriptions, max_size=2))]
    main += [("", False)] * draw(st.integers(0, 1))
    order = draw(st.permutations(range(len(main))))
    if draw(st.booleans()):
        # Proxmox's own order: description, normal keys sorted, raw lines.
        def rank(item: tuple[str, bool]) -> tuple[int, str]:
            line = item[0]
            if not line:
                return (3, "")
            if line.startswith("#"):
                return (0, "")
            return (2, "") if line.startswith("lxc.") else (1, line.split(":", 1)[0])

        main.sort(key=rank)
    else:
        main = [main[i] for i in order]
    rest = ""
    if draw(st.booleans()):
        pending = draw(st.lists(st.integers(0, 20), unique=True, max_size=2))
        taken.update(pending)
        lines = [f"dev{i}: /dev/nvidia{i}" for i in pending[:1]]
        lines += [f"delete: dev{i}" for i in pending[1:]]
        rest += "\n[pve:pending]\n" + "".join(f"{line}\n" for line in lines)
    for name in draw(st.lists(st.sampled_from(["pre-split", "daily_1", "Before8"]), unique=True)):
        body = ["dev0: /dev/nvidia0,mode=0666", "lxc.cgroup2.devices.allow: c 195:* rwm"]
        body += ["lxc.cgroup2.cpuset.cpus: 0-7"]
        body += ["snaptime: 1700000000", f"#snapshot {name}"]
        rest += f"\n[{name}]\n" + "".join(f"{line}\n" for line in body)
    # An unterminated last line only exists as the last non-empty line of a file.
    terminated = bool(rest) or not main or not main[-1][0] or draw(st.booleans())
    return GuestConf(tuple(main), rest, terminated, frozenset(taken))


MAPPING = "pro6000-vm"
MAPPED_PATHS = ("0000:81:00", "0000:91:00", "0000:e1:00.0")
"""pci.cfg paths of MAPPING on the node: two whole slots and one function alone."""
# hostpci values naming only devices of MAPPED_PATHS by raw host address, in every
# spelling qemu-server takes; the patch turns them into mapping lines.
_MAPPED_RAW = (
    "0000:81:00,pcie=1,x-vga=1",
    "0000:81:00.0",
    "81:00.0;81:00.1,rombar=0",
    "host=0000:91:00,romfile=vbios.bin",
    "0000:91:00.0;0000:91:00.1,pcie=1",
    "0000:e1:00.0,x-vga=1",
)
# Near misses: another slot, device, domain, or a function the mapping does not hand over.
_OTHER_RAW = (
    "0000:c1:00,pcie=1",
    "host=0000:41:00.0",
    "0000:81:01.0",
    "0001:81:00",
    "0000:e1:00.1,pcie=1",
)

vm_normal_lines = st.sampled_from(
    [
        "amd-sev: type=snp,allow-smt=1,kernel-hashes=1",
        "bios: ovmf",
        "boot: order=scsi0",
        "cpu: host",
        "efidisk0: local-zfs:vm-140-disk-0,efitype=4m,size=1M",
        "meta: creation-qemu=9.0.2,ctime=1733000000",
        "name: confidential",
        "net0: virtio=BC:24:11:00:00:01,bridge=vmbr0",
        "scsi0: local-zfs:vm-140-disk-1,size=500G",
        "scsihw: virtio-scsi-single",
        "vga: none",
    ]
)


@st.composite
def vm_configs(draw: st.DrawFn) -> GuestConf:
    """A VM config with hostpci lines of the patched mapping (targets: by mapping, or by
    raw address of a device in MAPPED_PATHS) and of other devices and mappings."""
    indices = draw(st.lists(st.integers(0, 15), unique=True, max_size=8))
    main: list[tuple[str, bool]] = []
    taken: set[int] = set()
    for index in indices:
        kind = draw(st.sampled_from(["mapping", "mapped-raw", "other"]))
        if kind == "mapping":
            options = draw(st.sampled_from(["", ",pcie=1", ",pcie=1,rombar=0"]))
            main.append((f"hostpci{index}: mapping={MAPPING}{options}", True))
        elif kind == "mapped-raw":
            main.append((f"hostpci{index}: {draw(st.sampled_from(_MAPPED_RAW))}", True))
        else:
            value = draw(st.sampled_from([*_OTHER_RAW, "mapping=nic"]))
            main.append((f"hostpci{index}: {value}", False))
            taken.add(index)
    main += [(line, False) for line in draw(st.lists(vm_normal_lines, max_size=6, unique=True))]
    main += [(f"cores: {draw(st.integers(1, 64))}", False)]
    main += [(f"memory: {draw(st.sampled_from(['4096', '131072', 'current=65536']))}", False)]
    if draw(st.booleans()):
        main.append((f"sockets: {draw(st.integers(1, 2))}", False))
    machine = draw(st.sampled_from(["", "q35", "pc-q35-9.0", "pc-i440fx-9.0"]))
    if machine:
        main.append((f"machine: {machine}", False))
    main.sort(key=lambda item: item[0].split(":", 1)[0])
    main = [(line, False) for line in draw(st.lists(descriptions, max_size=2))] + main
    rest = ""
    if draw(st.booleans()):
        index = draw(st.integers(0, 15))
        taken.add(index)
        rest += f"\n[PENDING]\nhostpci{index}: mapping=other\n"
    if draw(st.booleans()):
        rest += f"\n[before-gpu]\nhostpci0: mapping={MAPPING},pcie=1\nsnaptime: 1700000000\n"
    return GuestConf(tuple(main), rest, True, frozenset(taken))


# --- hand-made host --------------------------------------------------------------------

KPRO6_NUMA0_BUSES = (0x01, 0x11, 0x61, 0x71)
KPRO6_NUMA1_BUSES = (0x81, 0x91, 0xE1, 0xF1)
KPRO6_GROUPS = {0x01: 12, 0x11: 13, 0x61: 28, 0x71: 29, 0x81: 40, 0x91: 41, 0xE1: 56, 0xF1: 57}
KPRO6_CPUS = ("0-31,64-95", "32-63,96-127")


def _kpro6_function(
    address: PciAddress, device: int, cls: int, driver: str, group: int
) -> PciFunction:
    node = 0 if address.bus in KPRO6_NUMA0_BUSES else 1
    # Each GPU sits behind its own root port, as on a dual-socket EPYC board.
    root = f"pci0000:{address.bus - 1:02x}/0000:{address.bus - 1:02x}:01.1"
    return PciFunction(
        address=address,
        vendor=0x10DE,
        device=device,
        subsystem_vendor=0x10DE,
        subsystem_device=0x204B,
        pci_class=cls,
        sysfs_path=f"sys/devices/{root}/{address}",
        numa_node=node,
        iommu_group=group,
        driver=driver,
        local_cpus=CpuList.parse(KPRO6_CPUS[node]),
    )


def kpro6(files: dict[str, str] | None = None, audio_group_offset: int = 0) -> HostFacts:
    """kpro6 before the split: 8 RTX PRO 6000 Blackwell (10de:2bb5, subsystem 10de:204b)
    on nvidia with minors 0-7, NUMA 0 = buses 01/11/61/71, NUMA 1 = 81/91/e1/f1, each
    with its HD audio .1 in the GPU's IOMMU group (`audio_group_offset` moves it out)."""
    functions: list[PciFunction] = []
    gpus: list[GPU] = []
    groups: list[IommuGroup] = []
    for minor, bus in enumerate(KPRO6_NUMA0_BUSES + KPRO6_NUMA1_BUSES):
        group = KPRO6_GROUPS[bus]
        gpu_fn = _kpro6_function(PciAddress(0, bus, 0, 0), 0x2BB5, 0x030200, "nvidia", group)
        audio = _kpro6_function(
            PciAddress(0, bus, 0, 1), 0x22E8, 0x040300, "snd_hda_intel", group + audio_group_offset
        )
        functions += [gpu_fn, audio]
        gpus.append(GPU(gpu_fn, (audio,), node_minor=minor, model="NVIDIA RTX PRO 6000"))
        members = {group: [gpu_fn.address], group + audio_group_offset: [audio.address]}
        if audio_group_offset == 0:
            members = {group: [gpu_fn.address, audio.address]}
        groups += [IommuGroup(g, tuple(m), IommuGroupType.DMA_FQ) for g, m in members.items()]
    return HostFacts(
        node="kpro6",
        functions=tuple(functions),
        gpus=tuple(gpus),
        numa_nodes=tuple(NumaNode(i, CpuList.parse(c)) for i, c in enumerate(KPRO6_CPUS)),
        iommu_groups=tuple(sorted(groups, key=lambda g: g.id)),
        iommu=IommuState(True, ("ivhd0", "ivhd1")),
        sev_snp=True,
        gpu_drivers=(GpuDriver("nvidia", "590.48.01", KernelModuleFlavor.OPEN),),
        char_majors=(
            CharMajor(195, "nvidia"),
            CharMajor(236, "nvidia-caps"),
            CharMajor(NVIDIA_UVM_MAJOR, "nvidia-uvm"),
        ),
        cmdline="BOOT_IMAGE=/boot/vmlinuz-6.8.12-4-pve root=ZFS=rpool/ROOT/pve-1 boot=zfs",
        vfio_ids=(),
        files=tuple(ConfigFile(path, content) for path, content in (files or {}).items()),
    )


# Its Proxmox files before the split, as Proxmox writes them.
_GPU_MOUNTS = "".join(
    f"lxc.mount.entry: /dev/{n} dev/{n} none bind,optional,create=file\n"
    for n in [*(f"nvidia{i}" for i in range(8)), "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"]
)
KPRO6_LXC_129 = (
    "#SGLang Qwen3.5 inference, 8x RTX PRO 6000\n"
    "arch: amd64\n"
    "cores: 64\n"
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
    "lxc.cgroup2.devices.allow: c 195:* rwm\n"
    f"lxc.cgroup2.devices.allow: c {NVIDIA_UVM_MAJOR}:* rwm\n"
    f"{_GPU_MOUNTS}"
    "lxc.mount.entry: /tank/hf-cache root/.cache/huggingface none bind,create=dir\n"
    "\n"
    "[pre-split]\n"
    "#SGLang Qwen3.5 inference, 8x RTX PRO 6000\n"
    "arch: amd64\n"
    "cores: 64\n"
    "hostname: sglang\n"
    "memory: 524288\n"
    "rootfs: local-zfs:subvol-129-disk-0,size=300G\n"
    "snaptime: 1733000000\n"
    "lxc.cgroup2.devices.allow: c 195:* rwm\n"
    f"lxc.cgroup2.devices.allow: c {NVIDIA_UVM_MAJOR}:* rwm\n"
    f"{_GPU_MOUNTS}"
)
KPRO6_PCI_CFG = (
    "nic-x710\n"
    "\tmap id=8086:1572,iommugroup=5,node=kpro6,path=0000:41:00.0,subsystem-id=8086:0006\n"
    "\tdescription spare X710 port\n"
    "\n"
    "pro6000\n"
    + "".join(
        f"\tmap id=10de:2bb5,iommugroup={KPRO6_GROUPS[bus]},node=kpro6,path=0000:{bus:02x}:00,"
        "subsystem-id=10de:204b\n"
        for bus in KPRO6_NUMA0_BUSES + KPRO6_NUMA1_BUSES
    )
    + "\tdescription RTX PRO 6000 x8\n"
    "\n"
)
KPRO6_VM_140 = (
    "#Confidential inference VM (SEV-SNP)\n"
    "amd-sev: type=snp,allow-smt=1,kernel-hashes=1\n"
    "bios: ovmf\n"
    "boot: order=scsi0\n"
    "cores: 32\n"
    "cpu: EPYC-Genoa\n"
    "efidisk0: local-zfs:vm-140-disk-0,efitype=4m,size=1M\n"
    "machine: q35\n"
    "memory: 262144\n"
    "meta: creation-qemu=9.2.0,ctime=1733123456\n"
    "name: snp-gpu\n"
    "net0: virtio=BC:24:11:5E:7A:01,bridge=vmbr0,firewall=1\n"
    "ostype: l26\n"
    "scsi0: local-zfs:vm-140-disk-1,iothread=1,size=400G\n"
    "scsihw: virtio-scsi-single\n"
    "smbios1: uuid=5b0c3f4e-2a51-4c8e-9a57-1d2f0c7e9b11\n"
    "sockets: 1\n"
    "vga: none\n"
    "vmgenid: 8f1d2c3b-4a5e-4f60-8b7c-9d0e1f2a3b4c\n"
)
