"""A simulated kernel behind a copied fixture host's sysfs, for running the split script.

Plans come from the committed fixture hosts through the real pipeline (discover + plan);
the script then runs on a copy of the host's sys/ tree, which tests may first change the
way a host changes after planning (a renumbered slot, the IOMMU switched off, a device
in a group it was not in, drivers not loaded yet at early boot).

`KernelSim` turns `drivers/<name>/unbind`, `drivers/<name>/bind` and `drivers_probe` into
FIFOs and holds each open read-write, so a write lands in the pipe without blocking, like
a sysfs store that returns at once. One inotify instance watches every device and driver
directory: its single queue holds the IN_CLOSE_WRITE of every regular file
(driver_override) and of every FIFO in the order the script closed them, so the
recorded writes are exact and ordered. A thread applies each write as the kernel would:
unbind removes the `driver` link, drivers_probe binds to the driver named by
driver_override, else to the device's natural driver, if that driver is loaded. A
driver listed in `hang` never has its unbind FIFO opened: the writer blocks in open(2),
like an unbind from nvidia while something holds /dev/nvidiaN.

Limits, none of which the split script hits: a FIFO written twice before the thread
reads it is split back into writes at newlines; a regular file written twice before the
thread reads it is recorded twice with the second content.
"""

from __future__ import annotations

import ctypes
import errno
import os
import select
import shutil
import stat
import struct
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import attrs

from bundled import FIXTURES, KPRO6_SPEC, copy_tree, spec_plan
from pvegpu.hardware import host_driver
from pvegpu.host.discover import discover
from pvegpu.model.plan import Plan
from pvegpu.planning.planner import plan
from pvegpu.spec.load import parse_spec


def fixture_plan(name: str, spec: str = KPRO6_SPEC) -> Plan:
    """The plan pvegpu makes for a committed fixture host (discover + plan, no mocks)."""
    return spec_plan(name, spec)


def root_plan(root: Path, spec: str = KPRO6_SPEC, name: str = "kpro6") -> Plan:
    """The plan pvegpu makes for the host tree at `root` (discover + plan, no mocks)."""
    return plan(discover(root), parse_spec(spec, f"{name}.toml"))


def natural_drivers(split_plan: Plan) -> dict[str, str | None]:
    """address -> the driver that binds a function when nothing overrides it.

    The one discovery saw it bound to, unless a driver_override put it there: on the
    workstation that is vfio-pci for the A4000, whose ids the kernel command line gives
    to vfio-pci (`vfio-pci.ids=`), so a probe binds it there again. Else its host driver.
    """
    return {
        str(f.address): f.driver if f.driver and not f.driver_override else host_driver(f)
        for f in split_plan.facts.functions
    }


# --------------------------------------------------------------- the host, as it changes


def copy_host(name: str, dest: Path) -> Path:
    """A writable copy of a fixture host's sys/ tree under dest, links copied as links."""
    copy_tree(FIXTURES / name / "sys", dest / "sys")
    return dest


def set_attr(root: Path, address: str, name: str, text: str) -> None:
    """Change one attribute file of a device, as a different card or firmware would."""
    (root / "sys/bus/pci/devices" / address / name).write_text(text + "\n")


def remove_device(root: Path, address: str) -> None:
    """The slot is gone from the bus (renumbered, or the card pulled)."""
    (root / "sys/bus/pci/devices" / address).unlink()


def iommu_off(root: Path) -> None:
    """What the kernel shows with the IOMMU disabled: no groups, no links, no units."""
    sys = root / "sys"
    for dev in (sys / "bus/pci/devices").iterdir():
        (dev / "iommu_group").unlink(missing_ok=True)
    shutil.rmtree(sys / "kernel/iommu_groups")
    for unit in (sys / "class/iommu").iterdir():
        unit.unlink() if unit.is_symlink() else shutil.rmtree(unit)


def move_to_group(root: Path, address: str, group: int) -> None:
    """Put a device into another IOMMU group, as a switch without ACS would."""
    sys = root / "sys"
    dev = (sys / "bus/pci/devices" / address).resolve()
    old = (dev / "iommu_group").resolve()
    (old / "devices" / address).unlink()
    (dev / "iommu_group").unlink()
    new = sys / "kernel/iommu_groups" / str(group)
    _relink(dev / "iommu_group", new)
    _relink(new / "devices" / address, dev)


