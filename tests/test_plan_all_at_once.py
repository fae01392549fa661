"""A spec with fifteen mistakes takes two runs: the first refuses every schema mistake
(exit 4), the second, once those are fixed, every plan mistake (exit 5), servers
included: a plan refused for one pool still judges the others' servers.

The host is kpro6 with its boot NVMe moved into GPU 81:00.0's IOMMU group (a board
without ACS there) and a second container, CT 131, with nothing on it yet.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable
from pathlib import Path

import attrs
import pytest

import fixture_hosts
from depth import THOROUGH
from pvegpu.cli import main
from pvegpu.errors import PlanError
from pvegpu.model.facts import HostFacts
from pvegpu.model.schema import Spec
from pvegpu.pipeline import discover_for
from pvegpu.planning.planner import plan
from pvegpu.spec.load import parse_spec
from pvegpu.testing import write_host

Run = Callable[..., tuple[int, str, str]]

CT_131 = """\
arch: amd64
cores: 8
hostname: chat
memory: 65536
ostype: ubuntu
rootfs: local-zfs:subvol-129-disk-0,size=200G
"""

SERVING = """\
version = "0.5.23"
python = "/root/ml-env/bin/python3"
container_rootfs = "rpool/data/subvol-129-disk-0"
"""

# The second run's spec, each plan mistake marked.
FIXED = f"""\
node = "kpro6"

[[pools]]
name = "sglang"
gpus = ["01:00.0", "11:00.0", "61:00.0"]  # TP=3: Qwen3.5's heads take 1, 2, 4, 8 or 16

[pools.lxc]
vmid = 129

[pools.lxc.serving]
{SERVING}unit = "sglang-qwen"
model_path = "/shared/models/Qwen3.5-122B-A10B"
model_config = "shared/models/Qwen3.5-122B-A10B/config.json"
extra_args = ["--no-such-flag"]  # not an option of SGLang 0.5.23

[[pools]]
name = "vm"
gpus = ["81:00.0", "91:00.0"]  # 81:00.0's group holds the boot NVMe
mapping = {{ id = "pro6000-vm", description = "VM GPUs" }}

[pools.vfio]

[[pools]]
name = "spare"
gpus = ["91:00.0"]  # also in pool vm

[pools.lxc]
vmid = 130  # no such container

[[pools]]
name = "chat"
gpus = ["e1:00.0"]

[pools.lxc]
vmid = 131

[pools.lxc.serving]
{SERVING}unit = "sglang-chat"
port = 8000
model_path = "/shared/models/nope"
model_config = "shared/models/nope/config.json"  # not on the host
"""

# The first run's spec: each fix of the second, undone. (fixed text, broken text)
SCHEMA_MISTAKES = [
    ('node = "kpro6"\n', 'node = "kpro6"\n\n[host]\nname = "kpro6"\n'),
    ("vmid = 129", 'vmid = "129"'),
    ('unit = "sglang-qwen"', 'unit = "sglang-qwen"\ntp = 3'),
    ('description = "VM GPUs"', 'descripton = "VM GPUs"'),
    ("# no such container", '# no such container\ndevices = "mknod"'),
    ('gpus = ["e1:00.0"]', 'gpus = ["e1:00:0"]'),
    ("port = 8000", "port = -8000"),
    ('unit = "sglang-chat"', 'unit = "sglang-chat"\nenvironment = { HF_TOKEN = "hf_abc" }'),
    # A pool for the guest of another: a spec mistake, not the host's.
    (
        "[pools.vfio]\n",
        '[pools.vfio]\n\n[[pools]]\nname = "dup"\ncount = 1\nlxc = { vmid = 131 }\n',
    ),
]

SCHEMA_PROBLEMS = [
    ("spec-unknown-key", "host", 3),
    ("spec-invalid-value", "pools[0].lxc.vmid", 11),
    ("spec-unknown-key", "pools[0].lxc.serving.tp", 18),
    ("spec-unknown-key", "pools[1].mapping.descripton", 26),
    ("spec-invalid-value", "pools[3].lxc.devices", 41),
    ("spec-duplicate-guest", "pools[4]", 43),
    ("spec-invalid-address", "pools[4].gpus[0]", 45),
    ("spec-secret", "pools[4].lxc.serving.environment.HF_TOKEN", 55),
    ("spec-invalid-value", "pools[4].lxc.serving.port", 56),
]

PLAN_PROBLEMS = [
    ("gpu-in-two-pools", "0000:91:00.0"),
    ("foreign-device-in-group", "0000:81:00.0"),
    ("lxc-config-missing", "etc/pve/lxc/130.conf"),
    ("tp-does-not-divide-heads", "pools[0].lxc.serving"),
    ("sglang-option-unknown", "pools[0].lxc.serving.extra_args"),
    ("model-config-missing", "shared/models/nope/config.json"),
]


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Path:
    spec = fixture_hosts.kpro6()
    nvme = "0000:02:00.0"
    devices = tuple(
        attrs.evolve(d, iommu_group=40) if d.address == nvme else d for d in spec.devices
    )
    files = {**spec.files, "etc/pve/lxc/131.conf": CT_131}
    root = tmp_path_factory.mktemp("kpro6-nvme-in-group-40") / "root"
    write_host(attrs.evolve(spec, devices=devices, files=files), root)
    return root


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Run:
    def call(*argv: str | Path) -> tuple[int, str, str]:
        code = main([str(a) for a in argv])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return call


def _broken() -> str:
    text = FIXED
    for fixed, broken in SCHEMA_MISTAKES:
        assert text.count(fixed) == 1, fixed
        text = text.replace(fixed, broken)
    return text


def _refusal(run: Run, host: Path, spec: Path, exit_code: int) -> list[dict[str, object]]:
    """The refusal's problems from --json, after checking stderr says the same."""
    code, out, err = run("plan", "--root", host, "--spec", spec, "--json")
    assert code == exit_code, err
    doc = json.loads(out)
    assert (doc["schema"], doc["exit_code"]) == ("pvegpu.refusal/1", exit_code)
    problems: list[dict[str, object]] = doc["problems"]
    # The human lines: one per problem, in the same order.
    assert [line.rpartition("[")[2][:-1] for line in err.splitlines() if line.endswith("]")] == [
        p["code"] for p in problems
    ]
    return problems


