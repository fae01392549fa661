"""Proxmox VE file handling, pure functions on text: pci.cfg, LXC and VM configs.

Nothing here reads or writes files: callers pass the discovered content
(`HostFacts.file(...)`) and get new content back. docs/formats.md records the rules.
"""
