#!/usr/bin/python
# -*- coding: utf-8 -*-

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_snapshot
short_description: Archive what pvegpu reads of a Proxmox VE node, to plan it elsewhere
description:
  - Writes C(pvegpu snapshot) of the node to O(dest) on the node; fetch it to the
    controller (M(ansible.builtin.fetch)) and plan every node there at once with
    M(pvegpu.proxmox.gpu_cluster_plan).
  - With a spec, the archive also holds the files the node's servers are planned from
    (the container's files the spec reads). Secret values are archived as REDACTED.
  - The archive is a reading of the node, not a change of it, so the task is never
    changed, and it runs in check mode too (a check-mode plan is made from it).
version_added: 0.1.0
author:
  - pvegpu developers (!UNKNOWN)
requirements:
  - pvegpu on the node, from its Debian package or in a venv named by ansible_python_interpreter
options:
  dest:
    description:
      - The archive (.tar.gz) to write on the node.
    type: path
    required: true
  root:
    description:
      - The node's root to read (V(/) on the node itself).
    type: path
    default: /
  spec:
    description:
      - The split spec (a path on the controller, read there by the action plugin, or
        an inline mapping). A cluster spec is narrowed to O(node)'s pools.
    type: raw
  spec_content:
    description:
      - The spec's TOML text. The action plugin sets it from a path in O(spec).
    type: str
  spec_name:
    description:
      - The spec's name in problems.
    type: str
    default: spec.toml
  node:
    description:
      - The node this is, in a spec that plans several (usually C(inventory_hostname)).
    type: str
attributes:
  check_mode:
    description: It reads the node and writes only the archive.
    support: full
  diff_mode:
    description: Nothing to show.
    support: none
seealso:
  - module: pvegpu.proxmox.gpu_cluster_plan
"""

EXAMPLES = r"""
- name: Snapshot the node
  pvegpu.proxmox.gpu_snapshot:
    spec: cluster.toml
    node: "{{ inventory_hostname }}"
    dest: /var/tmp/pvegpu-snapshot.tar.gz
"""

RETURN = r"""
dest:
  description: The archive written.
  returned: success
  type: str
entries:
  description: How many files and directories the archive holds.
  returned: success
  type: int
redacted:
  description: Archived files whose secret values were replaced by REDACTED.
  returned: success
  type: list
  elements: str
problems:
  description: Why pvegpu refused (code, subject, message, fix, line).
  returned: failure
  type: list
  elements: dict
"""

import traceback

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.pvegpu.proxmox.plugins.module_utils.pvegpu_node import (
    fail_problems,
    require_pvegpu,
    task_spec,
)

try:
    from pvegpu.engines import installed_files
    from pvegpu.diagnostic import Diagnostic
    from pvegpu.errors import PvegpuError, SpecError
    from pvegpu.host.snapshot import snapshot
except ImportError:
    PVEGPU_ERROR = traceback.format_exc()
else:
    PVEGPU_ERROR = None


def _spec(module):
    params = module.params
    if params["spec"] is None and params["spec_content"] is None:
        return None
    spec = task_spec(params)
    if not spec.nodes:
        return spec
    if params["node"] not in spec.node_names:
        raise SpecError(
            [
                Diagnostic.error(
                    "node-not-in-spec",
                    str(params["node"]),
                    "the spec plans several nodes and this is none of them: " + ", ".join(spec.node_names),
                    "pass node: the node's name in the spec's nodes (usually inventory_hostname)",
                )
            ]
        )
    return spec.for_node(params["node"])


def main():
    module = AnsibleModule(
        argument_spec=dict(
            dest=dict(type="path", required=True),
            root=dict(type="path", default="/"),
            spec=dict(type="raw"),
            spec_content=dict(type="str"),
            spec_name=dict(type="str", default="spec.toml"),
            node=dict(type="str"),
        ),
        mutually_exclusive=[("spec", "spec_content")],
        supports_check_mode=True,
    )
    require_pvegpu(module, PVEGPU_ERROR)
    try:
        from pathlib import Path

        spec = _spec(module)
        taken = snapshot(Path(module.params["root"]), Path(module.params["dest"]), spec, installed_files)
        if taken.error is not None:
            raise taken.error
    except PvegpuError as err:
        fail_problems(module, err)
    module.exit_json(changed=False, dest=str(taken.path), entries=taken.entries, redacted=list(taken.redacted))


if __name__ == "__main__":
    main()
