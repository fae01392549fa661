"""The typed views of a container's files and a model checkpoint (`model/container_files.py`,
`model/checkpoint.py`): what serving, the engines and planning ask, from the facts' files."""

from __future__ import annotations

import attrs
import pytest

from pvegpu.errors import PlanError
from pvegpu.model.checkpoint import checkpoints
from pvegpu.model.container_files import container_files, module_version
from pvegpu.model.facts import ConfigFile, FileStat, HostFacts, IommuState
from pvegpu.serving.container_units import container_units
from pvegpu.vendors.amd import AMD

ROOT = "var/lib/lxc/101/rootfs"

STATUS = """\
Package: libnvidia-compute-570
Status: install ok installed
Version: 570.133.07-0ubuntu1

Package: libnvidia-compute-550
Status: deinstall ok config-files
Version: 550.54.14-0ubuntu1

Package: cuda-toolkit-12-8
Status: install ok installed
Version: 12.8.1-1
"""


def _facts(files: dict[str, str], stats: dict[str, int] | None = None) -> HostFacts:
    return HostFacts(
        node="pve1",
        functions=(),
        gpus=(),
        numa_nodes=(),
        iommu_groups=(),
        iommu=IommuState(True, ()),
        sev_snp=False,
        gpu_drivers=(),
        char_majors=(),
        cmdline="",
        vfio_ids=(),
        files=tuple(ConfigFile(p, t) for p, t in files.items()),
        stats=tuple(FileStat(p, s) for p, s in (stats or {}).items()),
    )


def test_a_tree_with_nothing_read_says_so() -> None:
    facts = _facts({"var/lib/lxc/102/rootfs/etc/group": "render:x:993:\n"})
    tree = container_files(facts).at(ROOT)
    assert not tree.was_read
    assert not tree.dpkg_read
    assert tree.libraries == ()
    assert tree.accounts.group_file is None
    assert tree.accounts.user_gids("sglang") is None


@pytest.mark.parametrize(
    ("files", "stats"),
    [
        ({f"{ROOT}/var/lib/dpkg/status": ""}, {}),
        ({}, {f"{ROOT}/usr/lib/x86_64-linux-gnu/libc.so.6": 1}),
        ({f"{ROOT}/etc/systemd/system/sglang.service": "[Service]\n"}, {}),
        ({f"{ROOT}/etc/passwd": "root:x:0:0::/root:/bin/sh\n"}, {}),
        ({f"{ROOT}/opt/rocm/.info/version": "6.4.1\n"}, {}),
    ],
)
def test_a_tree_is_read_by_any_of_its_marks(files: dict[str, str], stats: dict[str, int]) -> None:
    assert container_files(_facts(files, stats)).at(ROOT).was_read


def test_a_library_deeper_than_the_libdir_is_not_one_of_its_libraries() -> None:
    stats = {
        f"{ROOT}/usr/lib/x86_64-linux-gnu/libcuda.so.570.133.07": 1,
        f"{ROOT}/usr/lib/x86_64-linux-gnu/nvidia/libcuda.so.550.54.14": 1,
        f"{ROOT}/lib/x86_64-linux-gnu/libnvidia-ml.so.570.133.07": 1,
    }
    tree = container_files(_facts({}, stats)).at(ROOT)
    assert tree.libraries == ("libcuda.so.570.133.07", "libnvidia-ml.so.570.133.07")


def test_the_driver_takes_installed_driver_packages_and_libraries() -> None:
    facts = _facts(
        {f"{ROOT}/var/lib/dpkg/status": STATUS},
        {f"{ROOT}/usr/lib/x86_64-linux-gnu/libcuda.so.570.133.07": 1},
    )
    tree = container_files(facts).at(ROOT)
    assert tree.dpkg_read
    assert tree.packages == {
        "libnvidia-compute-570": "570.133.07-0ubuntu1",
        "cuda-toolkit-12-8": "12.8.1-1",
    }
    assert tree.driver.libraries == (("libcuda.so.570.133.07", "570.133.07"),)
    assert tree.driver.packages == (("libnvidia-compute-570", "570.133.07"),)
    assert container_files(facts).at(ROOT) is tree  # worked out once per facts value


def test_accounts_give_a_users_groups_by_passwd_and_membership() -> None:
    facts = _facts(
        {
            f"{ROOT}/etc/group": "video:x:44:\nrender:x:993:sglang\nrender:x:994:\nsvc:x:1001:\n",
            f"{ROOT}/etc/passwd": "sglang:x:1000:1001::/home/sglang:/bin/sh\n",
        }
    )
    accounts = container_files(facts).at(ROOT).accounts
    assert accounts.groups["render"] == (993, ("sglang",))  # the first line of a name wins
    assert accounts.user_gids("sglang") == {1001, 993}
    assert accounts.user_gids("nobody") is None
    assert accounts.group_name(993) == "render"
    assert accounts.group_name(12) is None


