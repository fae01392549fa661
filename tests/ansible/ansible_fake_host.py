"""The host a `pvegpu.proxmox` module changes in the Ansible tests: a copied fixture tree.

The modules take their host from `PVEGPU_ANSIBLE_TEST_HOST=module:function` (their one
test seam, docs/ansible.md), called with the node's root. This one is tests/apply_fake.py's
`FakeHost`: files are written by apply's own code under the temporary root, `pct` and
`systemctl` are answered and recorded, nothing is run. The split script is answered
here too, from the applied bundle's planned drivers, by relinking the tree's
sys/bus/pci driver links as the kernel would: the script itself runs against the
simulated kernel in tests/test_apply.py, which needs the test process's threads and
FIFOs under sys/; a module is a separate, short-lived process and its tree is compared
file by file afterwards.

Every command the fake answers is appended to `<root>/../<node>.commands` (one JSON
array a line), so a test can say which commands ran, and that a second run ran none.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, cast

from apply_fake import FakeHost
from pvegpu.apply.host import Completed
from pvegpu.apply.state import STATE_DIR, last_apply
from pvegpu.model.rootfs import locate_rootfs
from pvegpu.rendering.review.commands import SPLIT_SCRIPT
from sysfs_sim import KernelSim, register_driver

_VFIO = "vfio-pci"
CLUSTER_FILES = "etc/pve/mapping/"
"""Files pmxcfs shares across the cluster that a bundle writes (pci.cfg)."""


def _rootfs(root: Path) -> dict[int, str]:
    """vmid -> its root file system's directory in the tree, for each container."""
    found: dict[int, str] = {}
    lxc = root / "etc/pve/lxc"
    storage = root / "etc/pve/storage.cfg"
    storage_cfg = storage.read_text() if storage.is_file() else None
    for conf in sorted(lxc.glob("*.conf")) if lxc.is_dir() else ():
        vmid = int(conf.stem)
        location = locate_rootfs(vmid, conf.read_text(), storage_cfg)
        if location.path is not None:
            found[vmid] = location.path
    return found


class TreeHost(FakeHost):
    def __init__(self, root: Path) -> None:
        # No simulated kernel: the split script is answered by `_split` below.
        super().__init__(root, cast(KernelSim, None), _rootfs(root))
        self.log = root.parent / f"{root.name}.commands"

    def write(self, path: str, content: bytes, mode: int, *, before: frozenset[str] | None) -> None:
        super().write(path, content, mode, before=before)
        self._share(path)

    def remove(self, path: str, *, before: frozenset[str] | None) -> None:
        super().remove(path, before=before)
        self._share(path)

    def _share(self, path: str) -> None:
        """pmxcfs: a cluster file (/etc/pve/mapping/) written on one node is the same
        file on every node. The other nodes' roots are this root's siblings."""
        if not path.startswith(CLUSTER_FILES):
            return
        mine = self.root / path
        for other in sorted(self.root.parent.iterdir()):
            if other == self.root or not (other / "etc/pve").is_dir():
                continue
            copy = other / path
            if mine.is_file():
                copy.parent.mkdir(parents=True, exist_ok=True)
                copy.write_bytes(mine.read_bytes())
            else:
                copy.unlink(missing_ok=True)

    def _execute(self, argv: tuple[str, ...]) -> Completed:
        with self.log.open("a") as out:
            out.write(json.dumps(list(argv)) + "\n")
        return super()._execute(argv)

    def _answer(self, argv: tuple[str, ...]) -> tuple[int, str]:
        if argv[0] == SPLIT_SCRIPT:
            return self._split(argv[1])
        return super()._answer(argv)

    def _functions(self) -> list[dict[str, Any]]:
        bundle_id = last_apply(self)
        assert bundle_id is not None, "the split script runs after apply saved its bundle"
        manifest = self.read(f"{STATE_DIR}/{bundle_id}/bundle/MANIFEST.json")
        assert manifest is not None
        functions: list[dict[str, Any]] = json.loads(manifest)["apply"]["facts"]["functions"]
        return functions

    def _split(self, verb: str) -> tuple[int, str]:
        functions = self._functions()
        if verb == "status":
            wrong = [
                f["address"] for f in functions if self.driver(f["address"]) != f["driver_after"]
            ]
            return (1 if wrong else 0), "".join(f"{a}: not as planned\n" for a in wrong)
        for function in functions:
            to = function["driver_after"] if verb == "bind" else function["driver"]
            self._bind(function["address"], to, override=to == _VFIO and verb == "bind")
        return 0, ""

    def _bind(self, address: str, driver: str | None, *, override: bool) -> None:
        sys = self.root / "sys"
        device = sys / "bus/pci/devices" / address
        (device / "driver_override").write_text(f"{_VFIO}\n" if override else "(null)\n")
        link = device / "driver"
        if link.is_symlink():
            link.unlink()
        if driver is None:
            return
        target = sys / "bus/pci/drivers" / driver
        if not target.is_dir():
            register_driver(sys, driver)  # as modprobe would
        link.symlink_to(os.path.relpath(target.resolve(), device.resolve()))


def host(root: Path) -> TreeHost:
    """The factory PVEGPU_ANSIBLE_TEST_HOST names."""
    return TreeHost(root)