def test_fifteen_mistakes_take_two_runs(run: Run, host: Path, tmp_path: Path) -> None:
    spec = tmp_path / "split.toml"
    spec.write_text(_broken())
    first = _refusal(run, host, spec, 4)
    assert [(p["code"], p["subject"], p["line"]) for p in first] == SCHEMA_PROBLEMS

    spec.write_text(FIXED)
    second = _refusal(run, host, spec, 5)
    assert [(p["code"], p["subject"]) for p in second] == PLAN_PROBLEMS
    # A spec path keeps its line; every problem says what to do.
    assert [p["line"] for p in second if str(p["subject"]).startswith("pools[")] == [10, 17]
    assert all(p["fix"] for p in second)


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        # An address not on the host: not also TP=2 for what is left of the pool.
        ('"61:00.0"]  #', '"61:00.0", "21:00.0"]  #', ("address-not-on-host", "pools[0].gpus[3]")),
        # A GPU the pool shares with another: its server is not judged on it.
        (
            'gpus = ["81:00.0", "91:00.0"]',
            'gpus = ["61:00.0"]',
            ("gpu-in-two-pools", "0000:61:00.0"),
        ),
        # No container: nothing about the server that would run in it.
        ("vmid = 129", "vmid = 132", ("lxc-config-missing", "etc/pve/lxc/132.conf")),
    ],
)
def test_a_refused_pool_has_no_server_problems(
    run: Run, host: Path, tmp_path: Path, old: str, new: str, expected: tuple[str, str]
) -> None:
    """A server whose pool's GPUs or container are refused is not judged: its TP and
    option problems would only repeat that refusal. The other pools' still are."""
    spec = tmp_path / "split.toml"
    assert FIXED.count(old) == 1
    spec.write_text(FIXED.replace(old, new))
    got = [(p["code"], p["subject"]) for p in _refusal(run, host, spec, 5)]
    assert expected in got
    assert not [s for c, s in got if str(s).startswith("pools[0].lxc.serving")]
    assert ("model-config-missing", "shared/models/nope/config.json") in got


@pytest.fixture(scope="module")
def fixed(host: Path) -> tuple[HostFacts, Spec]:
    spec = parse_spec(FIXED)
    return discover_for(spec, host), spec


def _by_name(spec: Spec, subject: str) -> str:
    """`pools[2].lxc` as `pool spare.lxc`: the same mistake whatever the pools' order."""
    return re.sub(r"^pools\[(\d+)\]", lambda m: f"pool {spec.pools[int(m[1])].name}", subject)


# Every order in the thorough run; in the quick one, each pool first once, and reversed.
ORDERS = list(itertools.permutations(range(4)))
QUICK_ORDERS = [(0, 1, 2, 3), (1, 2, 3, 0), (2, 3, 0, 1), (3, 0, 1, 2), (3, 2, 1, 0)]


@pytest.mark.parametrize("order", ORDERS if THOROUGH else QUICK_ORDERS)
def test_the_plan_problems_do_not_depend_on_the_pools_order(
    fixed: tuple[HostFacts, Spec], order: tuple[int, ...]
) -> None:
    """The same independent mistakes, the pools in any order: one problem each, the same."""
    facts, spec = fixed
    expected = sorted((c, _by_name(spec, s)) for c, s in PLAN_PROBLEMS)
    shuffled = attrs.evolve(spec, pools=tuple(spec.pools[i] for i in order))
    with pytest.raises(PlanError) as err:
        plan(facts, shuffled)
    assert sorted((p.code, _by_name(shuffled, p.subject)) for p in err.value.problems) == expected
