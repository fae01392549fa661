"""The pure pieces of issue 9 items 3-4: storage.cfg, the rootfs location, drop-in order."""

from __future__ import annotations

import pytest

from pvegpu.engines.common.dropins import (
    effective_dropins,
    guarded_settings,
    judge_dropins,
    neutralized,
)
from pvegpu.model.facts import ConfigFile
from pvegpu.model.paths import dropin_dirs
from pvegpu.model.rootfs import RootfsLocation, locate_rootfs, rootfs_volume
from pvegpu.pvefiles.storagecfg import parse_storage_cfg
from pvegpu.serving.unitfile import ENVIRONMENT, EXEC_START, SERVICE, environment_pairs, merge_units

STORAGE = """\
dir: local
\tpath /var/lib/vz
\tcontent iso,vztmpl,backup

# a comment line
zfspool: local-zfs
\tpool rpool/data
\tsparse
\tcontent images,rootdir

zfspool: tank
\tpool tank/ct
\tmountpoint /srv/tank

dir: bulk
\tpath /mnt/bulk
\tcontent rootdir

btrfs: fast
\tpath /mnt/fast

lvmthin: local-lvm
\tthinpool data
\tvgname pve
\tcontent rootdir,images

rbd: ceph
\tpool ct
"""
UNIT = "sglang-qwen"
ROOTFS = "rpool/data/subvol-129-disk-0"


def test_storage_cfg_sections_properties_and_flags() -> None:
    storages = parse_storage_cfg(STORAGE)
    assert storages["local-zfs"].type == "zfspool"
    assert storages["local-zfs"].get("pool") == "rpool/data"
    assert storages["local-zfs"].get("sparse") == ""
    assert storages["tank"].get("mountpoint") == "/srv/tank"
    assert storages["local-lvm"].get("vgname") == "pve"
    assert storages["ceph"].type == "rbd"


def test_storage_cfg_always_has_local() -> None:
    """pve-storage adds `dir: local` at /var/lib/vz when the file lacks it (or changes it)."""
    assert parse_storage_cfg("")["local"].get("path") == "/var/lib/vz"
    assert parse_storage_cfg("lvm: local\n\tvgname x\n")["local"].type == "dir"


def conf(rootfs: str) -> str:
    return f"arch: amd64\nrootfs: {rootfs}\n\n[snap]\nrootfs: local-zfs:other\n"


@pytest.mark.parametrize(
    ("rootfs", "path"),
    [
        ("local-zfs:subvol-129-disk-0,size=200G", "rpool/data/subvol-129-disk-0"),
        ("volume=tank:subvol-129-disk-1,size=8G", "srv/tank/subvol-129-disk-1"),
        ("local-zfs:basevol-100-disk-0/subvol-129-disk-0", "rpool/data/subvol-129-disk-0"),
        (
            "local:129/subvol-129-disk-0.subvol,size=0",
            "var/lib/vz/images/129/subvol-129-disk-0.subvol",
        ),
        ("bulk:subvol-129-disk-0", "mnt/bulk/images/129/subvol-129-disk-0"),
        ("fast:129/subvol-129-disk-0.subvol", "mnt/fast/images/129/subvol-129-disk-0.subvol"),
        ("/srv/ct129", "srv/ct129"),
    ],
)
def test_directory_volumes(rootfs: str, path: str) -> None:
    assert locate_rootfs(129, conf(rootfs), STORAGE).path == path


@pytest.mark.parametrize(
    ("rootfs", "why"),
    [
        ("local-lvm:vm-129-disk-0,size=32G", "local-lvm is lvmthin storage"),
        ("ceph:vm-129-disk-0", "ceph is rbd storage"),
        ("local-zfs:vm-129-disk-0", "is a zvol"),
        ("local:129/vm-129-disk-0.raw", "is a disk image"),
        ("gone:subvol-129-disk-0", "storage gone is not in /etc/pve/storage.cfg"),
        ("/dev/sdb1", "is a block device"),
    ],
)
def test_block_volumes_say_why(rootfs: str, why: str) -> None:
    location = locate_rootfs(129, conf(rootfs), STORAGE)
    assert location.path is None
    assert why in location.why


def test_no_rootfs_line_or_config() -> None:
    assert locate_rootfs(129, "arch: amd64\n", STORAGE) == RootfsLocation(
        None, None, "etc/pve/lxc/129.conf has no rootfs: line"
    )
    assert locate_rootfs(129, None, STORAGE).why == "etc/pve/lxc/129.conf was not read"
    # Only the main section counts: a snapshot's rootfs is another state.
    assert rootfs_volume("arch: amd64\n[snap]\nrootfs: local-zfs:x\n") is None


def test_dropin_dirs_in_systemd_order() -> None:
    dirs = dropin_dirs("a-b-c")
    assert dirs[:3] == (
        "etc/systemd/system/a-b-c.service.d",
        "etc/systemd/system/a-b-.service.d",
        "etc/systemd/system/a-.service.d",
    )
    assert dirs.index("usr/lib/systemd/system/a-b-c.service.d") > dirs.index(
        "run/systemd/system/a-.service.d"
    )
    assert dirs[-5:] == tuple(
        f"{d}/service.d"
        for d in (
            "etc/systemd/system",
            "run/systemd/system",
            "usr/local/lib/systemd/system",
            "usr/lib/systemd/system",
            "lib/systemd/system",
        )
    )


