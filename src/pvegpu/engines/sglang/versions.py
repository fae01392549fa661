"""SGLang's version rules as one table: what pvegpu writes for each release where they differ.

The option tables (`data/tables.json.gz` here, one per release) say what a release *accepts*;
this table says what pvegpu *writes* for it: which spelling of a flag, which environment
variable a release needs, which variable a release retired. Code asks the table
(`RULES.options_for(version, ...)`) and never compares versions itself, so a new release
that renames a flag or changes a default is a new row here, not an `if` somewhere else.
"""

from __future__ import annotations

from collections.abc import Collection
from enum import StrEnum

import attrs

from pvegpu.engines.common.deprecations import FlagDeprecation
from pvegpu.engines.common.releases import Versions, version_key
from pvegpu.values import value_class

ALL = Versions()


class When(StrEnum):
    """What about the server makes a rule apply, besides the version."""

    MTP = "mtp"
    """The spec asks for MTP (`mtp = true`)."""
    HYBRID_MTP = "hybrid-mtp"
    """MTP on a hybrid model (some layers linear attention / mamba), from its config.json."""
    NUMA_PINNED = "numa-pinned"
    """systemd pins the whole service to one NUMA node."""


def conditions(*, mtp: bool, hybrid: bool, pinned: bool) -> frozenset[When]:
    """What holds for a server: MTP asked for, the model hybrid, the service pinned."""
    holds = {When.MTP} if mtp else set()
    if mtp and hybrid:
        holds.add(When.HYBRID_MTP)
    if pinned:
        holds.add(When.NUMA_PINNED)
    return frozenset(holds)


@value_class
@attrs.frozen(eq=False, repr=False)
class OptionRule:
    """One launch_server option pvegpu writes when `when` holds, for `versions`."""

    when: When
    setting: str
    """What the option sets; rows with the same setting are one option renamed over time."""
    option: str
    """The spelling these versions use (the option table gives the canonical form)."""
    value: str
    versions: Versions = ALL
    tunable: bool = False
    """A default: extra_args may set it instead (then only its value is written)."""


@value_class
@attrs.frozen(eq=False, repr=False)
class EnvironmentRule:
    """One variable the unit's Environment= sets when `when` holds, for `versions`."""

    when: When
    name: str
    value: str
    versions: Versions
    why: str


@value_class
@attrs.frozen(eq=False, repr=False)
class RetiredVariable:
    """A variable a release removed: set by hand, it is reported; in an old unit, not kept."""

    name: str
    since: str
    code: str
    """The finding code when a spec still sets it."""

    @property
    def versions(self) -> Versions:
        return Versions(since=self.since)


@value_class
@attrs.frozen(eq=False, repr=False)
class MemoryBalance:
    """SGLang's refusal of a tensor-parallel group whose GPUs' memory differs, in `versions`.

    At start each rank compares the least free memory of any rank with its own: less
    than `ratio` of its own, and SGLang stops ("The memory capacity is unbalanced")
    unless `variable` holds one of `off`, when it only logs it.
    """

    versions: Versions
    ratio: float
    variable: str
    value: str
    """What the fix sets `variable` to."""
    off: frozenset[str]
    """The values (lower case) that turn the refusal into a log line, as the release
    parses the variable."""
    why: str


@value_class
@attrs.frozen(eq=False, repr=False)
class VersionRules:
    options: tuple[OptionRule, ...]
    environment: tuple[EnvironmentRule, ...]
    retired: tuple[RetiredVariable, ...]
    balance: tuple[MemoryBalance, ...] = ()
    deprecations: tuple[FlagDeprecation, ...] = ()

    def deprecation(self, flag: str) -> FlagDeprecation | None:
        """The deprecation of `flag` (exactly as written), if the table has one."""
        return next((d for d in self.deprecations if d.flag == flag), None)

    def options_for(self, version: str, holds: Collection[When]) -> tuple[OptionRule, ...]:
        """The options to write, in table order (the order of the ExecStart lines)."""
        return tuple(r for r in self.options if r.when in holds and version in r.versions)

    def environment_for(self, version: str, holds: Collection[When]) -> tuple[EnvironmentRule, ...]:
        return tuple(r for r in self.environment if r.when in holds and version in r.versions)

    def balance_for(self, version: str) -> MemoryBalance | None:
        """The memory-balance rule of `version`, if the table has one for it."""
        return next((r for r in self.balance if version in r.versions), None)

    def retired_in(self, name: str, version: str) -> RetiredVariable | None:
        """The retirement of variable `name` that `version` is past, if any."""
        return next((r for r in self.retired if r.name == name and version in r.versions), None)

    def spellings(self, setting: str) -> tuple[str, ...]:
        """Every spelling the table has for `setting`, newest release first."""
        rows = sorted(
            (r for r in self.options if r.setting == setting),
            key=lambda r: version_key(r.versions.since) if r.versions.since else (),
            reverse=True,
        )
        return tuple(dict.fromkeys(r.option for r in rows))

    @property
    def settings(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.setting for r in self.options))


