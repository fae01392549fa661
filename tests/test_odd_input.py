"""Odd values in the serving inputs and the guest configs: a typed refusal, fast.

A model's config.json, its model.safetensors.index.json and the `cores`/`sockets`/
`memory` of the guests pvegpu sizes from come from the host, so they can hold anything:
numbers Proxmox does not read (Unicode digits, floats), head counts no model has,
nesting deeper than Python's JSON reader goes, NaN. Each is refused naming the file and
the key, with a fix, within a deadline; on the command line that is exit 5 and no --out.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bundled import FIXTURES, copy_tree, spec_path
from deadline import deadline
from pvegpu.cli import main
from pvegpu.errors import PlanError, RenderError
from pvegpu.model.facts import ConfigFile
from pvegpu.model.guest_config import GuestConfig
from pvegpu.model.model_config import (
    MAX_TP_SIZE,
    ModelConfig,
    checkpoint_bytes_from_index,
    parse_model_config,
    problem_tp,
    valid_tp_sizes,
)
from pvegpu.pci import CpuList
from pvegpu.pvefiles import pcicfg, qemuconf
from pvegpu.pvefiles.guestconf import config_integer
from strategies_serving import MODEL_DIR, qwen35_config

DEADLINE_S = 10
CONFIG = f"{MODEL_DIR}/config.json"
INDEX = f"{MODEL_DIR}/model.safetensors.index.json"
VM_PATH = "etc/pve/qemu-server/200.conf"
LXC_PATH = "etc/pve/lxc/129.conf"
MAPPING = "pro6000-vm"
NODE1 = qemuconf.NumaPin(1, CpuList.parse("32-63,96-127"))
VM = "cores: 4\nmachine: q35\nmemory: 4096\nsockets: 2\n"
# Valid JSON nested 100,000 deep: RecursionError inside json.loads on 3.11 and 3.13.
DEEP_ARRAY = "[" * 100_000 + "]" * 100_000
DEEP_OBJECT = '{"a": ' * 100_000 + "1" + "}" * 100_000


# ------------------------------------------------------------------ integers as Proxmox reads


@pytest.mark.parametrize(
    ("value", "minimum", "expected"),
    [
        ("4", 1, 4),
        ("+4", 1, 4),  # Proxmox's `^[+-]?\d+$` takes a sign
        ("0064", 1, 64),
        ("16", 16, 16),
        ("9" * 18, 1, 10**18 - 1),
        ("0", 1, None),
        ("-4", 1, None),
        ("15", 16, None),
        ("", 1, None),
        ("+", 1, None),
        ("4.0", 1, None),
        ("4_0", 1, None),  # int() takes it
        (" 4", 1, None),  # int() takes it
        ("\u0664", 1, None),  # ARABIC-INDIC DIGIT FOUR: int() takes it
        ("\uff14", 1, None),  # FULLWIDTH DIGIT FOUR: int() takes it
        ("\u00b2", 1, None),  # SUPERSCRIPT TWO: isdigit() says yes, int() raises
        ("1e3", 1, None),
        ("0x20", 1, None),
        ("9" * 19, 1, None),
        ("9" * 5000, 1, None),  # int() raises: past Python's 4300-digit limit
    ],
)
def test_config_integer_is_ascii_digits_only(
    value: str, minimum: int, expected: int | None
) -> None:
    assert config_integer(value, minimum) == expected


# ------------------------------------------------------------------ existing VM configs


def _vm_with(key: str, value: str) -> str:
    return re.sub(rf"^{key}: .*$", f"{key}: {value}", VM, flags=re.MULTILINE)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("cores", "abc"),
        ("cores", "4.0"),
        ("cores", "\u0664"),
        ("cores", "\u00b2"),
        ("cores", "4_0"),
        ("cores", "0"),
        ("sockets", "x"),
        ("sockets", "\uff12"),
        ("memory", "4096.5"),
        ("memory", "\u0664\u0660\u0669\u0666"),
        ("memory", "\u00b2"),
        ("memory", "8"),  # below qemu-server's 16 MiB
        ("memory", "current=4096,foo=1"),  # memory takes no key but current
        ("memory", "current="),
        ("memory", "9" * 5000),
    ],
)
def test_vm_size_proxmox_cannot_read_is_refused(key: str, value: str) -> None:
    """NUMA pinning sizes numa0 by cores x sockets and memory: a value Proxmox skips is
    refused naming the file and the key, by plan() and by the patch alike."""
    text = _vm_with(key, value)
    problems = GuestConfig(ConfigFile(VM_PATH, text)).hostpci_problems(MAPPING, 1, numa=True)
    (problem,) = problems
    assert (problem.code, problem.subject) == ("vm-config-value-invalid", VM_PATH)
    assert problem.message.startswith(f"{key} is {value!r}, ")
    assert f"qm set <vmid> --{key} " in problem.fix
    with pytest.raises(RenderError) as caught:
        qemuconf.patch_hostpci(text, MAPPING, 1, numa=NODE1, subject=VM_PATH)
    assert caught.value.problems == problems


def test_every_odd_vm_size_is_listed_at_once() -> None:
    text = "cores: \u00b2\nmemory: 1.5\nsockets: -1\n"
    problems = GuestConfig(ConfigFile(VM_PATH, text)).hostpci_problems(MAPPING, 1, numa=True)
    keys = [p.message.split(" ", 1)[0] for p in problems]
    assert keys == ["memory", "cores", "sockets"]
    assert {p.code for p in problems} == {"vm-config-value-invalid"}


def test_vm_sizes_proxmox_reads_give_numa0() -> None:
    """`+4` is an integer to Proxmox, `current=` is memory's one key; unset means 1."""
    text = "cores: +4\nmemory: current=4096\nsockets: 2\n"
    assert GuestConfig(ConfigFile(VM_PATH, text)).hostpci_problems(MAPPING, 1, numa=True) == ()
    out = qemuconf.patch_hostpci(text, MAPPING, 1, numa=NODE1).text
    assert "numa0: cpus=0-7,hostnodes=1,memory=4096,policy=bind\n" in out
    out = qemuconf.patch_hostpci("memory: 2048\n", MAPPING, 1, numa=NODE1).text
    assert "numa0: cpus=0,hostnodes=1,memory=2048,policy=bind\n" in out


