#!/usr/bin/python
# -*- coding: utf-8 -*-

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_split
short_description: Apply a pvegpu GPU split to a Proxmox VE node, or revert it
description:
  - Plans and renders the node's bundle from a pvegpu split spec (or takes the bundle the
    cluster was planned into by M(pvegpu.proxmox.gpu_cluster_plan)), compares it with the
    node, and applies it with pvegpu's own apply (preflight, locked writes, journal,
    verification).
  - C(state=absent) reverts the last apply from the journal pvegpu keeps on the node.
  - Check mode plans and renders and changes nothing. Diff mode returns one before/after
    per file that changes (secret values blanked) and one for the PCI functions that
    change drivers.
  - The task is changed exactly when a file or a driver binding changes.
  - The plan's warnings are Ansible warnings; all its findings are in RV(findings).
    A refusal fails the task with every problem's code, subject, message and fix.
  - pvegpu must be importable by the node's Python; the module says how to install it
    when it is not.
version_added: 0.1.0
author:
  - pvegpu developers (!UNKNOWN)
requirements:
  - pvegpu on the node, from its Debian package or in a venv named by ansible_python_interpreter
options:
  spec:
    description:
      - The split spec, a single node's. A path on the controller to its TOML file (read
        there by the action plugin), or the spec inline as a mapping.
      - Exclusive with O(spec_content) and O(bundle).
    type: raw
  spec_content:
    description:
      - The spec's TOML text. The action plugin sets it from a path in O(spec).
    type: str
  spec_name:
    description:
      - The spec's name in problems and in the bundle's MANIFEST.json.
    type: str
    default: spec.toml
  bundle:
    description:
      - An already rendered bundle, as files (path -> V(content) and V(mode)), as
        M(pvegpu.proxmox.gpu_cluster_plan) returns each node's. A path on the controller
        to a directory C(pvegpu render --out) wrote is read there by the action plugin.
    type: raw
  root:
    description:
      - The node's root. Only V(/) is changed; any other root is read (check mode) and
        refused for a change (C(apply-not-live)).
    type: path
    default: /
  state:
    description:
      - V(present) applies the split; V(absent) reverts the last apply on the node.
    type: str
    choices: [present, absent]
    default: present
  bundle_dir:
    description:
      - Where on the node (under O(root)) the applied bundle is kept, for
        C(pvegpu check --bundle) and its revert/revert.sh.
    type: path
    default: /var/lib/pvegpu/bundle
attributes:
  check_mode:
    description: Plans and renders, compares with the node, and changes nothing.
    support: full
  diff_mode:
    description: One before/after per file that changes, and one for the drivers.
    support: full