def unload_driver(root: Path, name: str) -> None:
    """As before the module loads: its devices unbound, its directory gone."""
    drivers = root / "sys/bus/pci/drivers"
    for dev in (root / "sys/bus/pci/devices").iterdir():
        link = dev / "driver"
        if link.is_symlink() and link.readlink().name == name:
            link.unlink()
    shutil.rmtree(drivers / name)


def register_driver(sys: Path, name: str) -> Path:
    """sys/bus/pci/drivers/<name>/ with its write points, as module load creates it."""
    drv = sys / "bus/pci/drivers" / name
    drv.mkdir()
    for point in ("bind", "unbind", "new_id", "remove_id"):
        (drv / point).write_text("")
    return drv


def _relink(link: Path, target: Path) -> None:
    # Relative link text, as the kernel writes it (`../../../bus/pci/drivers/nvidia`).
    link.symlink_to(os.path.relpath(target, link.parent))


# ------------------------------------------------------------------------- the kernel

NAP_S = 0.01
"""The script's PVEGPU_NAP under the simulator: the seconds between two looks."""
_IN_CLOSE_WRITE = 0x00000008
_EVENT = struct.Struct("iIII")
_libc = ctypes.CDLL(None, use_errno=True)


@attrs.frozen
class Write:
    """One write the script made, path relative to sys/bus/pci (`drivers_probe`)."""

    path: str
    value: str


@attrs.frozen
class Result:
    rc: int
    stdout: str
    stderr: str
    writes: tuple[Write, ...]


