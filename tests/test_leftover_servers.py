"""Issue 17 item 6: a container's own server, where pvegpu renders no unit, against the
GPUs the plan leaves it (planning/leftover_servers.py, host/container_units.py).

The host is a copy of fixtures/sysfs/kpro6 (CT 129, eight GPUs, `sglang-qwen.service`
with `--tp 8`, not enabled there) planned with examples/kpro6.toml minus its serving
table: the pool keeps NUMA 0's four GPUs for CT 129, NUMA 1's go to vfio-pci.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bundled import EXAMPLE_HOSTS, copy_tree, example_plan, example_spec, fixture_root, host_facts
from pvegpu.diagnostic import Diagnostic
from pvegpu.engines import installed_files
from pvegpu.errors import PlanError
from pvegpu.host import container_units
from pvegpu.host.discover import read_host
from pvegpu.host.reader import RootReader
from pvegpu.host.snapshot import snapshot, unpack
from pvegpu.model.plan import Plan
from pvegpu.model.schema import Spec
from pvegpu.pipeline import discover_for
from pvegpu.planning.planner import plan
from pvegpu.planning.unit_gpus import unit_demand, visible_count
from pvegpu.serving.unitfile import parse_unit
from pvegpu.spec.load import parse_spec

CT = "rpool/data/subvol-129-disk-0"
UNITS = f"{CT}/etc/systemd/system"
UNIT = f"{UNITS}/sglang-qwen.service"
WANTS = f"{UNITS}/multi-user.target.wants/sglang-qwen.service"
NO_SERVING = """\
node = "kpro6"

[[pools]]
name = "sglang"
numa_node = 0
mapping = { id = "pro6000", description = "LXC-side GPUs on NUMA 0 (nvidia)" }

[pools.lxc]
vmid = 129
devices = "dev"

[[pools]]
name = "vm"
numa_node = 1
mapping = { id = "pro6000-vm", description = "VM passthrough GPUs on NUMA 1 (vfio-pci)" }

[pools.vfio]
"""
OWN_CODES = (
    "container-unit-needs-gpus",
    "container-unit-short",
    "container-unit-visible-devices",
    "container-unit-gpus-unknown",
    "container-units-unchecked",
    "container-unit-disabled-needs-gpus",
)
IDLE = "container-unit-disabled-needs-gpus"


def host(tmp_path: Path, *, enabled: bool = True, tp: str = "8", installed: bool = True) -> Path:
    """kpro6 with CT 129's unit at `--tp <tp>`, enabled the way `systemctl enable` does
    (or only installed, or not even that)."""
    root = copy_tree(fixture_root("kpro6"), tmp_path / "root")
    unit = root / UNIT
    text = unit.read_text()
    assert " --tp 8 " in text
    unit.write_text(text.replace(" --tp 8 ", f" --tp {tp} "))
    if enabled:
        enable(root, "sglang-qwen.service")
    elif not installed:
        unit.unlink()
    return root


def enable(root: Path, name: str, target: str | None = None) -> None:
    link = root / UNITS / "multi-user.target.wants" / name
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target or f"/etc/systemd/system/{name}")


def write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def spec() -> Spec:
    return parse_spec(NO_SERVING)


def planned(root: Path, text: str = NO_SERVING) -> Plan:
    one = parse_spec(text)
    return plan(discover_for(one, root), one)


def refused(root: Path, text: str = NO_SERVING) -> list[Diagnostic]:
    with pytest.raises(PlanError) as err:
        planned(root, text)
    return [p for p in err.value.problems if p.code in OWN_CODES]


def codes(result: Plan) -> set[str]:
    return {f.code for f in result.findings if f.code in OWN_CODES}


# ------------------------------------------------------------------ the fixture variant


def test_enabled_tp8_unit_on_four_gpus_is_refused(tmp_path: Path) -> None:
    """The reference deployment's failure without [serving]: refused, the unit named."""
    (problem,) = refused(host(tmp_path))
    assert problem.code == "container-unit-needs-gpus"
    assert problem.subject == UNIT
    assert "sglang-qwen.service is enabled in CT 129" in problem.message
    assert "`--tp 8`: 8 GPUs" in problem.message
    assert "CT 129 has 4 GPUs (pool sglang)" in problem.message
    assert "again and again" in problem.message  # Restart=on-failure
    # Every way out, each one step.
    assert '[pools.lxc.serving] to pool sglang with unit = "sglang-qwen"' in problem.fix
    assert "/etc/systemd/system/sglang-qwen.service in CT 129: `--tp 8` -> `--tp 4`" in (
        problem.fix
    )
    assert "pct exec 129 -- systemctl disable sglang-qwen.service" in problem.fix


