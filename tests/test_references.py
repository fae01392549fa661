"""The inventory of GPU references (host/references.py) and how the planner judges them
(planning/references.py): every way a guest or the host reaches a GPU resolves to the
GPUs it reaches, or is named as unresolved; what the split breaks is refused or named."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from syrupy.assertion import SnapshotAssertion

from pvegpu.errors import PlanError
from pvegpu.model.facts import HostFacts
from pvegpu.model.references import CgroupVersion, GpuReference, ReferenceKind
from pvegpu.planning.planner import plan
from pvegpu.spec.load import parse_spec
from reference_host import facts_with, host_with

Golden = Callable[[str], SnapshotAssertion]
# The reference split without its server: NUMA 0 to CT 129, NUMA 1 to vfio-pci.
SPLIT = """\
node = "kpro6"
[[pools]]
name = "ct"
numa_node = 0
mapping = { id = "pro6000" }
lxc = { vmid = 129 }
[[pools]]
name = "vm"
numa_node = 1
mapping = { id = "pro6000-vm" }
vfio = {}
"""
KPRO6 = parse_spec(SPLIT)
# kpro6's GPUs in PCI order: NVML indices 0..7; UUIDs from their information files.
UUID_61 = "GPU-1ddf965b-3fad-5b39-9b52-0d00e3799927"
UUID_81 = "GPU-26515c1c-21cc-5a79-bc50-03376ece417e"

# One of every kind, on the reference host: another container by the nvidia hook, raw
# rules of both hierarchies and a /dev/dri bind; a VM with args and a hookscript; the
# host's udev rule, unit, modprobe.d, sysfs.conf and CDI spec.
EVERY_KIND = {
    "etc/pve/lxc/140.conf": (
        "arch: amd64\nhostname: notebooks\nunprivileged: 1\n"
        "dev0: /dev/dri/by-id/odd-name\n"
        "lxc.cgroup.devices.allow: c 195:* rwm\n"
        "lxc.cgroup2.devices.allow: c 195:2 rwm\n"
        "lxc.mount.entry: /dev/dri dev/dri none bind,optional,create=dir\n"
        f"lxc.environment: NVIDIA_VISIBLE_DEVICES=2,{UUID_81}\n"
        "lxc.hook.mount: /usr/share/lxc/hooks/nvidia\n"
        "lxc.hook.pre-start: /usr/local/bin/gpu-prep.sh\n"
    ),
    "usr/local/bin/gpu-prep.sh": (
        "#!/bin/sh\n# binds every NVIDIA GPU lspci lists\n"
        'for d in $(lspci -D -d 10de: | cut -d" " -f1); do\n'
        "  echo vfio-pci > /sys/bus/pci/devices/$d/driver_override\ndone\n"
    ),
    "etc/pve/qemu-server/300.conf": (
        "memory: 16384\nhostpci0: mapping=nowhere,pcie=1\n"
        "args: -device vfio-pci,host=0000:91:00.0,id=gpu\n"
        "hookscript: local:snippets/reset.sh\n"
    ),
    "var/lib/vz/snippets/reset.sh": (
        '#!/bin/sh\n[ "$2" = post-stop ] && echo 1 > /sys/bus/pci/devices/0000:e1:00.0/remove\n'
    ),
    "etc/udev/rules.d/90-gpu.rules": (
        'ACTION=="add", SUBSYSTEM=="pci", ATTR{vendor}=="0x10de", ATTR{device}=="0x2bb5", '
        'ATTR{driver_override}="vfio-pci"\n'
        'KERNEL=="nvidia3", MODE="0666"\n'
    ),
    "etc/systemd/system/dcgm-pin.service": (
        "[Service]\nExecStart=/usr/bin/dcgmi discovery -d /dev/nvidia5\n"
    ),
    "etc/modprobe.d/gpu.conf": "alias pci:v000010DEd00002BB5sv*sd*bc*sc*i* vfio-pci\n",
    "etc/sysfs.conf": "bus/pci/devices/0000:f1:00.0/driver_override = vfio-pci\n",
    "etc/cdi/nvidia.yaml": (
        'cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: "6"\n'
        "  containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia6\n"
    ),
}


def listing(refs: tuple[GpuReference, ...]) -> str:
    """The inventory as a reviewer reads it: one line per reference."""
    lines = []
    for r in refs:
        parts = [f"{r.kind.value} @ {r.where}: {r.text}", f"  {r.guest}"]
        if r.gpus:
            parts.append("  reaches " + ", ".join(g.short for g in r.gpus))
        for label, value in (
            ("every", r.every),
            ("binds", r.binds),
            ("unresolved", r.unresolved),
            ("inert", r.inert),
        ):
            if value is not None:
                parts.append(f"  {label}: {value}")
        lines.append("\n".join(parts))
    return "\n".join(lines) + "\n"


def test_every_kind_of_reference_is_found(tmp_path: Path, golden: Golden) -> None:
    facts = facts_with(tmp_path, "kpro6", EVERY_KIND)
    kinds = {r.kind for r in facts.references}
    # driverctl and the command line's blacklists: tests/test_field_hosts.py.
    assert kinds == set(ReferenceKind) - {ReferenceKind.DRIVERCTL, ReferenceKind.CMDLINE}
    extra = [r for r in facts.references if r.path != "etc/pve/lxc/129.conf"]
    assert listing(tuple(extra)) == golden("txt")


def test_references_survive_the_facts_json(tmp_path: Path) -> None:
    from pvegpu.host.facts_json import facts_from_json, facts_to_json

    facts = facts_with(tmp_path, "kpro6", EVERY_KIND)
    again = facts_from_json(facts_to_json(facts))
    assert again.references == facts.references and again.cgroup is facts.cgroup


def refs(facts: HostFacts, path: str) -> list[GpuReference]:
    return [r for r in facts.references if r.path == path]


def test_the_nvidia_hook_resolves_indices_uuids_and_all(tmp_path: Path) -> None:
    """Indices are the driver's PCI order; `all` every GPU it holds; `void` none."""
    configs = {
        f"etc/pve/lxc/{vmid}.conf": f"lxc.environment: NVIDIA_VISIBLE_DEVICES={value}\n"
        "lxc.hook.mount: /usr/share/lxc/hooks/nvidia\n"
        for vmid, value in ((140, "0,7"), (141, UUID_61), (142, "all"), (143, "void"))
    }
    facts = facts_with(tmp_path, "kpro6", configs)
    found = {
        r.vmid: [g.short for g in r.gpus]
        for r in facts.references
        if r.kind is ReferenceKind.GPU_HOOK
    }
    every = ["01:00.0", "11:00.0", "61:00.0", "71:00.0", "81:00.0", "91:00.0", "e1:00.0"]
    assert found == {140: ["01:00.0", "f1:00.0"], 141: ["61:00.0"], 142: [*every, "f1:00.0"]}