class KernelSim:
    """The kernel's side of sys/bus/pci for one tree; use as a context manager.

    `natural`: address -> driver that binds it without an override. `hang`: drivers
    whose unbind never returns. `refuse`: drivers whose probe fails (the device stays
    unbound). `missing_modules`: modules modprobe cannot find. MODPROBE points at a
    stand-in that hands its arguments to the simulator and exits with its answer, so,
    like modprobe, it returns once the driver is registered.
    """

    def __init__(
        self,
        root: Path,
        natural: Mapping[str, str | None],
        *,
        hang: Iterable[str] = (),
        refuse: Iterable[str] = (),
        missing_modules: Iterable[str] = (),
    ) -> None:
        self.root = root.resolve()
        self.sys = self.root / "sys"
        self.pci = self.sys / "bus/pci"
        self.natural = dict(natural)
        self.hang = frozenset(hang)
        self.refuse = frozenset(refuse)
        self.missing_modules = frozenset(missing_modules)
        self.errors: list[str] = []
        self.writes: list[Write] = []
        self.ctl = Path(tempfile.mkdtemp(prefix="ctl-", dir=self.root))
        self._ino = _libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self._ino < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self._watches: dict[int, str] = {}
        self._fifos: dict[str, int] = {}
        self._pending: dict[str, list[str]] = {}
        self._hung: list[Path] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.modprobe = self.ctl / "modprobe"
        for name in ("modprobe.req", "modprobe.rc"):
            os.mkfifo(self.ctl / name)
        self.modprobe.write_text(
            "#!/bin/sh\n"
            "# modprobe stand-in: the simulated kernel registers the driver, replies rc.\n"
            f"printf '%s\\n' \"$*\" > '{self.ctl}/modprobe.req'\n"
            f"read -r rc < '{self.ctl}/modprobe.rc'\n"
            'exit "$rc"\n'
        )
        self.modprobe.chmod(0o755)
        self._fifo(self.ctl / "modprobe.req", "ctl/modprobe.req")
        self._watch(self.ctl, "ctl/")
        self._fifo(self.pci / "drivers_probe", "drivers_probe")
        self._watch(self.pci, "")
        for drv in sorted(p for p in (self.pci / "drivers").iterdir()):
            self._adopt_driver(drv.name)
        for dev in sorted((self.pci / "devices").iterdir()):
            self._watch(dev.resolve(), f"devices/{dev.name}/")
        self._expected = self._snapshot()

    # --- public -----------------------------------------------------------------

    def run(self, script: Path, *args: str, timeout: float = 60, path: str | None = None) -> Result:
        """Run `script` under dash with SYSFS and MODPROBE pointing here; apply its writes."""
        dash = shutil.which("dash") or "dash"
        return self.run_command([dash, str(script), *args], timeout=timeout, path=path)

    def run_command(
        self, argv: list[str], *, timeout: float = 60, path: str | None = None
    ) -> Result:
        """Run any command with SYSFS and MODPROBE pointing here; apply its writes.

        `path`: the command's PATH (default this process's), to run with fewer tools."""
        start = len(self.writes)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._stop.clear()
        self._thread.start()
        env = {"PATH": path or os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"}
        env |= {"SYSFS": str(self.sys), "MODPROBE": str(self.modprobe)}
        # This kernel answers within milliseconds: 10 ms naps keep every bounded wait
        # (1 s per unbind, 0.5 s per probe) far above its latency, and the suite fast.
        env["PVEGPU_NAP"] = str(NAP_S)
        # Files, not pipes: a hung background unbind may outlive the script.
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            try:
                proc = subprocess.run(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    env=env,
                    timeout=timeout,
                    check=False,
                )
            finally:
                self._stop.set()
                self._thread.join(timeout=10)
            out.seek(0)
            err.seek(0)
            return Result(
                proc.returncode,
                out.read().decode(),
                err.read().decode(),
                tuple(self.writes[start:]),
            )

    def load_driver(self, name: str) -> None:
        """Module load: register the driver, then probe every unbound device, as the
        kernel's driver_attach does."""
        register_driver(self.sys, name)
        self._adopt_driver(name)
        self._note(self.pci / "drivers" / name)
        for dev in sorted((self.pci / "devices").iterdir()):
            if self.driver(dev.name) is None and self._match(dev.name) == name:
                self._bind(dev.name, name)

    def driver(self, address: str) -> str | None:
        link = self.pci / "devices" / address / "driver"
        return link.readlink().name if link.is_symlink() else None

    def override(self, address: str) -> str | None:
        text = (self.pci / "devices" / address / "driver_override").read_text().strip()
        return None if text in ("(null)", "") else text

    def state(self) -> dict[str, tuple[str | None, str | None]]:
        """address -> (bound driver, driver_override) for every device."""
        return {
            dev.name: (self.driver(dev.name), self.override(dev.name))
            for dev in sorted((self.pci / "devices").iterdir())
        }

    def unexplained_changes(self) -> list[str]:
        """Paths under sys/ that changed other than by a recorded write or its effect."""
        now = self._snapshot()
        return sorted(
            p for p in now.keys() | self._expected.keys() if now.get(p) != self._expected.get(p)
        )

    def close(self) -> None:
        # Let a hung unbind writer go: with a reader present its open(2) returns, the
        # write lands in the pipe and the orphaned background shell exits.
        for fifo in self._hung:
            fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                try:
                    if os.read(fd, 4096):
                        break
                except BlockingIOError:
                    pass
                time.sleep(0.02)
            os.close(fd)
        for fd in self._fifos.values():
            os.close(fd)
        os.close(self._ino)

    def __enter__(self) -> KernelSim:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- plumbing ---------------------------------------------------------------

    def _watch(self, directory: Path, prefix: str) -> None:
        wd = _libc.inotify_add_watch(self._ino, os.fsencode(directory), _IN_CLOSE_WRITE)
        if wd < 0:
            raise OSError(ctypes.get_errno(), f"inotify_add_watch {directory}")
        self._watches[wd] = prefix

    def _fifo(self, path: Path, key: str) -> None:
        path.unlink(missing_ok=True)
        os.mkfifo(path)
        if key.endswith("/unbind") and key.split("/")[1] in self.hang:
            self._hung.append(path)  # nobody ever reads: the writer blocks in open(2)
            return
        self._fifos[key] = os.open(path, os.O_RDWR | os.O_NONBLOCK)
        self._pending[key] = []

    def _adopt_driver(self, name: str) -> None:
        drv = self.pci / "drivers" / name
        for point in ("bind", "unbind"):
            self._fifo(drv / point, f"drivers/{name}/{point}")
        self._watch(drv, f"drivers/{name}/")

    def _serve(self) -> None:
        while True:
            ready, _, _ = select.select([self._ino], [], [], 0.02)
            if ready:
                self._drain()
            elif self._stop.is_set():
                self._drain()  # the script has exited: every event it caused is queued
                return

    def _drain(self) -> None:
        while True:
            try:
                buf = os.read(self._ino, 65536)
            except BlockingIOError:
                return
            offset = 0
            while offset < len(buf):
                wd, _mask, _cookie, size = _EVENT.unpack_from(buf, offset)
                name = buf[offset + _EVENT.size : offset + _EVENT.size + size].rstrip(b"\0")
                offset += _EVENT.size + size
                self._event(self._watches[wd] + name.decode())

    def _event(self, key: str) -> None:
        if key.startswith("ctl/") and key != "ctl/modprobe.req":
            return  # the simulator's own scratch files and the modprobe reply
        value = self._fifo_value(key) if key in self._fifos else (self.pci / key).read_text()
        self.writes.append(Write("modprobe" if key.startswith("ctl/") else key, value))
        self._apply(key, value)

    def _fifo_value(self, key: str) -> str:
        pending = self._pending[key]
        while True:
            try:
                chunk = os.read(self._fifos[key], 4096)
            except BlockingIOError:
                break
            pending.extend(chunk.decode().splitlines(keepends=True))
        return pending.pop(0) if pending else ""

    def _apply(self, key: str, value: str) -> None:
        arg = value.strip()
        if key == "ctl/modprobe.req":
            modules = [word for word in arg.split() if not word.startswith("-")]
            rc = 0
            if modules != ["vfio-pci"]:
                self.errors.append(f"modprobe {arg!r}")
                rc = 1
            elif "vfio-pci" in self.missing_modules:
                rc = 1  # modprobe: FATAL: Module vfio-pci not found
            elif not (self.pci / "drivers/vfio-pci").exists():
                self.load_driver("vfio-pci")
            self._reply(rc)
        elif key == "drivers_probe":
            if not (self.pci / "devices" / arg).exists():
                self.errors.append(f"drivers_probe of unknown {arg!r}")
            elif self.driver(arg) is None:
                target = self._match(arg)
                if target is not None and (self.pci / "drivers" / target).is_dir():
                    self._bind(arg, target)
        elif key.startswith("drivers/") and key.endswith("/unbind"):
            drv = key.split("/")[1]
            if self.driver(arg) != drv:
                # The kernel answers -ENODEV; a FIFO cannot, so the test sees it here.
                self.errors.append(f"unbind of {arg!r} from {drv}, bound to {self.driver(arg)}")
            else:
                self._unbind(arg, drv)
        elif key.startswith("devices/") and key.endswith("/sriov_drivers_autoprobe"):
            if arg not in ("0", "1"):
                self.errors.append(f"sriov_drivers_autoprobe {arg!r}")  # the kernel: -EINVAL
            self._note(self.pci / key)
        elif key.startswith("devices/") and key.endswith("/driver_override"):
            path = self.pci / key
            if not arg:
                # The kernel keeps no empty override: it reads back as (null).
                self._replace(path, "(null)\n")
            self._note(path)
        else:
            self.errors.append(f"unexpected write {key!r}: {value!r}")
            self._note(self.pci / key)

    def _match(self, address: str) -> str | None:
        # driver_override names the only driver that may bind (vfio-pci binds nothing
        # else since 5.16); without one, the device's own host driver.
        override = self.override(address)
        if override is None and not self._may_autoprobe(address):
            return None
        return override or self.natural.get(address)

    def _may_autoprobe(self, address: str) -> bool:
        # The kernel's pci_device_can_probe: a VF whose PF has sriov_drivers_autoprobe 0
        # is probed only by the driver its driver_override names.
        physfn = self.pci / "devices" / address / "physfn"
        if not physfn.is_symlink():
            return True
        return (physfn / "sriov_drivers_autoprobe").read_text().strip() != "0"

    def create_vfs(self, pf: str, count: int, driver: str | None) -> list[str]:
        """What writing `count` to the PF's sriov_numvfs makes the kernel do: VF N at the
        PF's routing id + offset + N * stride, beside the PF, in a new IOMMU group of its
        own, `physfn` / `virtfnN` links, then probed (if autoprobe allows) by `driver`,
        the driver VFs of this PF bind by nature. Returns the VFs' addresses."""
        pf_dev = (self.pci / "devices" / pf).resolve()

        def number(name: str) -> int:
            return int((pf_dev / name).read_text().strip())

        domain, bus, devfn = pf[:4], int(pf[5:7], 16), int(pf[8:10], 16) << 3 | int(pf[11])
        first = bus << 8 | devfn
        groups = self.sys / "kernel/iommu_groups"
        next_group = max(int(g.name) for g in groups.iterdir()) + 1
        vf_device = (pf_dev / "sriov_vf_device").read_text().strip()
        made = []
        for index in range(count):
            rid = first + number("sriov_offset") + index * number("sriov_stride")
            address = f"{domain}:{rid >> 8:02x}:{(rid >> 3) & 0x1F:02x}.{rid & 7}"
            dev = pf_dev.parent / address
            dev.mkdir()
            for name in ("vendor", "subsystem_vendor", "subsystem_device", "class"):
                (dev / name).write_text((pf_dev / name).read_text())
            (dev / "device").write_text(f"0x{vf_device}\n")
            (dev / "numa_node").write_text((pf_dev / "numa_node").read_text())
            (dev / "driver_override").write_text("(null)\n")
            _relink(dev / "physfn", pf_dev)
            _relink(pf_dev / f"virtfn{index}", dev)
            group = groups / str(next_group + index)
            (group / "devices").mkdir(parents=True)
            (group / "type").write_text("DMA\n")
            _relink(dev / "iommu_group", group)
            _relink(group / "devices" / address, dev)
            _relink(self.pci / "devices" / address, dev)
            # Renamed in: a write in the watched PF directory would read as the script's.
            self._replace(pf_dev / "sriov_numvfs", f"{index + 1}\n")
            self._watch(dev, f"devices/{address}/")
            for path in (dev, group, self.pci / "devices" / address, pf_dev):
                self._note(path)
            self.natural[address] = driver
            loaded = driver is not None and (self.pci / "drivers" / driver).is_dir()
            if loaded and driver is not None and self._match(address) == driver:
                self._bind(address, driver)
            made.append(address)
        return made

    def _bind(self, address: str, drv: str) -> None:
        if drv in self.refuse:
            return  # the driver's probe failed (dmesg would say why): stays unbound
        dev = (self.pci / "devices" / address).resolve()
        self._symlink(dev / "driver", self.pci / "drivers" / drv)
        self._symlink(self.pci / "drivers" / drv / address, dev)

    def _unbind(self, address: str, drv: str) -> None:
        dev = (self.pci / "devices" / address).resolve()
        for link in (dev / "driver", self.pci / "drivers" / drv / address):
            link.unlink()
            self._note(link)

    def _symlink(self, link: Path, target: Path) -> None:
        # Created aside and renamed in: IN_MOVED_TO is not watched, IN_CLOSE_WRITE is.
        tmp = self.ctl / f"link-{link.name}"
        tmp.symlink_to(os.path.relpath(target, link.parent))
        tmp.rename(link)
        self._note(link)

    def _replace(self, path: Path, text: str) -> None:
        tmp = self.ctl / "replace"
        tmp.write_text(text)
        tmp.rename(path)

    def _reply(self, rc: int) -> None:
        deadline = time.monotonic() + 5
        while True:
            try:
                fd = os.open(self.ctl / "modprobe.rc", os.O_WRONLY | os.O_NONBLOCK)
                break
            except OSError as exc:  # ENXIO: the stand-in has not opened it for reading yet
                if exc.errno != errno.ENXIO or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)
        os.write(fd, f"{rc}\n".encode())
        os.close(fd)

    def _note(self, path: Path) -> None:
        """Record `path` (and, for a new directory, what is below it) as expected."""
        path = path.parent.resolve() / path.name  # the real directory, not a bus/ link
        rel = path.relative_to(self.root).as_posix()
        for key in [k for k in self._expected if k == rel or k.startswith(rel + "/")]:
            del self._expected[key]
        self._expected.update(_entries(self.root, path))

    def _snapshot(self) -> dict[str, tuple[str, str | bytes]]:
        return dict(_entries(self.root, self.sys))


def _entries(root: Path, top: Path) -> Iterator[tuple[str, tuple[str, str | bytes]]]:
    """(relative path, (kind, content)) of top and everything below it, no link following.

    os-level calls, not pathlib: every test walks its ~1300-entry tree twice."""
    prefix = len(str(root)) + 1
    try:
        mode = os.lstat(top).st_mode
    except FileNotFoundError:
        return
    stack = [(str(top), mode)]
    while stack:
        path, mode = stack.pop()
        rel = path[prefix:]
        if stat.S_ISLNK(mode):
            yield rel, ("link", os.readlink(path))  # noqa: PTH115 (str paths: see above)
        elif stat.S_ISDIR(mode):
            yield rel, ("dir", "")
            with os.scandir(path) as it:
                stack.extend((e.path, e.stat(follow_symlinks=False).st_mode) for e in it)
        elif stat.S_ISFIFO(mode):
            yield rel, ("fifo", "")
        else:
            # Bytes: some attributes (PCI `config`) are binary.
            with open(path, "rb") as f:  # noqa: PTH123 (str paths: see above)
                yield rel, ("file", f.read())
