"""One jinja2 environment for every renderer: strict, newline-preserving, no autoescape."""

from __future__ import annotations

from functools import cache
from typing import Any

import jinja2


@cache
def environment() -> jinja2.Environment:
    # StrictUndefined: a typo in a template is an error, never an empty string in a
    # config file. Autoescape off: these are shell, systemd and Proxmox files, not HTML.
    return jinja2.Environment(
        loader=jinja2.PackageLoader("pvegpu.templates", "."),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )


def render_template(name: str, **context: Any) -> str:
    return environment().get_template(name).render(**context)
