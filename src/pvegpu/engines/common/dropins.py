"""The server's unit as systemd sees it: the unit file and every drop-in that applies.

systemd reads `<unit>.service.d/*.conf` (and its dash prefixes, and the top-level
`service.d/`) from each directory of its search path, takes each file name once (the
first directory wins: /etc over /run over /usr/lib), and applies the files sorted by
name, whatever directory they are in (`model.paths.dropin_dirs`). A drop-in can therefore
undo what pvegpu guarantees in the rendered unit: the command line (TP, the P2P flags),
the GPUs the server sees, P2P, the CPU/NUMA pinning.

Such a drop-in is not refused and not deleted: the bundle switches those lines off and
keeps the rest. The neutralized copy goes to `/etc/systemd/system/<unit>.service.d/` under
the same file name: it is the drop-in itself when it is there (a patch the revert undoes),
and otherwise it hides the original of that name (a new file the revert removes). A
drop-in that holds a secret is refused instead: its copy would carry the secret into the
bundle. Pure; `serving.container` feeds it the files discovery read.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping, Sequence

import attrs

from pvegpu.diagnostic import Diagnostic
from pvegpu.engines.common.environment import FORBIDDEN_ENV, P2P_ENV
from pvegpu.model.decision import DropinChange
from pvegpu.model.facts import ConfigFile
from pvegpu.model.paths import UNIT_DIR, dropin_dirs
from pvegpu.redact import holds_secret, redact_argv, redact_line
from pvegpu.serving.systemd import environment_assignment
from pvegpu.serving.unitfile import (
    ENVIRONMENT,
    EXEC_START,
    SERVICE,
    exec_words,
    unit_words,
)
from pvegpu.values import value_class

GUARDED_KEYS = frozenset(
    {EXEC_START, "CPUAffinity", "NUMAPolicy", "NUMAMask", "AllowedCPUs", "AllowedMemoryNodes"}
)
"""[Service] settings the rendered unit decides: the command (TP, P2P flags), CPU/NUMA pinning."""
GUARDED_VARIABLES = frozenset(
    {
        "CUDA_DEVICE_ORDER",
        "CUDA_VISIBLE_DEVICES",
        P2P_ENV,
        "SGLANG_AUTO_NUMA_BIND",
        *FORBIDDEN_ENV,
    }
)
"""Variables that choose the GPUs (and their order), P2P, or SGLang's own NUMA binding."""
_VARIABLE_LISTS = (ENVIRONMENT, "UnsetEnvironment", "PassEnvironment")
MARK = "#pvegpu# "
"""Prefix of a line the bundle switched off (a comment to systemd)."""
_TP_OPTIONS = ("--tp", "--tp-size", "--tensor-parallel-size")


@value_class
@attrs.frozen(eq=False, repr=False)
class Dropin:
    """A drop-in systemd applies to the unit, by its path inside the container."""

    path: str
    """Inside the container: `etc/systemd/system/sglang-qwen.service.d/override.conf`."""
    text: str

    @property
    def name(self) -> str:
        return posixpath.basename(self.path)


@value_class
@attrs.frozen(eq=False, repr=False)
class _Setting:
    """One setting of a drop-in: its physical lines [first, last] and its parse."""

    section: str
    key: str
    value: str
    first: int
    last: int


def effective_dropins(files: Iterable[ConfigFile], rootfs: str, unit: str) -> tuple[Dropin, ...]:
    """The drop-ins systemd applies to `<unit>.service`, in the order it applies them."""
    by_dir: dict[str, list[ConfigFile]] = {}
    for file in files:
        if file.path.endswith(".conf"):
            by_dir.setdefault(posixpath.dirname(file.path), []).append(file)
    chosen: dict[str, Dropin] = {}
    for directory in dropin_dirs(unit):
        for file in by_dir.get(f"{rootfs}/{directory}", ()):
            dropin = Dropin(file.path[len(rootfs) + 1 :], file.content)
            chosen.setdefault(dropin.name, dropin)
    return tuple(chosen[name] for name in sorted(chosen))


def _settings(lines: Sequence[str]) -> list[_Setting]:
    """The settings of a unit text with the physical lines each spans (continuations)."""
    found: list[_Setting] = []
    section = ""
    start: int | None = None
    pending = ""
    for index, raw in enumerate(lines):
        line = raw.strip()
        if line.startswith(("#", ";")):
            continue  # systemd skips comments, also between continued lines
        if start is None:
            start, pending = index, line
        else:
            pending = f"{pending} {line}"
        if pending.endswith("\\"):
            pending = pending[:-1].rstrip()
            continue
        if pending.startswith("[") and pending.endswith("]"):
            section = pending[1:-1].strip()
        elif "=" in pending:
            key, _, value = pending.partition("=")
            found.append(_Setting(section, key.strip(), value.strip(), start, index))
        start = None
    if start is not None and "=" in pending:
        key, _, value = pending.partition("=")
        found.append(_Setting(section, key.strip(), value.strip(), start, len(lines) - 1))
    return found