def test_tp4_unit_fits(tmp_path: Path) -> None:
    result = planned(host(tmp_path, tp="4"))
    assert codes(result) == set()


def test_unit_not_enabled_is_mentioned_not_refused(tmp_path: Path) -> None:
    """Installed, not enabled: it does not start with the container, so no refusal; but
    `systemctl start` would fail it on the 4 GPUs left, so a warning names the unit file,
    what it asks for, what the container keeps and the fix."""
    result = planned(host(tmp_path, enabled=False))
    (finding,) = [f for f in result.findings if f.code in OWN_CODES]
    assert (finding.code, finding.subject) == (IDLE, UNIT)
    assert "sglang-qwen.service is installed in CT 129 but not enabled" in finding.message
    assert "runs SGLang with `--tp 8`: 8 GPUs" in finding.message
    assert "after the plan CT 129 has 4 GPUs (pool sglang)" in finding.message
    assert "systemctl start sglang-qwen.service" in finding.message
    assert "edit /etc/systemd/system/sglang-qwen.service in CT 129: `--tp 8` -> `--tp 4`" in (
        finding.message
    )
    assert '[pools.lxc.serving] to pool sglang with unit = "sglang-qwen"' in finding.message
    assert (
        "pct exec 129 -- sh -c 'rm /etc/systemd/system/sglang-qwen.service && systemctl "
        "daemon-reload'"
    ) in finding.message
    assert "systemctl disable" not in finding.message


def test_unit_not_enabled_that_fits_says_nothing(tmp_path: Path) -> None:
    assert codes(planned(host(tmp_path, enabled=False, tp="4"))) == set()


def test_unit_not_enabled_with_a_dropin_is_judged_as_merged(tmp_path: Path) -> None:
    """A drop-in of the idle unit sets the size: the drop-in is the file named."""
    root = host(tmp_path, enabled=False, tp="4")
    dropin = f"{UNIT}.d/override.conf"
    write(
        root,
        dropin,
        "[Service]\nExecStart=\nExecStart=/root/ml-env/bin/python3 -m sglang.launch_server "
        "--model-path /m --tp-size=8\n",
    )
    (finding,) = [f for f in planned(root).findings if f.code in OWN_CODES]
    assert (finding.code, finding.subject) == (IDLE, dropin)


def test_an_alias_of_an_enabled_unit_is_that_unit(tmp_path: Path) -> None:
    """`Alias=llm.service` links /etc's llm.service to the enabled unit: refused once, as
    the enabled unit, and the alias is not read as another, idle one."""
    root = host(tmp_path)
    (root / UNITS / "llm.service").symlink_to("/etc/systemd/system/sglang-qwen.service")
    assert [p.code for p in refused(root)] == ["container-unit-needs-gpus"]
    result = discover_for(spec(), root)
    assert result.file(f"{UNITS}/llm.service") is None


def test_enabled_units_are_read_before_idle_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The budget goes to what starts by itself first: with room for two files, the
    enabled unit (its link and its file) is read and the idle one is not."""
    root = host(tmp_path)
    write(root, f"{UNITS}/aaa.service", "[Service]\nExecStart=/usr/bin/vllm serve m -tp 8\n")
    monkeypatch.setattr(container_units, "MAX_UNIT_FILES", 2)
    facts = discover_for(spec(), root)
    assert facts.file(UNIT) is not None
    assert facts.file(f"{UNITS}/aaa.service") is None


def test_reference_examples_read_only_the_idle_unit_of_ct_129() -> None:
    """examples/ on the committed fixtures: CT 129 on kpro6 has no enabled unit but the
    `--tp 8` sglang-qwen.service installed: that one file is read, for the serving pools
    (kpro6, kpro6-raw: a server enabled there besides the one pvegpu renders would be
    refused; this one is the rendered unit's namesake, and not enabled) and for
    cluster.toml's pool without serving, whose plan mentions it (test_cluster's golden
    summary shows the warning). The other examples' containers have no unit directory."""
    kpro6 = example_plan("kpro6")
    assert codes(kpro6) == set()
    assert container_units.unit_containers(kpro6.spec, kpro6.facts) == (129,)
    runs = [
        (n, EXAMPLE_HOSTS.get(n, n), example_spec(n))
        for n in ("kpro6", "kpro6-raw", "workstation", "mixed")
    ]
    cluster = example_spec("cluster")
    runs += [("cluster", node, cluster.for_node(node)) for node in cluster.nodes]
    for name, node, one in runs:
        reader = RootReader(fixture_root(node))
        facts = read_host(reader)
        read = container_units.read_container_units(reader, one, facts)
        expected = [UNIT] if node == "kpro6" else []
        assert [f.path for f in read.files] == expected, name
    # cluster.toml's pool without serving: CT 129 is looked at, and has no enabled unit.
    assert container_units.unit_containers(cluster.for_node("kpro6"), host_facts("kpro6")) == (129,)
    one = cluster.for_node("kpro6")
    result = plan(discover_for(one, fixture_root("kpro6")), one)
    assert [(f.code, f.subject) for f in result.findings if f.code in OWN_CODES] == [(IDLE, UNIT)]