def test_by_path_names_its_gpu_and_a_missing_one_is_unresolved(tmp_path: Path) -> None:
    facts = facts_with(
        tmp_path,
        "intel-media",
        {
            "etc/pve/lxc/150.conf": "dev0: /dev/dri/by-path/pci-0000:03:00.0-render\n"
            "dev1: /dev/dri/by-path/pci-0000:04:00.0-render\n"
        },
    )
    good, missing = refs(facts, "etc/pve/lxc/150.conf")
    assert [g.short for g in good.gpus] == ["03:00.0"] and good.unresolved is None
    assert missing.gpus == () and "pve-container refuses to start" in (missing.unresolved or "")


def test_the_cgroup_key_of_the_other_hierarchy_is_inert(tmp_path: Path) -> None:
    conf = "lxc.cgroup.devices.allow: c 195:0 rwm\nlxc.cgroup2.devices.allow: c 195:1 rwm\n"
    v2 = facts_with(tmp_path / "a", "kpro6", {"etc/pve/lxc/140.conf": conf})
    v1 = facts_with(
        tmp_path / "b",
        "kpro6",
        {"etc/pve/lxc/140.conf": conf, "sys/fs/cgroup/devices/devices.list": "a *:* rwm\n"},
    )
    assert (v2.cgroup, v1.cgroup) == (CgroupVersion.V2, CgroupVersion.V1)
    assert [r.inert is not None for r in refs(v2, "etc/pve/lxc/140.conf")] == [True, False]
    assert [r.inert is not None for r in refs(v1, "etc/pve/lxc/140.conf")] == [False, True]


@pytest.mark.parametrize(
    ("cmdline", "version"),
    [(" systemd.unified_cgroup_hierarchy=0", "v1"), (" systemd.unified_cgroup_hierarchy=1", "v2")],
)
def test_without_sys_fs_cgroup_the_command_line_says(
    tmp_path: Path, cmdline: str, version: str
) -> None:
    root = host_with(tmp_path, "kpro6", {})
    line = (root / "proc" / "cmdline").read_text().rstrip("\n")
    (root / "proc" / "cmdline").write_text(line + cmdline + "\n")
    from pvegpu.host.discover import discover

    assert discover(root).cgroup.value == version


def test_a_hookscript_on_storage_without_files_is_unresolved(tmp_path: Path) -> None:
    facts = facts_with(
        tmp_path, "kpro6", {"etc/pve/qemu-server/300.conf": "hookscript: local-zfs:snippets/x\n"}
    )
    (ref,) = refs(facts, "etc/pve/qemu-server/300.conf")
    assert ref.kind is ReferenceKind.HOOKSCRIPT
    assert "zfspool storage, which holds no files" in (ref.unresolved or "")


