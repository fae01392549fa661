"""An NVIDIA driver's userspace as its installer leaves it in the host root.

The `.run` installer (and Debian's packages, split over several) put each library as
`lib<name>.so.<version>` in the multiarch directory with a soname link (`libcuda.so.1`;
`libnvidia-nvvm.so.4`; none for libnvidia-gpucomp, whose soname is its full name) and,
for the libraries a build links against, a development link (`libcuda.so`), and the tools
in /usr/bin. The files hold a line of text, not code: discovery only lists and stats them.
"""

from __future__ import annotations

LIBDIR = "usr/lib/x86_64-linux-gnu"
BINDIR = "usr/bin"

# name -> its soname's suffix after `.so.` (None: the soname is the versioned name).
_LIBRARIES: dict[str, str | None] = {
    "libcuda": "1",
    "libcudadebugger": "1",
    "libnvidia-allocator": "1",
    "libnvidia-cfg": "1",
    "libnvidia-gpucomp": None,
    "libnvidia-ml": "1",
    "libnvidia-nvvm": "4",
    "libnvidia-opencl": "1",
    "libnvidia-ptxjitcompiler": "1",
}
_DEV_LINKS = ("libcuda", "libnvidia-ml", "libnvidia-cfg", "libnvidia-nvvm")
_TOOLS = (
    "nvidia-smi",
    "nvidia-debugdump",
    "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
    "nvidia-persistenced",
    "nvidia-modprobe",
)


def nvidia_userspace(version: str) -> tuple[dict[str, str], dict[str, str]]:
    """(files, symlinks) of driver `version`'s userspace, paths relative to the root."""
    files: dict[str, str] = {}
    links: dict[str, str] = {}
    for name, soname in _LIBRARIES.items():
        real = f"{name}.so.{version}"
        files[f"{LIBDIR}/{real}"] = f"{real}: NVIDIA driver userspace (fixture)\n"
        if soname is not None:
            links[f"{LIBDIR}/{name}.so.{soname}"] = real
            if name in _DEV_LINKS:
                links[f"{LIBDIR}/{name}.so"] = f"{name}.so.{soname}"
    for tool in _TOOLS:
        files[f"{BINDIR}/{tool}"] = f"#!/bin/sh\n# {tool} {version} (fixture)\n"
    return files, links