SERVING = (Path(__file__).resolve().parent.parent / "examples" / "kpro6.toml").read_text()
SECOND = "container-unit-second-server"
VLLM_UNIT = """\
[Unit]
Description=vLLM
[Service]
ExecStart=/root/venv/bin/vllm serve /shared/models/Qwen3.5-122B-A10B --tensor-parallel-size 4
Restart=always
[Install]
WantedBy=multi-user.target
"""


def _second(root: Path) -> list[Diagnostic]:
    with pytest.raises(PlanError) as err:
        planned(root, SERVING)
    return [p for p in err.value.problems if p.code == SECOND]


def test_another_engine_enabled_next_to_the_rendered_server_is_refused(tmp_path: Path) -> None:
    """CT 129 gets sglang-qwen.service rendered; vllm.service enabled there too would
    start next to it on the same four GPUs: refused, naming it, with the fix."""
    root = host(tmp_path, enabled=False)
    write(root, f"{UNITS}/vllm.service", VLLM_UNIT)
    enable(root, "vllm.service")
    (problem,) = _second(root)
    assert problem.subject == f"{UNITS}/vllm.service"
    assert problem.message == (
        "vllm.service is enabled in CT 129 and runs vLLM; the plan renders "
        "sglang-qwen.service for pool sglang's 4 GPUs in the same container, and both start "
        "with it: the second server finds the GPUs' memory taken and fails at every start "
        "and systemd starts it again and again"
    )
    fix = "disable it (pct exec 129 -- systemctl disable --now vllm.service)"
    assert problem.fix.startswith(fix)


def test_an_older_unit_name_enabled_next_to_the_rendered_server_is_refused(
    tmp_path: Path,
) -> None:
    """The old unit under another name (sglang-old.service), still enabled."""
    root = host(tmp_path, enabled=False)
    old = (root / UNIT).read_text()
    write(root, f"{UNITS}/sglang-old.service", old)
    enable(root, "sglang-old.service")
    (problem,) = _second(root)
    assert problem.subject == f"{UNITS}/sglang-old.service"
    assert 'set unit = "sglang-old" in [pools.lxc.serving]' in problem.fix


def test_the_rendered_units_namesake_and_idle_or_serverless_units_pass(tmp_path: Path) -> None:
    """The enabled sglang-qwen.service is the unit pvegpu rewrites; an installed, not
    enabled vllm.service does not start; an enabled unit that runs no server is not one."""
    root = host(tmp_path)
    write(root, f"{UNITS}/vllm.service", VLLM_UNIT)
    write(root, f"{UNITS}/backup.service", "[Service]\nExecStart=/usr/bin/restic backup /root\n")
    enable(root, "backup.service")
    result = planned(root, SERVING)
    assert SECOND not in {f.code for f in result.findings}


def test_serving_pool_is_left_to_the_renderer(tmp_path: Path) -> None:
    """With [serving] on the same host, the enabled `--tp 8` unit is rewritten instead."""
    root = host(tmp_path)
    text = (Path(__file__).resolve().parent.parent / "examples" / "kpro6.toml").read_text()
    result = planned(root, text)
    assert codes(result) == set()


def test_dropin_sets_the_command(tmp_path: Path) -> None:
    """The unit says --tp 4; a drop-in replaces ExecStart with --tp 8: the drop-in is named."""
    root = host(tmp_path, tp="4")
    dropin = f"{UNIT}.d/override.conf"
    write(
        root,
        dropin,
        "[Service]\nExecStart=\nExecStart=/root/ml-env/bin/python3 -m sglang.launch_server "
        "--model-path /m --tp-size=8\n",
    )
    (problem,) = refused(root)
    assert problem.subject == dropin
    assert "`--tp-size=8` -> `--tp-size=4`" in problem.fix
    assert "edit /etc/systemd/system/sglang-qwen.service.d/override.conf" in problem.fix