def test_a_host_unit_is_followed_into_the_admins_script(tmp_path: Path) -> None:
    facts = facts_with(
        tmp_path,
        "kpro6",
        {
            "etc/systemd/system/gpu-bind.service": "[Service]\nType=oneshot\n"
            "ExecStart=/usr/local/sbin/gpu-bind.sh\n",
            "usr/local/sbin/gpu-bind.sh": "#!/bin/sh\necho 0000:81:00.0 > "
            "/sys/bus/pci/devices/0000:81:00.0/driver/unbind\n",
        },
    )
    (ref,) = refs(facts, "etc/systemd/system/gpu-bind.service")
    assert [g.short for g in ref.gpus] == ["81:00.0"] and ref.binds == "unbind"


# --- the planner's judgments -----------------------------------------------------------


def refused(facts: HostFacts, spec_text: str | None = None) -> dict[str, list[str]]:
    spec = KPRO6 if spec_text is None else parse_spec(spec_text)
    with pytest.raises(PlanError) as err:
        plan(facts, spec)
    found: dict[str, list[str]] = {}
    for p in err.value.problems:
        found.setdefault(p.code, []).append(p.subject)
    return found


def codes(facts: HostFacts) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for f in plan(facts, KPRO6).findings:
        found.setdefault(f.code, []).append(f.subject)
    return found


def test_every_kind_on_the_reference_split(tmp_path: Path, golden: Golden) -> None:
    """What the planner says of each reference when NUMA 0 stays for CT 129 and NUMA 1
    moves to vfio-pci: the refusals are exactly those that would break the split."""
    facts = facts_with(tmp_path, "kpro6", EVERY_KIND)
    with pytest.raises(PlanError) as err:
        plan(facts, KPRO6)
    problems = [p for p in err.value.problems if p.code != "lxc-grants-all-gpus"]
    assert sorted((p.code, p.subject) for p in problems) == [
        ("binder-takes-host-gpu", "etc/modprobe.d/gpu.conf line 1"),
        ("binder-takes-host-gpu", "etc/udev/rules.d/90-gpu.rules line 1"),
        ("lxc-hook-grants-pool-gpu", "etc/pve/lxc/140.conf line 9"),
        ("vm-args-takes-pool-gpu", "etc/pve/qemu-server/300.conf line 3"),
    ]
    assert "\n\n".join(str(p) for p in problems) + "\n" == golden("txt")


def test_an_inert_v1_rule_is_named_not_refused(tmp_path: Path) -> None:
    facts = facts_with(
        tmp_path, "kpro6", {"etc/pve/lxc/140.conf": "lxc.cgroup.devices.allow: c 195:* rwm\n"}
    )
    assert codes(facts)["lxc-cgroup-key-inert"] == ["etc/pve/lxc/140.conf"]


def test_a_v1_host_reads_and_writes_the_v1_key(tmp_path: Path) -> None:
    """On a legacy-hierarchy host the v1 wildcard is live (refused), the v2 one inert, and
    a raw pool's lines are written with the v1 key."""
    files = {
        "etc/pve/lxc/140.conf": "lxc.cgroup.devices.allow: c 195:* rwm\n",
        "sys/fs/cgroup/devices/devices.list": "a *:* rwm\n",
    }
    facts = facts_with(tmp_path, "kpro6", files)
    assert refused(facts)["lxc-grants-all-gpus"] == ["etc/pve/lxc/140.conf line 1"]
    files["etc/pve/lxc/140.conf"] = "lxc.cgroup2.devices.allow: c 195:* rwm\n"
    facts = facts_with(tmp_path / "v1", "kpro6", files)
    planned = plan(
        facts, parse_spec(SPLIT.replace("vmid = 129 }", 'vmid = 129, devices = "raw" }'))
    )
    assert "lxc-cgroup-key-inert" in {f.code for f in planned.findings}
    (pool,) = planned.lxc_pools
    assert pool.lxc is not None
    assert {k for k, _ in pool.lxc.gpu_lines.raw} == {
        "lxc.cgroup.devices.allow",
        "lxc.mount.entry",
    }


def test_hook_in_the_pools_own_container_beside_dev_entries_is_refused(tmp_path: Path) -> None:
    facts = facts_with(
        tmp_path,
        "kpro6",
        {
            "etc/pve/lxc/129.conf": "arch: amd64\nunprivileged: 1\n"
            "lxc.environment: NVIDIA_VISIBLE_DEVICES=0,1,2,3\n"
            "lxc.hook.mount: /usr/share/lxc/hooks/nvidia\n"
        },
    )
    assert "lxc-hook-with-dev-entries" in refused(facts)


