# -*- coding: utf-8 -*-
"""What the pvegpu.proxmox modules share: pvegpu found on the node (or how to install
it), the spec from the task, the host seam, and pvegpu's problems and findings said
the way Ansible says them. The modules call the library; none of this parses pvegpu's
command-line output."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import importlib
import os
import traceback

from ansible.module_utils.basic import missing_required_lib

PVEGPU_IMPORT_ERROR = None
try:
    from pvegpu.apply.host import LiveHost
    from pvegpu.diagnostic import Diagnostic
    from pvegpu.errors import SpecError
    from pvegpu.redact import redact_text
    from pvegpu.pipeline import parse_spec, spec_from_data
except ImportError:
    PVEGPU_IMPORT_ERROR = traceback.format_exc()

INSTALL = (
    "install pvegpu on this node: the Debian package (apt install ./pvegpu_VERSION_all.deb, "
    "built from the repository's debian/), or a venv (python3 -m venv /opt/pvegpu && "
    "/opt/pvegpu/bin/pip install pvegpu-VERSION-py3-none-any.whl), then point the node's "
    "ansible_python_interpreter at that Python (/usr/bin/python3 for the package, "
    "/opt/pvegpu/bin/python3 for the venv); docs/ansible.md"
)

TEST_HOST = "PVEGPU_ANSIBLE_TEST_HOST"
"""Tests only: `module:function` building the host from the root (docs/ansible.md)."""


def require_pvegpu(module, module_error=None):
    """Fail the task, saying how to install pvegpu, when this Python cannot import it
    (or what the module imports of it: `module_error`, its ImportError's traceback)."""
    error = PVEGPU_IMPORT_ERROR or module_error
    if error is not None:
        module.fail_json(
            msg=missing_required_lib("pvegpu") + ". To " + INSTALL,
            code="pvegpu-missing",
            fix=INSTALL,
            exception=error,
        )


def node_host(root):
    """The host the modules read and change: the real one, or a test's stand-in."""
    from pathlib import Path

    seam = os.environ.get(TEST_HOST)
    if seam:
        name, dummy, factory = seam.partition(":")
        return getattr(importlib.import_module(name), factory)(Path(root))
    return LiveHost(Path(root))


def task_spec(params):
    """The task's spec: TOML text (a controller file the action plugin read) or a dict."""
    if params.get("spec_content") is not None:
        return parse_spec(params["spec_content"], params["spec_name"])
    spec = params.get("spec")
    if isinstance(spec, dict):
        return spec_from_data(spec, params["spec_name"])
    raise SpecError(
        [
            Diagnostic.error(
                "spec-unreadable",
                "spec",
                "is neither a path on the controller nor an inline mapping",
                "give spec: PATH (a TOML file on the controller) or spec: {nodes: ..., pools: ...}",
            )
        ]
    )


def problem_documents(err):
    return [
        {"code": p.code, "subject": p.subject, "message": p.message, "fix": p.fix, "line": p.line}
        for p in err.problems
    ]


def fail_problems(module, err, **result):
    """A refusal: every problem with its code, subject, message and fix, nothing else done."""
    module.fail_json(
        msg="pvegpu refused: " + "; ".join(str(p).replace("\n ", "") for p in err.problems),
        problems=problem_documents(err),
        exit_code=err.exit_code,
        **result
    )


def warn_findings(module, findings):
    """The plan's findings a reviewer must see as Ansible warnings; info stays in the result."""
    for finding in findings:
        if finding["severity"] != "info":
            module.warn("{severity}: {subject}: {message} [{code}]".format(**finding))


def _text(content):
    return "" if content is None else redact_text(content.decode("utf-8", errors="replace"))


def file_diffs(files, rebinds):
    """One Ansible diff (before/after, secret values blanked) per file that changes, and
    one for the PCI functions that change drivers."""
    diffs = []
    for change in files:
        before_header = change.where if change.known else change.where + " (not readable now: its container is stopped)"
        diffs.append(
            {
                "before_header": before_header if change.before is not None or not change.known else change.where + " (absent)",
                "after_header": change.where if change.after is not None else change.where + " (removed)",
                "before": _text(change.before),
                "after": _text(change.after),
            }
        )
    if rebinds:
        diffs.append(
            {
                "before_header": "PCI drivers (sysfs)",
                "after_header": "PCI drivers (sysfs)",
                "before": "".join("%s %s\n" % (r.address, r.now or "(none)") for r in rebinds),
                "after": "".join("%s %s\n" % (r.address, r.after) for r in rebinds),
            }
        )
    return diffs


__all__ = [
    "INSTALL",
    "TEST_HOST",
    "fail_problems",
    "file_diffs",
    "node_host",
    "require_pvegpu",
    "task_spec",
    "warn_findings",
]