def test_vm_sizes_are_not_read_without_numa_pinning() -> None:
    """Without NUMA pinning pvegpu writes nothing sized by them, so it does not judge them."""
    text = _vm_with("cores", "\u00b2")
    assert GuestConfig(ConfigFile(VM_PATH, text)).hostpci_problems(MAPPING, 1, numa=False) == ()
    assert "hostpci0: mapping=pro6000-vm" in qemuconf.patch_hostpci(text, MAPPING, 1).text


def test_missing_memory_is_still_unset_not_invalid() -> None:
    (problem,) = GuestConfig(ConfigFile(VM_PATH, "cores: 4\n")).hostpci_problems(
        MAPPING, 1, numa=True
    )
    assert problem.code == "vm-memory-unset"


# ------------------------------------------------------------------ LXC cores


@pytest.mark.parametrize("value", ["\u00b2", "\u0664", "\uff18", "x", "4.5", "0", "-2", "9" * 19])
def test_lxc_cores_proxmox_cannot_read_is_refused(value: str) -> None:
    with pytest.raises(PlanError) as caught:
        GuestConfig(ConfigFile(LXC_PATH, f"arch: amd64\ncores: {value}\n")).cores()
    (problem,) = caught.value.problems
    assert (problem.code, problem.subject) == ("lxc-config-value-invalid", LXC_PATH)
    assert problem.message.startswith(f"cores is {value!r}, ")
    assert "pct set <vmid> --cores" in problem.fix


def test_lxc_cores_with_a_sign_is_read() -> None:
    assert GuestConfig(ConfigFile(LXC_PATH, "cores: +8\n")).cores() == 8


# ------------------------------------------------------------------ config.json


def _model(**text: Any) -> ModelConfig:
    return parse_model_config(qwen35_config(**text), path=CONFIG)


def _refusal(text: str) -> str:
    """The message of parse_model_config's one refusal of `text`."""
    with pytest.raises(PlanError) as caught, deadline(DEADLINE_S):
        parse_model_config(text, path=CONFIG)
    (problem,) = caught.value.problems
    assert (problem.code, problem.subject) == ("model-config-invalid", CONFIG)
    assert problem.fix
    return problem.message


def test_a_billion_heads_are_checked_in_bounded_time() -> None:
    """TP sizes are listed up to MAX_TP_SIZE, not up to the head count (10**9 checks)."""
    model = _model(num_attention_heads=1_000_000_001)
    with deadline(2):
        sizes = valid_tp_sizes(model)
        problem = problem_tp(model, 4, "pools[0].lxc.serving")
    assert sizes == (1,)  # odd, and 2 KV heads: only TP 1 splits or replicates them
    assert problem.code == "tp-does-not-divide-heads"
    assert problem.message.endswith("valid TP sizes: 1")