def test_hook_indices_that_the_split_shifts_are_refused(tmp_path: Path) -> None:
    """NUMA 0 moves to vfio-pci: index 4 named 81:00.0 and then names nothing."""
    spec = (
        'node = "kpro6"\n[[pools]]\nname = "vm"\nnuma_node = 0\nmapping = { id = "vm-gpus" }\n'
        "vfio = {}\n"
    )
    conf = (
        "lxc.environment: NVIDIA_VISIBLE_DEVICES=0\nlxc.hook.mount: /usr/share/lxc/hooks/nvidia\n"
    )
    facts = facts_with(tmp_path, "kpro6", {"etc/pve/lxc/140.conf": conf})
    assert refused(facts, spec) == {"lxc-hook-grants-pool-gpu": ["etc/pve/lxc/140.conf line 2"]}
    conf = (
        "lxc.environment: NVIDIA_VISIBLE_DEVICES=4\nlxc.hook.mount: /usr/share/lxc/hooks/nvidia\n"
    )
    facts = facts_with(tmp_path / "b", "kpro6", {"etc/pve/lxc/140.conf": conf})
    assert refused(facts, spec) == {"lxc-hook-index-shifts": ["etc/pve/lxc/140.conf line 2"]}
    by_uuid = conf.replace("=4", f"={UUID_81}")
    facts = facts_with(tmp_path / "c", "kpro6", {"etc/pve/lxc/140.conf": by_uuid})
    plan(facts, parse_spec(spec))  # a UUID stays its GPU: nothing to say


def test_binders_of_vfio_gpus_race_the_split_unit(tmp_path: Path) -> None:
    facts = facts_with(
        tmp_path,
        "kpro6",
        {"etc/sysfs.conf": "bus/pci/devices/0000:81:00.0/driver_override = vfio-pci\n"},
    )
    assert codes(facts)["second-gpu-binder"] == ["etc/sysfs.conf line 1"]


def test_blacklisting_the_driver_a_pool_keeps_is_named(tmp_path: Path) -> None:
    facts = facts_with(tmp_path, "kpro6", {"etc/modprobe.d/nv.conf": "blacklist nvidia\n"})
    assert codes(facts)["gpu-driver-blacklisted"] == ["etc/modprobe.d/nv.conf line 1"]


def test_what_pvegpu_cannot_resolve_is_named(tmp_path: Path) -> None:
    facts = facts_with(
        tmp_path,
        "kpro6",
        {
            "etc/pve/lxc/140.conf": "lxc.hook.pre-start: /usr/local/bin/gpu-prep.sh\n"
            "dev0: /dev/dri/by-id/x\n",
            "usr/local/bin/gpu-prep.sh": EVERY_KIND["usr/local/bin/gpu-prep.sh"],
            "etc/pve/qemu-server/300.conf": "hookscript: local:snippets/missing.sh\n",
        },
    )
    assert codes(facts)["gpu-reference-unresolved"] == [
        "etc/pve/lxc/140.conf line 1",
        "etc/pve/lxc/140.conf line 2",
        "etc/pve/qemu-server/300.conf line 1",
    ]


def test_a_cdi_spec_by_number_is_named_when_the_split_moves_its_gpu(tmp_path: Path) -> None:
    facts = facts_with(tmp_path, "kpro6", {"etc/cdi/n.yaml": EVERY_KIND["etc/cdi/nvidia.yaml"]})
    (finding,) = [f for f in plan(facts, KPRO6).findings if f.code == "cdi-spec-stale"]
    assert finding.subject == "etc/cdi/n.yaml"
    assert "device nvidia.com/gpu=6 hands over /dev/nvidia6 of e1:00.0" in finding.message
    assert "(line 7): after the split those nodes are gone" in finding.message


def test_discover_shows_who_uses_each_gpu_and_what_it_cannot_tell(tmp_path: Path) -> None:
    from pvegpu.cli.discover import format_table

    text = format_table(facts_with(tmp_path, "kpro6", EVERY_KIND))
    lines = text.splitlines()
    assert (
        "USE 91:00.0: CT 129 dev5; VM 300 args; the host etc/systemd/system/dcgm-pin.service "
        "line 2, etc/modprobe.d/gpu.conf line 1"
    ) in lines
    assert any(ln.startswith("ALL CT 140: `lxc.mount.entry: /dev/dri") for ln in lines)
    unknown = [ln for ln in lines if ln.startswith("?   ")]
    assert [ln.split(" (")[0] for ln in unknown] == [
        "?   etc/pve/lxc/140.conf line 4",
        "?   etc/pve/lxc/140.conf line 10",
        "?   etc/pve/qemu-server/300.conf line 2",
    ]