def test_has_and_text_take_a_path_inside_with_or_without_its_slash() -> None:
    facts = _facts(
        {f"{ROOT}/etc/sglang.yaml": "tp-size: 4\n"},
        {f"{ROOT}/usr/bin/python3": 10},
    )
    tree = container_files(facts).at(ROOT)
    assert tree.has("/usr/bin/python3") and tree.has("usr/bin/python3")
    assert not tree.has("/usr/bin/python3.12")
    assert tree.text("/etc/sglang.yaml") == "tp-size: 4\n"
    assert tree.text("etc/missing.yaml") is None


def test_module_version_is_the_out_of_tree_builds_or_empty() -> None:
    assert module_version(_facts({}), AMD) == ""
    facts = _facts({"sys/module/amdgpu/version": "6.12.12\n"})
    assert module_version(facts, AMD) == "6.12.12"


def test_checkpoint_size_from_its_index_else_its_shards() -> None:
    model = "models/m"
    index = '{"metadata": {"total_size": 2048}, "weight_map": {}}'
    both = _facts({f"{model}/model.safetensors.index.json": index}, {f"{model}/a.safetensors": 9})
    assert checkpoints(both).weights(model) == (2048, f"{model}/model.safetensors.index.json")
    shards = {f"{model}/a.safetensors": 3, f"{model}/b.safetensors": 4, f"{model}/x.bin": 100}
    assert checkpoints(_facts({}, shards)).weights(model) == (7, f"{model}/*.safetensors")
    assert checkpoints(_facts({})).weights(model) is None


def test_a_malformed_checkpoint_file_is_refused_each_time_it_is_asked() -> None:
    model = "models/m"
    facts = _facts(
        {f"{model}/config.json": "{", f"{model}/model.safetensors.index.json": "[]"},
    )
    for _ in range(2):
        with pytest.raises(PlanError) as config:
            checkpoints(facts).config(f"{model}/config.json")
        assert config.value.problems[0].subject == f"{model}/config.json"
        with pytest.raises(PlanError) as index:
            checkpoints(facts).weights(model)
        assert index.value.problems[0].subject == f"{model}/model.safetensors.index.json"
    assert checkpoints(facts).config(f"{model}/other.json") is None


def test_views_follow_an_evolved_facts_value() -> None:
    facts = _facts({})
    assert not container_files(facts).at(ROOT).was_read
    evolved = attrs.evolve(facts, files=(ConfigFile(f"{ROOT}/var/lib/dpkg/status", ""),))
    assert container_files(evolved).at(ROOT).was_read


def test_units_name_the_etc_file_the_loaded_one_and_the_copies() -> None:
    unit = "[Service]\nExecStart=/usr/bin/python3 -m sglang.launch_server --tp 2\n"
    facts = _facts(
        {
            f"{ROOT}/usr/lib/systemd/system/sglang.service": "[Service]\n",
            f"{ROOT}/etc/systemd/system/sglang.service": unit,
            f"{ROOT}/etc/systemd/system/multi-user.target.wants/sglang.service": unit,
            f"{ROOT}/etc/systemd/system/sglang.service.d/override.conf": "[Service]\n",
            f"{ROOT}/root/sglang.service": unit,
        }
    )
    units = container_units(facts, ROOT)
    assert [(e.directory, e.name) for e in units.entries] == [
        ("", "sglang.service"),
        ("multi-user.target.wants", "sglang.service"),
        ("sglang.service.d", "override.conf"),
    ]
    named = units.named("sglang.service")
    assert named.base is not None and named.base.path.endswith("etc/systemd/system/sglang.service")
    assert named.loaded is named.base  # /etc comes first in systemd's search path
    assert [f.path[len(ROOT) + 1 :] for f in named.copies] == [
        "usr/lib/systemd/system/sglang.service",
        "etc/systemd/system/multi-user.target.wants/sglang.service",
        "root/sglang.service",
    ]
    none = units.named("vllm.service")
    assert (none.base, none.loaded, none.copies) == (None, None, ())


def test_a_unit_is_parsed_once_per_facts_value() -> None:
    path = f"{ROOT}/etc/systemd/system/sglang.service"
    facts = _facts({path: "[Service]\nEnvironment=A=1\n"})
    units = container_units(facts, ROOT)
    assert container_units(facts, ROOT) is units
    (entry,) = units.entries
    assert units.parsed(entry.file) is units.parsed(entry.file)
    assert units.parsed(entry.file).values("Service", "Environment") == ("A=1",)
    # A file of the same path that the facts do not hold is parsed anew, not mistaken.
    other = ConfigFile(path, "[Service]\nEnvironment=B=2\n")
    assert units.parsed(other).values("Service", "Environment") == ("B=2",)