def files(**by_path: str) -> tuple[ConfigFile, ...]:
    return tuple(ConfigFile(f"{ROOTFS}/{p}", t) for p, t in by_path.items())


def test_effective_dropins_by_name_across_dirs_etc_first() -> None:
    """Sorted by file name whatever the directory; a name in /etc hides the same name below."""
    found = effective_dropins(
        (
            *files(
                **{
                    "usr/lib/systemd/system/sglang-qwen.service.d/10-a.conf": "vendor",
                    "etc/systemd/system/sglang-qwen.service.d/10-a.conf": "admin",
                    "etc/systemd/system/service.d/05-all.conf": "all services",
                    "usr/lib/systemd/system/sglang-.service.d/20-prefix.conf": "prefix",
                    "etc/systemd/system/sglang-qwen.service.d/notes.txt": "not a drop-in",
                }
            ),
            ConfigFile("other/etc/systemd/system/sglang-qwen.service.d/00.conf", "elsewhere"),
        ),
        ROOTFS,
        UNIT,
    )
    assert [(d.name, d.text) for d in found] == [
        ("05-all.conf", "all services"),
        ("10-a.conf", "admin"),
        ("20-prefix.conf", "prefix"),
    ]


def test_merged_unit_resets_exec_start_and_last_variable_wins() -> None:
    merged = merge_units(
        (
            "[Service]\nEnvironment=NCCL_P2P_DISABLE=1 A=1\nExecStart=/bin/old --tp-size 4\n",
            "[Service]\nEnvironment=NCCL_P2P_DISABLE=0\nExecStart=\nExecStart=/bin/new --tp 8\n",
        )
    )
    assert merged.values(SERVICE, EXEC_START) == ("/bin/new --tp 8",)
    assert dict(environment_pairs(merged.values(SERVICE, ENVIRONMENT))) == {
        "NCCL_P2P_DISABLE": "0",
        "A": "1",
    }


OVERRIDE = """\
[Service]
Environment=NCCL_P2P_DISABLE=0 "HF_HOME=/data/hf cache"
ExecStart=
ExecStart=/root/ml-env/bin/python3 -m sglang.launch_server \\
    --model-path /m --tp 8
CPUAffinity=0-127
UnsetEnvironment=CUDA_VISIBLE_DEVICES FOO
Nice=-5
[Install]
WantedBy=default.target
"""


def test_guarded_settings_named_as_the_finding_shows_them() -> None:
    assert guarded_settings(OVERRIDE) == (
        "`Environment=NCCL_P2P_DISABLE=0`",
        "`ExecStart=` (clears the command)",
        "`ExecStart=/root/ml-env/bin/python3 … --tp 8`",
        "`CPUAffinity=0-127`",
        "`UnsetEnvironment=CUDA_VISIBLE_DEVICES`",
    )
    assert guarded_settings("[Service]\nNice=-5\nEnvironment=HF_HOME=/x\n") == ()
    # The same keys outside [Service] are not the server's.
    assert guarded_settings("[Unit]\nExecStart=/x\n") == ()


def test_neutralized_switches_off_every_line_of_a_guarded_setting_and_keeps_the_rest() -> None:
    text = neutralized(OVERRIDE, "etc/systemd/system/sglang-qwen.service", "")
    body = [line for line in text.splitlines() if not line.startswith("# ")]
    assert body == [
        "[Service]",
        '#pvegpu# Environment=NCCL_P2P_DISABLE=0 "HF_HOME=/data/hf cache"',
        'Environment="HF_HOME=/data/hf cache"',
        "#pvegpu# ExecStart=",
        "#pvegpu# ExecStart=/root/ml-env/bin/python3 -m sglang.launch_server \\",
        "#pvegpu#     --model-path /m --tp 8",
        "#pvegpu# CPUAffinity=0-127",
        "#pvegpu# UnsetEnvironment=CUDA_VISIBLE_DEVICES FOO",
        "UnsetEnvironment=FOO",
        "Nice=-5",
        "[Install]",
        "WantedBy=default.target",
    ]
    # What systemd reads from it now sets nothing the unit decides.
    assert guarded_settings(text) == ()
    merged = merge_units((text,))
    assert merged.values(SERVICE, "Nice") == ("-5",)
    assert dict(environment_pairs(merged.values(SERVICE, ENVIRONMENT))) == {
        "HF_HOME": "/data/hf cache"
    }


def test_a_guarded_dropin_holding_a_secret_is_refused() -> None:
    """Its neutralized copy would put the token into the bundle."""
    (dropin,) = effective_dropins(
        files(
            **{
                "etc/systemd/system/sglang-qwen.service.d/tok.conf": (
                    "[Service]\nEnvironment=HF_TOKEN=hf_abc NCCL_P2P_DISABLE=0\n"
                )
            }
        ),
        ROOTFS,
        UNIT,
    )
    changes, problems = judge_dropins((dropin,), {}, UNIT, 129, "ct:129")
    assert changes == ()
    assert [p.code for p in problems] == ["serving-dropin-secret"]
    assert "hf_abc" not in str(problems[0])
    assert problems[0].subject == "ct:129/etc/systemd/system/sglang-qwen.service.d/tok.conf"