def test_valid_tp_sizes_stop_at_the_bound() -> None:
    model = _model(num_attention_heads=4096, num_key_value_heads=4096, linear_num_key_heads=4096,
                   linear_num_value_heads=4096)  # fmt: skip
    assert valid_tp_sizes(model) == tuple(2**i for i in range(11))
    assert max(valid_tp_sizes(model)) == MAX_TP_SIZE


def test_no_kv_layer_in_layer_types_is_refused() -> None:
    text = json.loads(qwen35_config())
    text["text_config"]["layer_types"] = ["linear_attention"] * 47 + ["mamba"]
    message = _refusal(json.dumps(text))
    assert message.startswith("layer_types names only linear_attention, mamba: no layer")


def test_interval_beyond_the_layers_is_refused() -> None:
    text = json.loads(qwen35_config())
    del text["text_config"]["layer_types"]
    text["text_config"]["full_attention_interval"] = 49
    message = _refusal(json.dumps(text))
    assert message.startswith("full_attention_interval 49 exceeds num_hidden_layers 48")


def test_one_kv_layer_is_enough() -> None:
    text = json.loads(qwen35_config())
    text["text_config"]["layer_types"] = ["linear_attention"] * 47 + ["full_attention"]
    model = parse_model_config(json.dumps(text), path=CONFIG)
    assert (model.full_attention_layers, model.linear_attention_layers) == (1, 47)


@pytest.mark.parametrize("deep", [DEEP_ARRAY, DEEP_OBJECT], ids=["array", "object"])
def test_deeply_nested_config_is_refused(deep: str) -> None:
    text = qwen35_config().rstrip().removesuffix("}") + f', "deep": {deep}}}'
    assert _refusal(text) == "not JSON: nested deeper than Python's JSON reader goes"


@pytest.mark.parametrize("depth", [900, 5_000])
def test_a_nested_value_for_a_read_key_is_refused(depth: int) -> None:
    """3.11's JSON reader takes 900 levels, 3.13's some 10,000, and near that limit repr()
    of what it read raises RecursionError: the message names the value by kind."""
    deep = '{"a": ' * depth + "1" + "}" * depth
    message = _refusal(qwen35_config().replace('"head_dim": 256', f'"head_dim": {deep}'))
    assert message in (
        "head_dim is a JSON object, expected a non-negative integer",
        "not JSON: nested deeper than Python's JSON reader goes",
    )


def test_a_long_value_is_cut_in_the_message() -> None:
    message = _refusal(qwen35_config(head_dim="x" * 5000))
    assert message == f"head_dim is '{'x' * 56}..., expected a non-negative integer"


def test_integer_of_5000_digits_is_refused() -> None:
    text = qwen35_config().replace('"head_dim": 256', '"head_dim": ' + "7" * 5000)
    assert "4300" in _refusal(text)


def test_count_above_2_53_is_refused_naming_the_key() -> None:
    assert _refusal(qwen35_config(head_dim=2**53 + 1)) == (
        "head_dim is over 2**53, more than any model has"
    )


# ------------------------------------------------------------------ model.safetensors.index.json


@pytest.mark.parametrize(
    "total",
    ["NaN", "Infinity", "-Infinity", "1e400", "0", "-5", "9007199254740993", "true", '"1e9"',
     "null", "[]"],
)  # fmt: skip
def test_total_size_that_is_no_size_is_refused(total: str) -> None:
    text = '{"metadata": {"total_size": ' + total + '}, "weight_map": {}}'
    with pytest.raises(PlanError) as caught:
        checkpoint_bytes_from_index(text, path=INDEX)
    (problem,) = caught.value.problems
    assert (problem.code, problem.subject) == ("checkpoint-index-invalid", INDEX)
    assert "metadata.total_size is " in problem.message
    assert problem.fix == "set checkpoint_bytes in the serving spec"


@pytest.mark.parametrize("bad", [DEEP_ARRAY, "7" * 5000], ids=["deep", "5000-digits"])
def test_index_json_python_cannot_read_is_refused(bad: str) -> None:
    text = '{"metadata": {"total_size": 1}, "x": ' + bad + "}"
    with pytest.raises(PlanError) as caught, deadline(DEADLINE_S):
        checkpoint_bytes_from_index(text, path=INDEX)
    assert caught.value.problems[0].code == "checkpoint-index-invalid"


def test_a_whole_float_total_size_is_read() -> None:
    assert checkpoint_bytes_from_index('{"metadata": {"total_size": 1.5e12}}', path=INDEX) == (
        1_500_000_000_000
    )


