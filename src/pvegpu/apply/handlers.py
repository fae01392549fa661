"""The one table apply dispatches actions through: each action class -> what apply does.

An action is a value of rendering/review/actions.py; what it means on a live host is its
row here: how to tell it is already done, what it backs up first, what it does, how revert
undoes it, and which host commands it runs (checked before the first change). A new action
is one class there and one row here; tests/test_handlers.py fails on an action without one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

import attrs

from pvegpu.apply import doing, undoing
from pvegpu.apply.doing import Applying, Note
from pvegpu.apply.undoing import Done
from pvegpu.rendering.review.actions import (
    Action,
    CheckBase,
    CheckDrivers,
    CheckGpus,
    CheckHolders,
    CheckNode,
    CheckNodes,
    ContainerReload,
    EnableUnit,
    HostCommand,
    InstallFile,
    KeepAside,
    MakeContainerDir,
    Manual,
    PullCopy,
    PushFile,
    RestartUnit,
    RunSplit,
    SaveCopies,
    StartContainer,
    StartService,
    StopContainer,
    StopService,
    WaitHealthy,
    WritePveFile,
)
from pvegpu.rendering.review.commands import SPLIT_SCRIPT
from pvegpu.values import value_class

A = TypeVar("A")


def _nothing(at: Applying, action: object) -> Note:
    return None


def _no_commands(action: object) -> tuple[str, ...]:
    return ()


def _pct(action: object) -> tuple[str, ...]:
    return ("pct",)


def _never(action: object) -> bool:
    return False


@value_class
@attrs.frozen(eq=False, repr=False)
class Handlers(Generic[A]):
    """What apply and revert do with one class of action."""

    do: Callable[[Applying, A], Note] | None
    """Runs the action; None for a line apply leaves to the admin (`Manual`)."""
    already: Callable[[Applying, A], str | None] | None = None
    """Why the host already is as the action would leave it; None (or no check): run it."""
    already_in_tree: bool = False
    """`already` reads only files, so it also answers against a snapshot tree; the others
    ask a command (a container running, a unit enabled), which a tree cannot answer."""
    backup: Callable[[Applying, A], None] | None = None
    """The files the action replaces, into the state directory before it runs."""
    undo: Callable[[Applying, A, Done], None] | None = None
    undone_first: bool = False
    """Undone before anything else: the server stopped, the container's files put back,
    while the container runs and before it starts again with its old unit."""
    redone_after_revert: Callable[[A], bool] = _never
    """Not undone but run again once every file is back (it acts on files: the initramfs
    is built from modprobe.d)."""
    host_commands: Callable[[A], tuple[str, ...]] = _no_commands
    """The commands it runs on the host (those inside a container are the container's)."""


HANDLERS: Mapping[type[Action], Handlers[Any]] = {
    CheckNode: Handlers(do=doing.check_node),
    CheckBase: Handlers(do=doing.check_base),
    SaveCopies: Handlers(
        do=doing.save_copies, backup=doing.save_copies_backup, undo=undoing.restore_copies
    ),
    StopService: Handlers(
        do=doing.stop_service,
        already=doing.stop_service_already,
        undo=undoing.restart_service,
        host_commands=_pct,
    ),
    StartService: Handlers(
        do=doing.start_service,
        already=doing.start_service_already,
        undo=undoing.stop_started_service,
        undone_first=True,
        host_commands=_pct,
    ),
    PullCopy: Handlers(do=_nothing),
    MakeContainerDir: Handlers(
        do=doing.make_dir, already=doing.make_dir_already, host_commands=_pct
    ),
    KeepAside: Handlers(
        do=doing.keep_aside,
        already=doing.keep_aside_already,
        backup=doing.keep_aside_backup,
        undo=undoing.remove_kept,
        undone_first=True,
        host_commands=_pct,
    ),
    PushFile: Handlers(
        do=doing.push,
        already=doing.push_already,
        already_in_tree=True,
        backup=doing.push_backup,
        undo=undoing.restore_pushed,
        undone_first=True,
        host_commands=_pct,
    ),
    ContainerReload: Handlers(do=doing.container_reload, host_commands=_pct),
    StopContainer: Handlers(
        do=doing.stop_container,
        already=doing.stop_container_already,
        undo=undoing.restart_container,
        host_commands=_pct,
    ),
    StartContainer: Handlers(
        do=doing.start_container,
        already=doing.start_container_already,
        undo=undoing.stop_started_container,
        host_commands=_pct,
    ),
    CheckHolders: Handlers(do=doing.check_holders),
    InstallFile: Handlers(
        do=doing.write_host_file,
        already=doing.host_file_already,
        already_in_tree=True,
        backup=doing.host_file_backup,
        undo=undoing.restore_host_file,
    ),
    WritePveFile: Handlers(
        do=doing.write_host_file,
        already=doing.host_file_already,
        already_in_tree=True,
        backup=doing.host_file_backup,
        undo=undoing.restore_host_file,
    ),
    HostCommand: Handlers(
        do=doing.host_command,
        redone_after_revert=lambda a: a.rerun_on_revert,
        host_commands=lambda a: a.argv[:1],
    ),
    EnableUnit: Handlers(
        do=doing.enable_unit,
        already=doing.enable_unit_already,
        undo=undoing.disable_unit,
        host_commands=lambda a: ("systemctl",),
    ),
    RestartUnit: Handlers(
        do=doing.restart_unit,
        undo=undoing.clean_up_unit,
        host_commands=lambda a: ("systemctl", *a.cleanup[:1]),
    ),
    RunSplit: Handlers(
        do=doing.run_split, undo=undoing.revert_split, host_commands=lambda a: (SPLIT_SCRIPT,)
    ),
    CheckDrivers: Handlers(do=doing.check_drivers),
    CheckGpus: Handlers(do=doing.check_gpus, host_commands=_pct),
    CheckNodes: Handlers(do=doing.check_nodes, host_commands=_pct),
    WaitHealthy: Handlers(do=doing.wait_healthy, host_commands=_pct),
    Manual: Handlers(do=None),
}


def handlers_of(action: Action) -> Handlers[Any]:
    return HANDLERS[type(action)]
