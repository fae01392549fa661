#!/usr/bin/python
# -*- coding: utf-8 -*-

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_cluster_plan
short_description: Plan a Proxmox VE cluster's GPU split once, from every node's snapshot
description:
  - Plans every node of a pvegpu cluster spec from the snapshots M(pvegpu.proxmox.gpu_snapshot)
    took (fetched to where this runs, usually the controller with C(delegate_to) or a play on
    localhost), merges the cluster's one C(/etc/pve/mapping/pci.cfg), and returns each
    node's bundle for M(pvegpu.proxmox.gpu_split).
  - The cluster's pci.cfg is in one node's bundle only (RV(pci_cfg_node)), since pmxcfs
    shares C(/etc/pve) and one node writes it for the cluster. Apply that node first.
  - It reads the snapshots and writes nothing, so it is never changed and runs in check mode.
  - A refusal (a node without a snapshot, snapshots that disagree on pci.cfg, a node
    that cannot be planned) fails with every problem's code, subject, message and fix.
version_added: 0.1.0
author:
  - pvegpu developers (!UNKNOWN)
requirements:
  - pvegpu where the module runs
options:
  spec:
    description:
      - The cluster spec (a path read by the action plugin, or an inline mapping).
    type: raw
  spec_content:
    description:
      - The spec's TOML text. The action plugin sets it from a path in O(spec).
    type: str
  spec_name:
    description:
      - The spec's name in problems and in each bundle's MANIFEST.json.
    type: str
    default: spec.toml
  snapshots:
    description:
      - Each node's snapshot archive, by node name, as paths where the module runs.
    type: dict
    required: true
attributes:
  check_mode:
    description: It reads the snapshots and writes nothing, in check mode as in a run.
    support: full
  diff_mode:
    description: Nothing to show.
    support: none
seealso:
  - module: pvegpu.proxmox.gpu_snapshot
  - module: pvegpu.proxmox.gpu_split
"""

EXAMPLES = r"""
- name: Plan the cluster once
  pvegpu.proxmox.gpu_cluster_plan:
    spec: cluster.toml
    snapshots:
      kpro6: snapshots/kpro6.tar.gz
      kpro7: snapshots/kpro7.tar.gz
  register: pvegpu_cluster
"""

RETURN = r"""
nodes:
  description: The nodes planned, in the spec's order.
  returned: success
  type: list
  elements: str
pci_cfg_node:
  description: The node whose bundle writes the cluster's pci.cfg (none without mappings).
  returned: success
  type: str
order:
  description: The order to apply the nodes in, pci.cfg's writer first.
  returned: success
  type: list
  elements: str
bundles:
  description: Each node's bundle, path -> content and mode, for gpu_split's bundle option.
  returned: success
  type: dict
findings:
  description: Each node's findings, and the cluster's under C(cluster).
  returned: success
  type: dict
problems:
  description: Why pvegpu refused (code, subject, message, fix, line).
  returned: failure
  type: list
  elements: dict
"""

import shutil
import tarfile
import tempfile
import traceback

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.pvegpu.proxmox.plugins.module_utils.pvegpu_node import (
    fail_problems,
    require_pvegpu,
    task_spec,
    warn_findings,
)

try:
    from pvegpu.diagnostic import Diagnostic
    from pvegpu.errors import PlanError, PvegpuError
    from pvegpu.host.snapshot import unpack
    from pvegpu.pipeline import discover_cluster, render_cluster_bundles
    from pvegpu.planning.cluster import root_problems
except ImportError:
    PVEGPU_ERROR = traceback.format_exc()
else:
    PVEGPU_ERROR = None


def _plan(module, spec, unpacked):
    from pathlib import Path

    archives = module.params["snapshots"]
    problems = list(root_problems(spec, archives))
    if problems:
        raise PlanError(problems)
    roots = {}
    for node, archive in archives.items():
        try:
            roots[node] = unpack(Path(archive), Path(unpacked) / node)
        except (OSError, tarfile.TarError) as err:
            problems.append(
                Diagnostic.error(
                    "snapshot-unreadable",
                    str(archive),
                    "is not a snapshot that can be unpacked: %s" % err,
                    "take the node's snapshot again (pvegpu.proxmox.gpu_snapshot) and fetch it",
                )
            )
    if problems:
        raise PlanError(problems)
    cluster, bundles = render_cluster_bundles(discover_cluster(spec, roots), spec, module.params["spec_name"])
    writer = None if cluster.shared is None else cluster.shared.writer
    findings = dict((node, [f.document() for f in cluster.plan_of(node).findings]) for node in cluster.nodes)
    findings["cluster"] = [f.document() for f in cluster.findings]
    # Each node's own findings are warned by gpu_split on that node; the cluster's here.
    warn_findings(module, findings["cluster"])
    return dict(
        changed=False,
        nodes=list(cluster.nodes),
        pci_cfg_node=writer,
        order=[n for n in cluster.nodes if n == writer] + [n for n in cluster.nodes if n != writer],
        bundles=dict(
            (node, dict((rel, dict(content=content, mode=mode)) for rel, (content, mode) in files.items()))
            for node, files in bundles.items()
        ),
        findings=findings,
    )


def main():
    module = AnsibleModule(
        argument_spec=dict(
            spec=dict(type="raw"),
            spec_content=dict(type="str"),
            spec_name=dict(type="str", default="spec.toml"),
            snapshots=dict(type="dict", required=True),
        ),
        mutually_exclusive=[("spec", "spec_content")],
        required_one_of=[("spec", "spec_content")],
        supports_check_mode=True,
    )
    require_pvegpu(module, PVEGPU_ERROR)
    unpacked = tempfile.mkdtemp(prefix="pvegpu-cluster-")
    try:
        result = _plan(module, task_spec(module.params), unpacked)
    except PvegpuError as err:
        fail_problems(module, err)
    finally:
        shutil.rmtree(unpacked, ignore_errors=True)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
