# -*- coding: utf-8 -*-
"""The controller's side of pvegpu.proxmox's modules: a spec (or a rendered bundle) given
as a path is a file on the controller, so it is read here and handed to the module on
the node as its content. Everything else is the module's, on the node."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.text.converters import to_text
from ansible.plugins.action import ActionBase

MAX_SPEC_BYTES = 1 << 20
"""A spec is a few KiB: anything this large is not one."""


def _read(path, what):
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_SPEC_BYTES + 1)
    except (IOError, OSError) as err:
        raise AnsibleActionFail("%s %s cannot be read on the controller: %s" % (what, path, err))
    if len(data) > MAX_SPEC_BYTES:
        raise AnsibleActionFail("%s %s is larger than %d bytes" % (what, path, MAX_SPEC_BYTES))
    return to_text(data, errors="surrogate_or_strict")


def _bundle(directory):
    """A directory `pvegpu render --out` wrote, as the module's bundle files."""
    if not os.path.isfile(os.path.join(directory, "MANIFEST.json")):
        raise AnsibleActionFail("bundle %s has no MANIFEST.json: pass a directory pvegpu render wrote" % directory)
    files = {}
    for top, dirs, names in os.walk(directory):
        dirs.sort()
        for name in sorted(names):
            path = os.path.join(top, name)
            rel = os.path.relpath(path, directory).replace(os.sep, "/")
            files[rel] = {"content": _read(path, "bundle file"), "mode": os.stat(path).st_mode & 0o7777}
    return files


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        args = dict(self._task.args)
        spec = args.get("spec")
        if isinstance(spec, str):
            path = self._loader.path_dwim(spec)
            args["spec_content"] = _read(path, "spec")
            args.setdefault("spec_name", spec)
            del args["spec"]
        if isinstance(args.get("bundle"), str):
            args["bundle"] = _bundle(self._loader.path_dwim(args["bundle"]))
        action = getattr(self._task, "resolved_action", None) or self._task.action
        result.update(self._execute_module(module_name=action, module_args=args, task_vars=task_vars))
        return result
