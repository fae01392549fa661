"""The state directory of an apply: the bundle applied, backups, and a journal of the steps.

`var/lib/pvegpu/apply/<bundle id>/` under the root (0700: backups of container units may
hold tokens):
- `bundle/`: MANIFEST.json and the installed files, so `pvegpu revert` needs nothing else;
- `backups/host/<path>`, `backups/ct/<vmid>/<path>`: each file as it was before apply
  first replaced it (only the first backup counts: a rerun finds the new file there);
- `journal.json`: every action begun and done, with what it found (`was_running`), and
  every backup; rewritten whole, by rename, after each event, so it is never torn.
`var/lib/pvegpu/apply/last` names the newest apply, the one `pvegpu revert` undoes;
`var/lib/pvegpu/apply/lock` is flocked by the one apply or revert running on the node.
"""

from __future__ import annotations

import json
import time
from typing import Any

from pvegpu.apply.bundle import Bundle
from pvegpu.apply.host import ABSENT, Host, sha256_of
from pvegpu.errors import ApplyError

STATE_DIR = "var/lib/pvegpu/apply"
LAST = f"{STATE_DIR}/last"
LOCK = f"{STATE_DIR}/lock"


def backup_key(target: str, path: str) -> str:
    return f"host/{path}" if target == "host" else f"ct/{target[3:]}/{path}"


class State:
    """One apply's journal and backups, every change through the host seam."""

    def __init__(self, host: Host, bundle_id: str) -> None:
        self.host = host
        self.dir = f"{STATE_DIR}/{bundle_id}"
        raw = host.read(f"{self.dir}/journal.json")
        self.doc: dict[str, Any] = (
            json.loads(raw) if raw else {"bundle": bundle_id, "events": [], "backups": {}}
        )

    @classmethod
    def fresh(cls, host: Host, bundle_id: str) -> State:
        """A new journal for a bundle applied again after it was reverted."""
        state = cls(host, bundle_id)
        state.doc = {"bundle": bundle_id, "events": [], "backups": {}}
        return state

    @property
    def exists(self) -> bool:
        return bool(self.doc["events"])

    @property
    def reverted(self) -> bool:
        return bool(self.doc.get("reverted"))

    def save_bundle(self, bundle: Bundle) -> None:
        """The bundle's manifest and installed files, once (the same id is the same bundle)."""
        if self.host.read(f"{self.dir}/bundle/MANIFEST.json") is not None:
            return
        for entry in bundle.entries:
            self.host.write(f"{self.dir}/bundle/{entry.file}", entry.content, 0o600, before=None)
        self.host.write(
            f"{self.dir}/bundle/MANIFEST.json", bundle.manifest.encode(), 0o600, before=None
        )
        self.host.write(LAST, bundle.id.encode() + b"\n", 0o644, before=None)

    def _save(self) -> None:
        text = json.dumps(self.doc, indent=1, sort_keys=True) + "\n"
        self.host.write(f"{self.dir}/journal.json", text.encode(), 0o600, before=None)

    # --- journal ------------------------------------------------------------

    def done(self, step: int, action: int) -> dict[str, Any] | None:
        """The `done` event of an action, None if it has none."""
        return next(
            (
                e
                for e in self.doc["events"]
                if e["step"] == step and e["action"] == action and e["event"] == "done"
            ),
            None,
        )

    def begun(self, step: int, action: int) -> dict[str, Any] | None:
        return next(
            (
                e
                for e in self.doc["events"]
                if e["step"] == step and e["action"] == action and e["event"] == "begin"
            ),
            None,
        )

    def record(self, step: int, action: int, event: str, **note: Any) -> None:
        at = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        entry = {"step": step, "action": action, "event": event, "at": at, **note}
        self.doc["events"].append(entry)
        self._save()

    def set_flag(self, name: str, value: bool) -> None:
        self.doc[name] = value
        self._save()

    # --- backups ------------------------------------------------------------

    def backup(self, target: str, path: str, content: bytes | None, mode: int) -> None:
        """Keep `content` as the file before apply, unless an earlier run already did."""
        key = backup_key(target, path)
        if key in self.doc["backups"]:
            return
        if content is not None:
            self.host.write(f"{self.dir}/backups/{key}", content, 0o600, before=None)
        self.doc["backups"][key] = {
            "existed": content is not None,
            "sha256": sha256_of(content),
            "mode": mode,
        }
        self._save()

    def backed_up(self, target: str, path: str) -> tuple[bytes | None, int] | None:
        """(content before apply, mode), None content for a file that did not exist;
        None when apply never backed it up."""
        record = self.doc["backups"].get(backup_key(target, path))
        if record is None:
            return None
        if not record["existed"]:
            return None, int(record["mode"])
        content = self.host.read(f"{self.dir}/backups/{backup_key(target, path)}")
        if content is None or sha256_of(content) != record["sha256"]:
            raise ApplyError.one(
                "backup-missing",
                f"/{self.dir}/backups/{backup_key(target, path)}",
                "the backup of this file is gone or changed",
                f"restore /{path} by hand from the bundle's revert/ directory",
            )
        return content, int(record["mode"])

    def before_sha(self, target: str, path: str) -> str:
        record = self.doc["backups"].get(backup_key(target, path))
        return str(record["sha256"]) if record else ABSENT


def last_apply(host: Host) -> str | None:
    raw = host.read(LAST)
    return raw.decode().strip() if raw else None
