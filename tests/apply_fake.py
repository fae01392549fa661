"""A Proxmox host for apply tests: a copied fixture tree, recorded commands, a simulated kernel.

`FakeHost` is `LiveHost` with only the commands (`_execute`) answered here: files are
written by the real code (temporary file, rename, guest-config flocks and the pmxcfs lock
directory under the temp root), the node-wide apply lock is a real flock, and the split
script runs for real under dash against `KernelSim`.
`pct` keeps each container's state (running, its units active) and maps its files to
the container's rootfs directory under the root. Every mutating effect is counted;
`kill_after=N` raises `Killed` right after the Nth, as a SIGKILL between two effects.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

from pvegpu.apply.host import Completed, LiveHost
from pvegpu.host.discover import discover
from pvegpu.model.paths import NODES_SCRIPT, USERSPACE_SCRIPT
from pvegpu.pvefiles.guestconf import parse_lines, split_sections
from pvegpu.pvefiles.lxcconf import DRIVER_MOUNT_POINT, gpu_minor
from pvegpu.rendering.review.commands import SPLIT_SCRIPT
from pvegpu.vendors import CONTAINER_NODES
from pvegpu.vendors.nvidia import smi_bus_id
from sysfs_sim import KernelSim

READ_ONLY = ("status", "is-active", "is-enabled", "test", "cat", "nvidia-smi", "curl")
BOOT_SCRIPTS = (f"/{NODES_SCRIPT}", f"/{USERSPACE_SCRIPT}")
"""pvegpu's boot units' scripts: run for real under this root once installed."""


def _nodes_of(script: str) -> list[str]:
    """The nodes the device nodes script lists (its NODES block)."""
    block = script.split("NODES='\n", 1)[1].split("'", 1)[0]
    return block.split()


ANSWERED = ("pct", "systemctl", "update-initramfs", "proxmox-boot-tool", "update-grub")
"""The host commands this node has (`_answer` answers them)."""


class Killed(BaseException):
    """The process died here: nothing after it ran, not even an except clause."""


class FakeHost(LiveHost):
    def __init__(
        self,
        root: Path,
        kernel: KernelSim,
        rootfs: dict[int, str],
        *,
        running: dict[int, bool] | None = None,
        active: dict[int, set[str]] | None = None,
        kill_after: int | None = None,
        missing: frozenset[str] = frozenset(),
    ) -> None:
        super().__init__(root)
        self.live = True  # the temp root stands for a node's `/`: its commands are answered
        self.missing = missing
        """Commands this node lacks (`installed` says so, and `run` fails as exec would)."""
        self.kernel = kernel
        self.rootfs = rootfs
        self.running = dict(running or dict.fromkeys(rootfs, True))
        self.active = {k: set(v) for k, v in (active or {}).items()}
        self.minors = {g.node_minor: g.address for g in discover(root).gpus}
        self.visible: dict[int, list[int]] = {}
        self.commands: list[tuple[str, ...]] = []
        self.effects = 0
        self.kill_after = kill_after
        self.slept = 0.0
        self.step_effects: dict[int, tuple[int, int, int]] = {}
        """step -> (first effect, last effect, step), from the journal apply writes."""

    # --- effects counted for kill injection ---------------------------------

    def _effect(self) -> None:
        self.effects += 1
        if self.kill_after is not None and self.effects >= self.kill_after:
            self.kill_after = None
            raise Killed(f"killed after effect {self.effects}")

    def write(self, path: str, content: bytes, mode: int, *, before: frozenset[str] | None) -> None:
        super().write(path, content, mode, before=before)
        if path.endswith("/journal.json"):
            self._note_step(json.loads(content))
        self._effect()

    def _note_step(self, journal: dict[str, Any]) -> None:
        if not journal["events"]:
            return
        last = journal["events"][-1]
        step, now = int(last["step"]), self.effects + 1
        first = self.step_effects.get(step, (now, now, step))[0]
        self.step_effects[step] = (first, now, step)

    def remove(self, path: str, *, before: frozenset[str] | None) -> None:
        super().remove(path, before=before)
        self._effect()

    def sleep(self, seconds: float) -> None:
        self.slept += seconds

    # --- commands -----------------------------------------------------------

    def mutating(self) -> list[tuple[str, ...]]:
        return [c for c in self.commands if not any(w in READ_ONLY for w in c[:6])]

    def installed(self, command: str) -> bool:
        if command in (SPLIT_SCRIPT, *BOOT_SCRIPTS):
            return (self.root / command.lstrip("/")).is_file()
        return command in ANSWERED and command not in self.missing

    def _execute(self, argv: tuple[str, ...]) -> Completed:
        """What LiveHost.run would get from the command (run keeps its own checks)."""
        self.commands.append(argv)
        if not self.installed(argv[0]):
            raise FileNotFoundError(2, "No such file or directory", argv[0])
        rc, out = self._answer(argv)
        if not any(w in READ_ONLY for w in argv[:6]):
            self._effect()
        return Completed(argv, rc, out, "" if rc == 0 else f"fake: {shlex.join(argv)} failed")

    def _ct(self, vmid: int, path: str) -> Path:
        return self.root / self.rootfs[vmid] / path.lstrip("/")

    def _answer(self, argv: tuple[str, ...]) -> tuple[int, str]:
        if argv[0] == SPLIT_SCRIPT:
            script = self.root / SPLIT_SCRIPT.lstrip("/")
            result = self.kernel.run(script, *argv[1:])
            return result.rc, result.stdout
        if argv[0] in BOOT_SCRIPTS:
            return self._boot_script(argv[0], argv[1:])
        if argv[0] == "pct":
            return self._pct(argv[1], int(argv[2]), argv[3:])
        if argv[0] == "systemctl":
            return self._systemctl(argv[1:])
        if argv[0] in ANSWERED[2:]:
            return 0, ""
        return 127, ""

    def _boot_script(self, script: str, args: tuple[str, ...]) -> tuple[int, str]:
        """A boot unit's script, run for real under dash on this root (both honour ROOT).

        The nodes script prints its commands under ROOT rather than run them: this node
        does what they do (nvidia-modprobe, modprobe amdgpu), making each listed node under
        dev/ as the driver would, then lets the script find them."""
        path = self.root / script.lstrip("/")
        if script == f"/{NODES_SCRIPT}" and args[:1] != ("status",):
            for node in _nodes_of(path.read_text()):
                made = self.root / node.lstrip("/")
                made.parent.mkdir(parents=True, exist_ok=True)
                made.touch()
        env = {"ROOT": str(self.root), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        done = subprocess.run(
            [shutil.which("dash") or "sh", str(path), *args],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        return done.returncode, done.stdout

    def _unit_script(self, unit: str) -> tuple[str, ...] | None:
        """The ExecStart= of one of pvegpu's boot units installed here."""
        path = self.root / "etc/systemd/system" / unit
        if not path.is_file():
            return None
        for line in path.read_text().splitlines():
            if line.startswith("ExecStart="):
                return tuple(line.removeprefix("ExecStart=").split())
        return None

    def _wants(self, unit: str) -> Path:
        """The `.wants` directory `systemctl enable` links the unit into (its WantedBy=)."""
        path = self.root / "etc/systemd/system" / unit
        target = "sysinit.target"
        if path.is_file():
            for line in path.read_text().splitlines():
                if line.startswith("WantedBy="):
                    target = line.removeprefix("WantedBy=").split()[0]
        return self.root / f"etc/systemd/system/{target}.wants"

    def _systemctl(self, args: tuple[str, ...]) -> tuple[int, str]:
        wants = self._wants(args[-1]) if len(args) > 1 else self.root
        if args[0] == "daemon-reload":
            return 0, ""
        if args[0] == "restart":
            command = self._unit_script(args[1])
            if command is None or command[0] not in BOOT_SCRIPTS:
                return 5, ""  # Unit not found
            rc, _ = self._boot_script(command[0], command[1:])
            return (0 if rc == 0 else 1), ""
        link = wants / args[-1]
        if args[0] == "enable":
            wants.mkdir(parents=True, exist_ok=True)
            if not link.is_symlink():
                link.symlink_to(f"/etc/systemd/system/{args[-1]}")
            return 0, ""
        if args[0] == "disable":
            link.unlink(missing_ok=True)
            if wants.is_dir() and not any(wants.iterdir()):
                wants.rmdir()
            return 0, ""
        if args[0] == "is-enabled":
            return (0, "enabled\n") if link.is_symlink() else (1, "disabled\n")
        return 1, ""

    def _pct(self, verb: str, vmid: int, rest: tuple[str, ...]) -> tuple[int, str]:
        if verb == "status":
            return 0, f"status: {'running' if self.running[vmid] else 'stopped'}\n"
        if verb in ("stop", "shutdown"):
            self.running[vmid] = False
            self.active[vmid] = set()
            return 0, ""
        if verb == "start":
            self.running[vmid] = True
            self.visible[vmid] = self._minors(vmid)
            return 0, ""
        if not self.running[vmid]:
            return 2, ""  # pct push and pct exec need a running container
        if verb == "push":
            src, dst = Path(rest[0]), self._ct(vmid, rest[1])
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes(src.read_bytes())
            dst.chmod(int(rest[rest.index("--perms") + 1], 8))
            return 0, ""
        assert verb == "exec" and rest[0] == "--", rest
        return self._exec(vmid, rest[1:])

    def _minors(self, vmid: int) -> list[int]:
        text = (self.root / f"etc/pve/lxc/{vmid}.conf").read_text()
        main = split_sections(text)[0]
        found = {
            m
            for line in parse_lines(main.text)
            if (m := gpu_minor(line, CONTAINER_NODES)) is not None
        }
        return sorted(found)

    def _exec(self, vmid: int, cmd: tuple[str, ...]) -> tuple[int, str]:
        units = self.active.setdefault(vmid, set())
        if cmd[0] == "env":
            cmd = cmd[1:]
            while cmd and "=" in cmd[0]:
                cmd = cmd[1:]  # env's NAME=value words
            staged = self.root / "var/lib/pvegpu/userspace/current/bin"
            if cmd[0].startswith(f"/{DRIVER_MOUNT_POINT}/bin/"):
                # The host's staged tool, through the container's bind mount of it.
                if not (staged / Path(cmd[0]).name).is_file():
                    return 127, ""
                cmd = (Path(cmd[0]).name, *cmd[1:])
        if cmd[0] == "systemctl":
            if cmd[1] == "daemon-reload":
                return 0, ""
            if cmd[1] == "is-active":
                return (0, "active\n") if cmd[2] in units else (3, "inactive\n")
            if cmd[1] == "start":
                units.add(cmd[2])
            elif cmd[1] == "stop":
                units.discard(cmd[2])
            return 0, ""
        if cmd[0] == "test":
            path = self._ct(vmid, cmd[2])
            ok = path.is_dir() if cmd[1] == "-d" else path.exists()
            return (0 if ok else 1), ""
        if cmd[0] == "cat":
            path = self._ct(vmid, cmd[1])
            return (0, path.read_text()) if path.is_file() else (1, "")
        if cmd[0] in ("mv", "cp", "rm", "mkdir"):
            return self._file_op(vmid, cmd)
        if cmd[0] == "nvidia-smi":
            addresses = [self.minors[m] for m in self.visible.get(vmid, [])]
            if cmd[1] == "-L":
                listed = [f"GPU {i}: NVIDIA (UUID: GPU-{i})\n" for i in range(len(addresses))]
                return 0, "".join(listed)
            rows = [f"{i}, {smi_bus_id(a)}\n" for i, a in enumerate(addresses)]
            return 0, "".join(rows)
        if cmd[0] == "curl":
            return (0, "OK") if units and re.search(r"/health$", cmd[-1]) else (7, "")
        return 127, ""

    def _file_op(self, vmid: int, cmd: tuple[str, ...]) -> tuple[int, str]:
        if cmd[0] == "mv":
            self._ct(vmid, cmd[2]).replace(self._ct(vmid, cmd[3]))
        elif cmd[0] == "cp":
            src, dst = self._ct(vmid, cmd[2]), self._ct(vmid, cmd[3])
            dst.write_bytes(src.read_bytes())
            dst.chmod(src.stat().st_mode & 0o7777)
        elif cmd[0] == "rm":
            self._ct(vmid, cmd[2]).unlink(missing_ok=True)
        else:
            self._ct(vmid, cmd[2]).mkdir(parents=True, exist_ok=True)
        return 0, ""
