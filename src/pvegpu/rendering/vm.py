"""etc/pve/qemu-server/<vmid>.conf of every VM pool: hostpci lines over the pool's PCI
mapping and the NUMA pin plan() decided; a review snippet for a VM not created yet.

Nothing here refuses: plan() ran the patch's own checks on the existing file, and that
the machine is not q35 is a finding of the plan.
"""

from __future__ import annotations

from pvegpu.model.artifact import REVIEW, Artifact
from pvegpu.model.paths import PVE_MODE
from pvegpu.model.plan import Plan, VmGuest
from pvegpu.pvefiles import qemuconf

SNIPPET_DIR = "snippets/qemu-server"
"""Review-only lines for VMs that do not exist yet: pvegpu never writes a guest config
that Proxmox did not create, and /etc/pve is no place for side files."""


def _span(indices: tuple[int, ...]) -> str:
    return ", ".join(f"hostpci{i}" for i in indices)


def render_vm_configs(plan: Plan) -> tuple[Artifact, ...]:
    """Patched etc/pve/qemu-server/<vmid>.conf per VM pool, or a review snippet if absent."""
    node = plan.facts.node
    return tuple(_vm_config(node, pool.vm) for pool in plan.vfio_pools if pool.vm is not None)


def _vm_config(node: str, vm: VmGuest) -> Artifact:
    if vm.config is None:
        text = qemuconf.snippet(vm.vmid, vm.mapping_id, vm.count, vm.numa_pin, node, vm.mdev)
        return Artifact(
            f"{SNIPPET_DIR}/{vm.vmid}.conf",
            text,
            f"VM {vm.vmid} does not exist: lines to add once it is created (q35)",
            target=REVIEW,
        )
    patched = qemuconf.patch_hostpci(
        vm.config.content,
        vm.mapping_id,
        vm.count,
        pcie=vm.pcie,
        numa=vm.numa_pin,
        mapped=vm.mapped,
        old=vm.old_mappings,
        subject=vm.config_path,
        mdev=vm.mdev,
    )
    if patched.text == vm.config.content:
        reason = f"VM {vm.vmid} already uses mapping {vm.mapping_id} as planned"
        return Artifact(vm.config_path, patched.text, reason, PVE_MODE, base=vm.config)
    reason = f"VM {vm.vmid}: {_span(patched.indices)} use mapping {vm.mapping_id}"
    reason += ", pcie=1" if patched.pcie else ""
    if vm.mdev is not None:
        reason += f", vGPU type mdev={vm.mdev} (Proxmox sets it on a free VF at start)"
    if patched.converted:
        # A raw hostpci line disappears from the diff: say that it became the mapping.
        reason += (
            f"; raw host address of the pool's GPU on {_span(patched.converted)} "
            "replaced by the mapping, options kept"
        )
    for conversion in patched.conversions:
        if conversion.old_mapping is not None:
            # The diff shows only a changed id: say that the line followed the GPUs.
            reason += (
                f"; `{conversion.before}` converted to `{conversion.after}` (mapping "
                f"{conversion.old_mapping}, which the GPUs leave), options kept"
            )
    pin = vm.numa_pin
    if pin is not None:
        reason += f"; pinned to NUMA node {pin.hostnode} (numa0, affinity {pin.cpus})"
    return Artifact(vm.config_path, patched.text, reason, PVE_MODE, base=vm.config)