RULES = VersionRules(
    options=(
        # MTP: the model's own next-token head drafts a greedy chain (top-k 1) of 3 tokens,
        # verified together with the current one (draft tokens = steps + 1 at top-k 1).
        OptionRule(When.MTP, "speculative algorithm", "--speculative-algorithm", "NEXTN"),
        OptionRule(When.MTP, "draft steps", "--speculative-num-steps", "3", tunable=True),
        OptionRule(When.MTP, "draft top-k", "--speculative-eagle-topk", "1", tunable=True),
        OptionRule(When.MTP, "draft tokens", "--speculative-num-draft-tokens", "4", tunable=True),
        # MTP on a hybrid model needs the mamba cache kept per draft branch. The option
        # came in 0.5.7 (no earlier table lists it), was renamed in 0.5.14 (the old name a
        # deprecated alias until 0.5.19), and 0.5.20 removed the old name.
        OptionRule(
            When.HYBRID_MTP,
            "mamba cache strategy",
            "--mamba-scheduler-strategy",
            "extra_buffer",
            Versions(since="0.5.7", before="0.5.14"),
        ),
        OptionRule(
            When.HYBRID_MTP,
            "mamba cache strategy",
            "--mamba-radix-cache-strategy",
            "extra_buffer",
            Versions(since="0.5.14"),
        ),
    ),
    environment=(
        EnvironmentRule(
            When.HYBRID_MTP,
            "SGLANG_ENABLE_SPEC_V2",
            "1",
            Versions(since="0.5.7", before="0.5.14"),
            "0.5.7-0.5.13 refuse MTP on a hybrid model without it next to the mamba option "
            "above; up to 0.5.10 it defaults off",
        ),
        EnvironmentRule(
            When.NUMA_PINNED,
            "SGLANG_AUTO_NUMA_BIND",
            "0",
            Versions(since="0.5.18"),
            "from 0.5.18 SGLang binds each GPU worker to its node by default (environ.py: "
            "EnvBool(True)); systemd already binds the whole service to one node, so "
            "SGLang's own binding would only repeat it (and could fight a later "
            "CPUAffinity change)",
        ),
    ),
    retired=(RetiredVariable("SGLANG_ENABLE_SPEC_V2", "0.5.14", "serving-spec-v2-removed"),),
    # Every shipped release refuses a TP group whose least free memory of any rank is
    # below 90% of a rank's own (model_runner.py; distributed/bootstrap.py in 0.5.23).
    # How to let it start anyway changed in 0.5.7 (sglang PR 15802): before, the
    # disable-style SGL_DISABLE_TP_MEMORY_INBALANCE_CHECK, read by get_bool_env_var
    # ("true"/"1"); from 0.5.7 the enable-style SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK, an
    # EnvBool defaulting to true. 0.5.7 copies a set SGL_DISABLE_... value into the new
    # variable as it is (so `1` keeps the check on) and later releases drop it: the old
    # name no longer lets the server start.
    balance=(
        MemoryBalance(
            Versions(before="0.5.7"),
            0.9,
            "SGL_DISABLE_TP_MEMORY_INBALANCE_CHECK",
            "1",
            frozenset({"true", "1"}),
            "read by get_bool_env_var: true or 1 turns the refusal into a warning",
        ),
        MemoryBalance(
            Versions(since="0.5.7"),
            0.9,
            "SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK",
            "0",
            frozenset({"false", "0", "no", "n"}),
            "an EnvBool, true by default: false, 0, no or n turns the refusal into a warning",
        ),
    ),
    deprecations=(
        # 0.5.22 made attention DP its own size: `--dp-size N --enable-dp-attention` is
        # read as `--attn-dp-size N` (handle_deprecated_dp_attention), and the flag and
        # its field go "after 2026-12-31" (the TODOs of sglang/srt/server_args.py and
        # sglang/srt/arg_groups/fields/parallel.py, 0.5.22 and 0.5.23).
        FlagDeprecation(
            "--enable-dp-attention",
            "--attn-dp-size <dp-size>",
            "0.5.22",
            "after 2026-12-31",
            "sglang/srt/server_args.py of SGLang 0.5.22 and 0.5.23",
        ),
    ),
)
"""The table in force. Read as `versions.RULES` at call time (tests swap it)."""
