"""Text formats that know no Proxmox file and no vendor: shell quoting (`shell`) and the
Jinja2 templates every artifact is filled from (`templating`).

Below the engines and rendering, which both fill templates; `templating` imports jinja2,
so only a command that renders imports it (`pvegpu --help` does not).
"""