# ------------------------------------------------------------------ on the command line


def _kpro6_vm(root: Path, text: str) -> None:
    directory = root / "etc/pve/nodes/kpro6/qemu-server"
    directory.mkdir(exist_ok=True)
    (directory / "200.conf").write_text(text, encoding="utf-8")


def _lxc_cores(root: Path, value: str) -> None:
    path = root / LXC_PATH
    text = path.read_text(encoding="utf-8")
    path.write_text(re.sub(r"^cores: .*$", f"cores: {value}", text, flags=re.MULTILINE))


def _edit_json(relative: str, change: Callable[[str], str]) -> Callable[[Path], None]:
    def edit(root: Path) -> None:
        path = root / relative
        path.write_text(change(path.read_text(encoding="utf-8")), encoding="utf-8")

    return edit


def _text_config(**changes: Any) -> Callable[[str], str]:
    def change(text: str) -> str:
        doc = json.loads(text)
        doc["text_config"].update(changes)
        return json.dumps(doc)

    return change


# ------------------------------------------------------------------ pci.cfg values

PCI_CFG = "etc/pve/mapping/pci.cfg"
# The nic-cx6 line of kpro6's pci.cfg; each case swaps one value of it.
NIC_LINE = "id=15b3:101d,iommugroup=27,node=kpro6,path=0000:c1:00.0,subsystem-id=15b3:0016"
NIC_CFG = f"gpus\n\tdescription x\n\nnic-cx6\n\tmap {NIC_LINE}\n\tdescription port 0\n\n"
ODD_MAP_VALUES = [
    ("iommugroup", "\u0663"),  # Arabic-Indic three: str.isdigit, and int() reads 3
    ("iommugroup", "\uff11\uff12"),  # fullwidth 12
    ("iommugroup", "1e9"),
    ("iommugroup", "9" * 5000),  # int() refuses past 4,300 digits: a ValueError before
    ("iommugroup", "12345678901"),
    ("iommugroup", "-1"),
    ("iommugroup", "+27"),
    ("iommugroup", "27 "),
    ("id", "15b3:101d0"),
    ("id", "0x15b3:101d"),
    ("id", "\u0661\u0665b3:101d"),
    ("subsystem-id", "15b3"),
    ("subsystem-id", "zzzz:0016"),
    ("node", "kpro6.lan"),
    ("node", "-kpro6"),
    ("node", "\uff4bpro6"),  # fullwidth k
    ("path", "0000:c1:00.8"),
    ("path", "0000:C1:00.0"),
    ("path", "0000:c1:00.0;"),
    ("path", "000000000:c1:00.0"),
    ("path", "0" * 5000 + ":c1:00.0"),
    ("path", "\u0660\u0660\u0660\u0660:c1:00.0"),
]


def _odd_map(key: str, value: str) -> str:
    return NIC_CFG.replace(
        f"{key}={dict(p.split('=') for p in NIC_LINE.split(','))[key]}", f"{key}={value}", 1
    )


@pytest.mark.parametrize(("key", "value"), ODD_MAP_VALUES)
def test_odd_pci_cfg_value_is_a_typed_refusal(key: str, value: str) -> None:
    """Every value of a map line Proxmox would not read as we do (or at all) is a
    pcicfg-syntax refusal naming the file, the line and the mapping, with a fix; never
    a ValueError, never read as another number, and a 5,000-character value is cut."""
    text = _odd_map(key, value)
    assert f"{key}={value}" in text
    with deadline(DEADLINE_S), pytest.raises(RenderError) as caught:
        pcicfg.parse(text)
    (problem,) = caught.value.problems
    assert (problem.code, problem.subject) == ("pcicfg-syntax", f"{PCI_CFG} line 5")
    assert problem.message.startswith(f"mapping 'nic-cx6': map {key} ")
    assert "Datacenter > Resource Mappings > nic-cx6" in problem.fix
    assert len(problem.message) < 400
    assert pcicfg.syntax_problems(text) == caught.value.problems


@pytest.mark.parametrize("text", ["iommugroup=", "iommugroup"])
def test_empty_iommugroup_is_refused(text: str) -> None:
    with pytest.raises(RenderError) as caught:
        pcicfg.parse(NIC_CFG.replace("iommugroup=27", text))
    assert "is not key=value" in caught.value.problems[0].message