def _guarded_words(setting: _Setting) -> tuple[list[str], list[str]]:
    """(guarded, kept) words of a variable-list setting."""
    guarded: list[str] = []
    kept: list[str] = []
    for word in unit_words(setting.value):
        name = word.partition("=")[0]
        (guarded if name in GUARDED_VARIABLES else kept).append(word)
    return guarded, kept


def _shown(setting: _Setting, guarded: list[str]) -> list[str]:
    """How the finding names what a setting overrides (never a secret value)."""
    if setting.key == EXEC_START:
        if not setting.value:
            return ["`ExecStart=` (clears the command)"]
        argv = redact_argv(exec_words(setting.value))
        tp = next((i for i, w in enumerate(argv) if w.split("=")[0] in _TP_OPTIONS), None)
        tail = "" if tp is None else " " + " ".join(argv[tp : tp + (1 if "=" in argv[tp] else 2)])
        return [f"`ExecStart={argv[0] if argv else ''} …{tail}`"]
    if setting.key in _VARIABLE_LISTS:
        return [f"`{setting.key}={w}`" for w in guarded]
    return [f"`{redact_line(f'{setting.key}={setting.value}')}`"]


def _replacement(setting: _Setting, kept: list[str]) -> str:
    """The setting again with only the words that stay."""
    if setting.key == ENVIRONMENT:
        # Each kept word is one assignment already unquoted; `%%` is a literal `%`.
        pairs = [w.replace("%%", "%").partition("=") for w in kept]
        return f"{ENVIRONMENT}={' '.join(environment_assignment(n, v) for n, _, v in pairs)}\n"
    return f"{setting.key}={' '.join(kept)}\n"


def guarded_settings(text: str) -> tuple[str, ...]:
    """What drop-in `text` sets that the rendered unit decides, as the finding shows it."""
    lines = text.splitlines(keepends=True)
    shown: list[str] = []
    for setting in _settings(lines):
        if setting.section != SERVICE:
            continue
        if setting.key in _VARIABLE_LISTS:
            guarded, _ = _guarded_words(setting)
            if guarded:
                shown += _shown(setting, guarded)
        elif setting.key in GUARDED_KEYS:
            shown += _shown(setting, [])
    return tuple(shown)


def neutralized(text: str, unit_path: str, source: str) -> str:
    """Drop-in `text` with every setting the rendered unit decides switched off.

    Each physical line of such a setting is commented out with `#pvegpu# ` (so the diff
    shows exactly what goes); a variable list that also sets other variables is written
    again below with those only. `source`: where the original is, when not in /etc.
    """
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    off: dict[int, str] = {}  # last line of a switched-off setting -> what replaces it
    switched: set[int] = set()
    for setting in _settings(lines):
        if setting.section != SERVICE:
            continue
        kept: list[str] = []
        if setting.key in _VARIABLE_LISTS:
            guarded, kept = _guarded_words(setting)
            if not guarded:
                continue
        elif setting.key not in GUARDED_KEYS:
            continue
        switched.update(range(setting.first, setting.last + 1))
        off[setting.last] = _replacement(setting, kept) if kept else ""
    header = [
        f"# pvegpu switched off the lines marked `{MARK.strip()}`: they set what\n",
        f"# /{unit_path} decides (command line, GPUs, P2P,\n",
        "# CPU/NUMA pinning). Everything else here still applies; revert/revert.sh\n",
        "# undoes this change.\n",
    ]
    if source:
        header.append(f"# A copy of /{source},\n# which this file hides (same name, read first).\n")
    body = [(MARK + raw if i in switched else raw) + off.get(i, "") for i, raw in enumerate(lines)]
    return "".join(header + body)


def judge_dropins(
    dropins: Sequence[Dropin],
    base: Mapping[str, ConfigFile],
    unit: str,
    vmid: int,
    subject_prefix: str,
) -> tuple[tuple[DropinChange, ...], tuple[Diagnostic, ...]]:
    """The drop-ins to neutralize (and how), and those refused for holding a secret.

    `base`: the files read, by path inside the container, to give an /etc drop-in its
    base. `subject_prefix`: how problems name the container (`ct:129`).
    """
    changes: list[DropinChange] = []
    problems: list[Diagnostic] = []
    unit_path = f"{UNIT_DIR}/{unit}.service"
    for dropin in dropins:
        settings = guarded_settings(dropin.text)
        if not settings:
            continue
        if holds_secret(dropin.text):
            problems.append(
                Diagnostic.error(
                    "serving-dropin-secret",
                    f"{subject_prefix}/{dropin.path}",
                    f"this drop-in overrides {', '.join(settings)}, which the rendered unit "
                    "decides, and it holds a secret: pvegpu does not copy it into the bundle "
                    "to switch those lines off",
                    f"remove those lines from it in the container (pct exec {vmid} -- "
                    f"nano /{dropin.path}), or move its secrets into the unit's "
                    "EnvironmentFile (serving.environment_file); then plan again",
                )
            )
            continue
        target = f"{unit_path}.d/{dropin.name}"
        source = "" if dropin.path == target else dropin.path
        changes.append(
            DropinChange(
                path=target,
                source=dropin.path,
                content=neutralized(dropin.text, unit_path, source),
                base=base.get(target) if not source else None,
                settings=settings,
            )
        )
    return tuple(changes), tuple(problems)