def test_masked_unit_runs_nothing(tmp_path: Path) -> None:
    """Enabled, then masked (/etc's name linked to /dev/null): systemd starts nothing."""
    root = host(tmp_path, enabled=False)
    vendor = "/lib/systemd/system/sglang-qwen.service"
    write(root, f"{CT}{vendor}", (root / UNIT).read_text())
    (root / UNIT).unlink()
    enable(root, "sglang-qwen.service", vendor)
    # Enabled from /lib (no /etc copy): what the link names is the unit.
    assert [p.code for p in refused(root)] == ["container-unit-needs-gpus"]
    (root / UNIT).symlink_to("/dev/null")
    assert codes(planned(root)) == set()


def test_link_is_resolved_inside_the_container(tmp_path: Path) -> None:
    """An absolute link target is the container's path: a host unit of the same path is
    never read as the container's."""
    root = host(tmp_path, enabled=False, installed=False)
    host_unit = "etc/systemd/system/vllm.service"
    write(root, host_unit, "[Service]\nExecStart=/usr/bin/vllm serve m -tp 8\n")
    enable(root, "vllm.service")  # -> /etc/systemd/system/vllm.service, not in CT 129
    result = planned(root)
    assert codes(result) == set()
    assert not any(
        f.path == f"{UNITS}/multi-user.target.wants/vllm.service" for f in result.facts.files
    )
    # The same unit inside the container is read, through a relative link too.
    write(root, f"{CT}/lib/systemd/system/vllm.service", (root / host_unit).read_text())
    (root / UNITS / "multi-user.target.wants/vllm.service").unlink()
    enable(root, "vllm.service", "../../../../lib/systemd/system/vllm.service")
    (problem,) = refused(root)
    assert problem.subject == f"{UNITS}/multi-user.target.wants/vllm.service"
    assert "runs vLLM with `-tp 8`" in problem.message
    # No [serving] fix for a server pvegpu does not render.
    assert "[pools.lxc.serving]" not in problem.fix
    assert "systemctl edit --full vllm.service): `-tp 8` -> `-tp 4`" in problem.fix


def on_lvm(root: Path) -> Path:
    """CT 129's root file system moved to an lvmthin volume: a block device on the host."""
    conf = root / "etc/pve/nodes/kpro6/lxc/129.conf"
    conf.write_text(
        conf.read_text().replace("local-zfs:subvol-129-disk-0", "local-lvm:vm-129-disk-0")
    )
    storage = root / "etc/pve/storage.cfg"
    storage.write_text(
        storage.read_text() + "\nlvmthin: local-lvm\n\tthinpool data\n\tvgname pve\n"
    )
    return root


def test_block_storage_is_a_warning(tmp_path: Path) -> None:
    """lvmthin: nothing readable from the host; the container loses GPUs: say so."""
    result = planned(on_lvm(host(tmp_path)))
    (finding,) = (f for f in result.findings if f.code in OWN_CODES)
    assert finding.code == "container-units-unchecked"
    assert finding.subject == "etc/pve/lxc/129.conf"
    assert "local-lvm is lvmthin storage" in finding.message
    assert "CT 129 has 4 GPUs" in finding.message
    assert "`pct mount 129` (pvegpu then reads /var/lib/lxc/129/rootfs)" in finding.message


def test_block_storage_mounted_by_pct_mount_is_judged(tmp_path: Path) -> None:
    """The same container after `pct mount 129`: its files are at /var/lib/lxc/129/rootfs,
    where discovery reads the units, and the enabled `--tp 8` unit is refused as on ZFS."""
    root = on_lvm(host(tmp_path))
    mounted = root / "var/lib/lxc/129/rootfs"
    mounted.parent.mkdir(parents=True)
    (root / CT).rename(mounted)
    (problem,) = refused(root)
    assert problem.code == "container-unit-needs-gpus"
    assert problem.subject == "var/lib/lxc/129/rootfs/etc/systemd/system/sglang-qwen.service"
    assert "/etc/systemd/system/sglang-qwen.service in CT 129: `--tp 8` -> `--tp 4`" in (
        problem.fix
    )