def test_values_proxmox_reads_are_read() -> None:
    """An uppercase id, a leading zero and the VMD domain are read (the stale check then
    compares them with sysfs as Proxmox does: as text)."""
    text = NIC_CFG.replace("id=15b3:101d", "id=15B3:101D").replace("=27", "=027")
    (_, nic) = pcicfg.parse(text.replace("0000:c1", "10000:c1"))
    assert nic.maps[0].get("iommugroup") == "027"
    assert nic.mapping.maps[0].iommugroup == 27


def _odd_pci_cfg(root: Path) -> None:
    path = root / PCI_CFG
    path.write_text(path.read_text().replace("iommugroup=27", "iommugroup=" + "9" * 5000))


CLI_CASES = [
    pytest.param(
        "kpro6-raw",
        lambda root: _kpro6_vm(root, _vm_with("cores", "\u00b2")),
        (VM_PATH, "vm-config-value-invalid", "cores is '\u00b2'"),
        id="vm-cores-superscript",
    ),
    pytest.param(
        "kpro6-raw",
        lambda root: _kpro6_vm(root, _vm_with("memory", "4096.5")),
        (VM_PATH, "vm-config-value-invalid", "memory is '4096.5'"),
        id="vm-memory-float",
    ),
    pytest.param(
        "kpro6-raw",
        lambda root: _kpro6_vm(root, _vm_with("cores", "abc")),
        (VM_PATH, "vm-config-value-invalid", "cores is 'abc'"),
        id="vm-cores-letters",
    ),
    pytest.param(
        "kpro6",
        lambda root: _lxc_cores(root, "\u0664"),
        (LXC_PATH, "lxc-config-value-invalid", "cores is '\u0664'"),
        id="lxc-cores-unicode-digit",
    ),
    pytest.param(
        "kpro6",
        _edit_json(CONFIG, _text_config(num_attention_heads=1_000_000_001)),
        ("pools[0].lxc.serving", "tp-does-not-divide-heads", "valid TP sizes: 1"),
        id="a-billion-heads",
    ),
    pytest.param(
        "kpro6",
        _edit_json(CONFIG, _text_config(layer_types=["linear_attention"] * 48)),
        (CONFIG, "model-config-invalid", "layer_types names only linear_attention"),
        id="no-kv-layer",
    ),
    pytest.param(
        "kpro6",
        _edit_json(CONFIG, lambda t: t.rstrip().removesuffix("}") + f', "x": {DEEP_OBJECT}}}'),
        (CONFIG, "model-config-invalid", "nested deeper"),
        id="config-nested-100000-deep",
    ),
    pytest.param(
        "kpro6",
        _edit_json(INDEX, lambda t: re.sub(r'"total_size": \d+', '"total_size": NaN', t)),
        (INDEX, "checkpoint-index-invalid", "metadata.total_size is nan"),
        id="index-total-size-nan",
    ),
    pytest.param(
        "kpro6",
        _odd_pci_cfg,
        (f"{PCI_CFG} line 2", "pcicfg-syntax", "map iommugroup '999999999999999999999999'..."),
        id="pci-cfg-iommugroup-5000-digits",
    ),
    pytest.param(
        "kpro6",
        _edit_json(INDEX, lambda t: re.sub(r'"total_size": \d+', '"total_size": 1e400', t)),
        (INDEX, "checkpoint-index-invalid", "metadata.total_size is inf"),
        id="index-total-size-1e400",
    ),
]


@pytest.mark.parametrize(("example", "edit", "expected"), CLI_CASES)
def test_render_refuses_odd_input_and_writes_nothing(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    example: str,
    edit: Callable[[Path], None],
    expected: tuple[str, str, str],
) -> None:
    """`pvegpu render` on a copy of kpro6 with one odd value: exit 5, the file and key
    named, no traceback, no --out directory."""
    root = copy_tree(FIXTURES / "kpro6", tmp_path / "root")
    edit(root)
    out = tmp_path / "out"
    with deadline(30):
        argv = ["render", "--root", str(root), "--spec", str(spec_path(example)), "--out", str(out)]
        code = main(argv)
    captured = capsys.readouterr()
    subject, problem_code, needle = expected
    assert (code, captured.out) == (5, ""), captured.err
    # A spec key's subject may carry where the spec says it: `pools[0].lxc.serving (line 21)`.
    pattern = rf"^  {re.escape(subject)}(?: \(line \d+\))?: (.*) \[{problem_code}\]$"
    line = re.search(pattern, captured.err, re.MULTILINE)
    assert line is not None, captured.err
    assert needle in line[1]
    assert "Traceback" not in captured.err
    assert captured.err.endswith("nothing was written.\n")
    assert not out.exists()