notes:
  - One apply or revert runs on a node at a time (pvegpu's node lock); run the play with
    C(serial), the node that writes the cluster's pci.cfg first.
seealso:
  - module: pvegpu.proxmox.gpu_snapshot
  - module: pvegpu.proxmox.gpu_cluster_plan
"""

EXAMPLES = r"""
- name: Split the node's GPUs as its spec says
  pvegpu.proxmox.gpu_split:
    spec: files/kpro6.toml

- name: Apply the bundle the cluster plan made for this node
  pvegpu.proxmox.gpu_split:
    bundle: "{{ hostvars.localhost.pvegpu_cluster.bundles[inventory_hostname] }}"

- name: Undo the last apply
  pvegpu.proxmox.gpu_split:
    state: absent
"""

RETURN = r"""
bundle_id:
  description: The bundle's id (its state directory on the node), or the reverted one's.
  returned: when there is a bundle
  type: str
  sample: e46a33baef16e4d2
files:
  description: The files that change (or changed), as the node names them.
  returned: always
  type: list
  elements: str
  sample: ["/etc/pve/lxc/129.conf", "CT 129:/etc/systemd/system/sglang-qwen.service"]
rebinds:
  description: The PCI functions that change drivers.
  returned: always
  type: list
  elements: dict
  sample: [{"address": "0000:81:00.0", "now": "nvidia", "after": "vfio-pci"}]
findings:
  description: The plan's findings (severity, code, subject, message).
  returned: when there is a bundle
  type: list
  elements: dict
log:
  description: What apply or revert said, step by step.
  returned: when it ran
  type: list
  elements: str
problems:
  description: Why pvegpu refused (code, subject, message, fix, line).
  returned: failure
  type: list
  elements: dict
"""

import traceback
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.pvegpu.proxmox.plugins.module_utils.pvegpu_node import (
    fail_problems,
    file_diffs,
    node_host,
    require_pvegpu,
    task_spec,
    warn_findings,
)

try:
    from pvegpu.apply.bundle import bundle_from_files
    from pvegpu.apply.pending import pending, revert_pending
    from pvegpu.apply.run import apply_bundle
    from pvegpu.apply.state import STATE_DIR
    from pvegpu.apply.undo import revert
    from pvegpu.diagnostic import Diagnostic
    from pvegpu.errors import BundleError, PvegpuError
    from pvegpu.pipeline import discover_for, render_bundle
    from pvegpu.rendering.bundle import write_bundle_files
except ImportError:
    PVEGPU_ERROR = traceback.format_exc()
else:
    PVEGPU_ERROR = None


def _files(module, host):
    """The bundle's files: given (from the cluster plan), or rendered here from the spec."""
    given = module.params["bundle"]
    if given is not None:
        try:
            return dict((str(rel), (str(f["content"]), int(f["mode"]))) for rel, f in given.items())
        except (AttributeError, KeyError, TypeError, ValueError):
            raise BundleError(
                [
                    Diagnostic.error(
                        "bundle-invalid",
                        "bundle",
                        "is not a bundle's files (path -> content and mode)",
                        "pass a node's bundle from gpu_cluster_plan, or a directory pvegpu render wrote",
                    )
                ]
            )
    spec = task_spec(module.params)
    # A cluster spec is refused by the planner (cluster-spec): gpu_cluster_plan plans it.
    return render_bundle(discover_for(spec, host.root), spec, module.params["spec_name"])[1]


def _present(module, host, say):
    files = _files(module, host)
    bundle = bundle_from_files(files)
    warn_findings(module, bundle.findings)
    todo = pending(host, bundle)
    result = dict(
        changed=todo.changed,
        bundle_id=bundle.id,
        files=[f.where for f in todo.files],
        rebinds=[dict(address=r.address, now=r.now, after=r.after) for r in todo.rebinds],
        findings=list(bundle.findings),
    )
    if module._diff:
        result["diff"] = file_diffs(todo.files, todo.rebinds)
    if not todo.changed or module.check_mode:
        return result
    journal = "%s/%s/journal.json" % (STATE_DIR, bundle.id)
    before = host.read(journal)
    try:
        apply_bundle(host, bundle, say)
    except PvegpuError as err:
        # Changed when this run journaled a step (it began changing the node).
        fail_problems(module, err, changed=host.read(journal) != before, **dict((k, v) for k, v in result.items() if k != "changed"))
    write_bundle_files(files, Path(host.root) / module.params["bundle_dir"].lstrip("/"))
    return result


def _absent(module, host, say):
    found = revert_pending(host)
    if found is None:
        return dict(changed=False, files=[], rebinds=[])
    bundle_id, files = found
    result = dict(changed=True, bundle_id=bundle_id, files=[f.where for f in files], rebinds=[])
    if module._diff:
        result["diff"] = file_diffs(files, ())
    if not module.check_mode:
        revert(host, say)
    return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            spec=dict(type="raw"),
            spec_content=dict(type="str"),
            spec_name=dict(type="str", default="spec.toml"),
            bundle=dict(type="raw"),
            root=dict(type="path", default="/"),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            bundle_dir=dict(type="path", default="/var/lib/pvegpu/bundle"),
        ),
        mutually_exclusive=[("spec", "spec_content", "bundle")],
        required_if=[("state", "present", ("spec", "spec_content", "bundle"), True)],
        supports_check_mode=True,
    )
    require_pvegpu(module, PVEGPU_ERROR)
    log = []
    try:
        host = node_host(module.params["root"])
        if module.params["state"] == "absent":
            result = _absent(module, host, log.append)
        else:
            result = _present(module, host, log.append)
    except PvegpuError as err:
        fail_problems(module, err, log=log)
    module.exit_json(log=log, **result)


if __name__ == "__main__":
    main()