def test_other_container_losing_gpus(tmp_path: Path) -> None:
    """CT 130 holds two of NUMA 1's GPUs, which go to vfio-pci: its enabled vLLM unit
    with TP 2 keeps none. Refused; the fix has no [serving] way (not a pool's container)
    and no edit (no GPU is left to run on)."""
    root = host(tmp_path, enabled=False)
    lxc = root / "etc/pve/nodes/kpro6/lxc"
    base = (lxc / "129.conf").read_text().split("\n[")[0]
    keep = [line for line in base.splitlines() if not line.startswith("dev")]
    rootfs = "rootfs: local-zfs:subvol-129-disk-0,size=200G"

    def container(vmid: int, minors: list[int]) -> None:
        lines = [
            line.replace(rootfs, f"rootfs: local-zfs:subvol-{vmid}-disk-0,size=8G") for line in keep
        ]
        lines = [line for line in lines if not line.startswith("parent:")]
        devs = [f"dev{i}: /dev/nvidia{m},mode=0666" for i, m in enumerate(minors)]
        (lxc / f"{vmid}.conf").write_text("\n".join([*devs, *lines]) + "\n")

    container(130, [4, 5])
    ct130 = "rpool/data/subvol-130-disk-0/etc/systemd/system"
    write(
        root,
        f"{ct130}/vllm.service",
        "[Service]\nExecStart=/usr/bin/vllm serve m --tensor_parallel_size=2\n",
    )
    (root / ct130 / "multi-user.target.wants").mkdir(parents=True)
    (root / ct130 / "multi-user.target.wants/vllm.service").symlink_to("../vllm.service")
    (problem,) = refused(root)
    assert problem.subject == f"{ct130}/vllm.service"
    assert "CT 130 keeps 0 of its 2 GPUs" in problem.message
    assert problem.fix == (
        "disable it (pct exec 130 -- systemctl disable vllm.service); then run pvegpu again"
    )


def test_visible_devices_naming_gone_gpus_is_a_warning(tmp_path: Path) -> None:
    """--tp 4 fits the 4 GPUs left; CUDA_VISIBLE_DEVICES=0-7 still names 8: CUDA shows the
    first 4, so it runs; the stale list is a warning, not a refusal."""
    root = host(tmp_path, tp="4")
    write(
        root, f"{UNIT}.d/gpus.conf", "[Service]\nEnvironment=CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7\n"
    )
    result = planned(root)
    assert codes(result) == {"container-unit-visible-devices"}
    (finding,) = (f for f in result.findings if f.code == "container-unit-visible-devices")
    assert finding.subject == f"{UNIT}.d/gpus.conf"  # the file that sets it
    assert "Edit it to CUDA_VISIBLE_DEVICES=0,1,2,3" in finding.message


def test_visible_devices_that_hide_the_kept_gpus_refuse(tmp_path: Path) -> None:
    """CUDA_VISIBLE_DEVICES=4,5,6,7 with --tp 4: after the plan there is no device 4, so
    CUDA shows none; the fix lists the devices the container keeps."""
    root = host(tmp_path, tp="4")
    write(root, f"{UNIT}.d/gpus.conf", "[Service]\nEnvironment=CUDA_VISIBLE_DEVICES=4,5,6,7\n")
    (problem,) = refused(root)
    assert "shows it 0 of them" in problem.message
    assert "CUDA_VISIBLE_DEVICES=0,1,2,3" in problem.fix


def test_size_from_an_environment_file_is_unknown(tmp_path: Path) -> None:
    root = host(tmp_path)
    unit = root / UNIT
    unit.write_text(
        unit.read_text().replace("--tp 8", "--tp ${TP}") + "EnvironmentFile=/etc/sglang.env\n"
    )
    result = planned(root)
    assert codes(result) == {"container-unit-gpus-unknown"}
    # The same variable set in Environment= is expanded: refused again.
    unit.write_text(unit.read_text().replace("[Service]\n", "[Service]\nEnvironment=TP=8\n", 1))
    (problem,) = refused(root)
    assert "`--tp 8`" in problem.message


def test_unit_already_short_is_a_warning(tmp_path: Path) -> None:
    """--tp 16 does not fit the 8 GPUs CT 129 has now either: the plan breaks nothing."""
    result = planned(host(tmp_path, tp="16"))
    assert codes(result) == {"container-unit-short"}


def test_oversized_unit_is_not_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = host(tmp_path)
    monkeypatch.setattr(container_units, "MAX_UNIT_BYTES", 100)
    assert codes(planned(root)) == set()


