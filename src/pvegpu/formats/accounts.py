"""A container's account databases, /etc/group and /etc/passwd, as getent reads them."""

from __future__ import annotations


def group_ids(text: str) -> dict[str, tuple[int, tuple[str, ...]]]:
    """`name:password:gid:members` lines -> {name: (gid, members)}; lines of another shape
    are skipped (a comment, a NIS `+` line), and the first of a name wins, as getent does."""
    found: dict[str, tuple[int, tuple[str, ...]]] = {}
    for line in text.splitlines():
        fields = line.split(":")
        if len(fields) == 4 and fields[2].isascii() and fields[2].isdigit():
            members = tuple(m for m in fields[3].split(",") if m)
            found.setdefault(fields[0], (int(fields[2]), members))
    return found


def user_gids(passwd: str, group: str, user: str) -> set[int] | None:
    """The gids `user` has: its primary one (its passwd line) and those of the groups
    listing it as a member; None when passwd has no such user."""
    for line in passwd.splitlines():
        fields = line.split(":")
        if len(fields) == 7 and fields[0] == user and fields[3].isascii() and fields[3].isdigit():
            primary = int(fields[3])
            break
    else:
        return None
    return {primary} | {gid for gid, members in group_ids(group).values() if user in members}