def test_snapshot_plans_the_same_refusal(tmp_path: Path) -> None:
    """`pvegpu snapshot --spec` archives the enabled unit and its link: planned from the
    archive elsewhere, the same refusal."""
    root = host(tmp_path)
    result = snapshot(root, tmp_path / "s.tar.gz", spec(), installed_files)
    assert result.error is None
    unpacked = unpack(result.path, tmp_path / "unpacked")
    assert (unpacked / WANTS).is_symlink()
    assert refused(unpacked) == refused(root)
    assert result.facts == discover_for(spec(), unpacked)


# ------------------------------------------------------------------ the parser


def demand(exec_start: str, extra: str = "") -> tuple[int | None, ...]:
    unit = parse_unit(f"[Service]\n{extra}ExecStart={exec_start}\n")
    return tuple(s.gpus for s in unit_demand(unit).servers)


@pytest.mark.parametrize(
    ("exec_start", "gpus"),
    [
        ("/v/bin/python -m sglang.launch_server --model-path m --tp 8", (8,)),
        ("python3 -m sglang.launch_server --tensor-parallel-size=2 --pp-size 2", (4,)),
        ("sglang serve --model-path m --tp 2 --dp 2", (4,)),
        ("python -m sglang.launch_server --tp 4 --dp 4 --enable-dp-attention", (4,)),
        ("python -m sglang.launch_server --tp 2 --base-gpu-id 2", (4,)),
        ("python -m sglang.launch_server --tp 8 --nnodes 2", (4,)),
        ("python -m sglang.launch_server --model-path m", (1,)),
        ("python -m sglang.launch_server --tp 8 --tp 2", (2,)),  # argparse: the last wins
        ("/usr/local/bin/vllm serve m -tp 2 --pipeline-parallel-size 2", (4,)),
        ("python -m vllm.entrypoints.openai.api_server --tensor_parallel_size 4", (4,)),
        ("vllm serve m -tp 2 -dp 2", (4,)),
        # vLLM's world size is PP x TP x PCP; DCP reuses the TP ranks (vllm/config/parallel.py).
        ("vllm serve m -tp 2 -pcp 2", (4,)),
        ("vllm serve m --tensor-parallel-size 2 --prefill-context-parallel-size=2 -pp 2", (8,)),
        ("vllm serve m -tp 4 -dcp 2", (4,)),
        ("vllm serve m -tp 2 -pcp 2 -dcp 4 -dp 2", (8,)),
        # SGLang: attention DP runs inside the TP group; plain DP replicates it.
        ("python -m sglang.launch_server --tp 4 --attn-dp-size 4", (4,)),
        ("python -m sglang.launch_server --tp 4 --dp-size 2", (8,)),
        (
            "/bin/bash -lc 'source /v/bin/activate && exec python -m sglang.launch_server --tp 8'",
            (8,),
        ),
        ("/usr/bin/env NCCL_DEBUG=WARN python -m sglang.launch_server --tp 2", (2,)),
        ("python -m sglang.launch_server --tp ${N}", (None,)),
        ("python -m sglang.launch_server --config /etc/s.yaml", (None,)),
        ("/usr/bin/llama-server -m model.gguf -ngl 99", ()),
    ],
)
def test_parallel_size(exec_start: str, gpus: tuple[int | None, ...]) -> None:
    assert demand(exec_start) == gpus


def test_variables_from_environment() -> None:
    assert demand("python -m sglang.launch_server --tp ${TP}", "Environment=TP=8\n") == (8,)
    assert demand("python -m sglang.launch_server $ARGS", 'Environment="ARGS=--tp 2"\n') == (2,)


def test_visible_devices() -> None:
    unit = parse_unit(
        "[Service]\nEnvironment=CUDA_VISIBLE_DEVICES=1,0\n"
        "ExecStart=/usr/bin/env CUDA_VISIBLE_DEVICES=0,1,2,3 python -m sglang.launch_server\n"
    )
    found = unit_demand(unit)
    assert found.visible == ("1", "0")
    assert found.servers[0].visible == ("0", "1", "2", "3")  # the command's own wins
    assert visible_count(("0", "1", "2", "3", "4", "5", "6", "7"), 4) == 4
    assert visible_count(("4", "5", "0"), 4) == 0  # CUDA stops at the first missing one
    assert visible_count((), 4) == 0
    assert visible_count(("GPU-1234",), 4) is None
    assert visible_count(None, 4) is None
