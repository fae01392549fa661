"""The root reader: containment, regular files only, the size cap, typed errors, the trace.

Every read under --root goes through pvegpu.host.reader; these tests pin its rules on
small trees, then show the serving inputs and `pvegpu plan`'s current files obey them.
"""

from __future__ import annotations

import os
import signal
import socket
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

import pytest

from pvegpu.cli.diffs import current as _current
from pvegpu.engines import installed_files
from pvegpu.errors import DiscoveryError
from pvegpu.host.listing import Listing
from pvegpu.host.reader import RootReader, Trace
from pvegpu.host.serving_files import read_serving_files
from pvegpu.model.artifact import Artifact
from pvegpu.model.schema import LxcSpec, PoolSpec, ServingSpec, Spec

SECRET = "outside the root\n"


def write(path: Path, data: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data)
    return path


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """An empty root with a file next to it (outside) that no read may reach."""
    write(tmp_path / "outside/secret", SECRET)
    (tmp_path / "root").mkdir()
    return tmp_path / "root"


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every path os.open is called with, from now on."""
    paths: list[str] = []
    real_open = os.open

    def recording_open(path: str, flags: int, mode: int = 0o777, **kw: object) -> int:
        paths.append(os.fspath(path))
        return real_open(path, flags, mode)

    monkeypatch.setattr(os, "open", recording_open)
    return paths


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Fail instead of hanging: opening a FIFO without a writer blocks forever."""

    def expire(signum: int, frame: FrameType | None) -> None:
        raise TimeoutError(f"still blocked after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def problem(call: Callable[[], object]) -> tuple[str, str]:
    with pytest.raises(DiscoveryError) as info:
        call()
    (found,) = info.value.problems
    assert found.fix
    return found.code, found.subject


# -- containment


def test_absolute_link_means_inside_the_root(root: Path) -> None:
    """`/x` in a link is root/x; the root's own `..` is the root (chroot semantics)."""
    write(root / "etc/real", "inside\n")
    (root / "etc/absolute").symlink_to("/etc/real")
    (root / "etc/climbing").symlink_to("../../../../../../etc/real")
    reader = RootReader(root)
    assert reader.read("etc/absolute") == reader.read("etc/climbing") == "inside\n"
    assert reader.resolve("etc/climbing") == "etc/real"
    assert reader.resolve("../../etc/real") == "etc/real"


@pytest.mark.parametrize("target", ["/outside/secret", "../../outside/secret"])
def test_links_out_of_the_root_read_as_missing(root: Path, target: str, opened: list[str]) -> None:
    """A link aiming outside (absolute or ../..) never reaches the outside file."""
    (root / "link").symlink_to(target)
    reader = RootReader(root)
    assert reader.read("link") is None
    assert not reader.exists("link")
    assert not any("secret" in path for path in opened)


def test_links_into_directories_read_before(root: Path, opened: list[str]) -> None:
    """A link whose target climbs into a directory the reader resolved or listed lands
    there in one step (every device's iommu_group and driver link); a name that only
    looks like that directory, because one of its components is a link, is walked."""
    write(root / "elsewhere/iommu_groups/5/type", "DMA\n")
    (root / "sys").mkdir()
    (root / "sys/kernel").symlink_to("../elsewhere")
    device = "sys/devices/pci0000:00/0000:00:01.0"
    (root / device).mkdir(parents=True)
    (root / device / "iommu_group").symlink_to("../../../kernel/iommu_groups/5")
    (root / device / "driver").symlink_to("../../../bus/pci/drivers/nvidia")
    (root / "sys/bus/pci/drivers/nvidia").mkdir(parents=True)
    (root / device / "escape").symlink_to("../../../../../outside/secret")
    reader = RootReader(root)
    assert reader.listdir("sys/kernel/iommu_groups") == ["5"]
    assert reader.resolve("iommu_group", at=device) == "elsewhere/iommu_groups/5"
    assert reader.resolve("sys/kernel/iommu_groups/5") == "elsewhere/iommu_groups/5"
    assert reader.directory("sys/bus/pci/drivers/nvidia") == "sys/bus/pci/drivers/nvidia"
    assert reader.directory("driver", at=device) == "sys/bus/pci/drivers/nvidia"
    assert reader.read("escape", at=device) is None
    assert not any("secret" in path for path in opened)


def test_link_directory_is_readlink_and_directory_in_one(root: Path, opened: list[str]) -> None:
    """`Listing.link_directory` (each device's iommu_group, driver, physfn, virtfnN):
    the link's text and the real directory it leads to inside the root, as readlink and
    directory give them; None for a dangling target, one out of the root or a file."""
    write(root / "elsewhere/iommu_groups/5/type", "DMA\n")
    write(root / "sys/bus/pci/drivers/nvidia/bind", "")
    (root / "sys/kernel").symlink_to("../elsewhere")
    device = "sys/devices/pci0000:00/0000:00:01.0"
    (root / device).mkdir(parents=True)
    links = {
        "iommu_group": "../../../kernel/iommu_groups/5",  # through the sys/kernel link
        "driver": "../../../bus/pci/drivers/nvidia",
        "absolute": "/sys/bus/pci/drivers/nvidia",
        "dangling": "../../../bus/pci/drivers/nouveau",
        "escape": "../../../../../outside",
        "to_a_file": "../../../bus/pci/drivers/nvidia/bind",
    }
    for name, target in links.items():
        (root / device / name).symlink_to(target)
    write(root / device / "plain", "not a link\n")
    trace = Trace()
    reader = RootReader(root, trace)
    assert reader.listdir("sys/kernel/iommu_groups") == ["5"]
    listing = Listing(reader, device, device)
    found = {name: listing.link_directory(name, f"{device}/{name}") for name in links}
    assert found == {
        "iommu_group": (links["iommu_group"], "elsewhere/iommu_groups/5"),
        "driver": (links["driver"], "sys/bus/pci/drivers/nvidia"),
        "absolute": (links["absolute"], "sys/bus/pci/drivers/nvidia"),
        "dangling": (links["dangling"], None),
        "escape": (links["escape"], None),
        "to_a_file": (links["to_a_file"], None),
    }
    # Traced as directory() traces (a snapshot archives the directories it reached).
    assert {"elsewhere/iommu_groups/5", "sys/bus/pci/drivers/nvidia"} <= trace.dirs
    assert trace.links[f"{device}/driver"] == links["driver"]
    for name, pair in found.items():
        assert pair is not None
        text, real = pair
        assert text == reader.readlink(name, at=device)
        assert real == reader.directory(name, at=device), name
    assert listing.link_directory("plain", f"{device}/plain") is None
    assert listing.link_directory("missing", f"{device}/missing") is None
    assert not any("outside" in path for path in opened)
    (root / device / "loop").symlink_to("loop")
    listing = Listing(reader, device, device)
    loop = f"{device}/loop"
    assert problem(lambda: listing.link_directory("loop", loop)) == ("symlink-loop", loop)


def test_loop_and_dangling_links(root: Path) -> None:
    """A loop is a typed error after 40 links; a dangling link reads as missing."""
    (root / "a").symlink_to("b")
    (root / "b").symlink_to("a")
    (root / "dangling").symlink_to("nowhere")
    reader = RootReader(root)
    assert problem(lambda: reader.read("a")) == ("symlink-loop", "a")
    assert reader.read("dangling") is None
    assert problem(lambda: reader.need("dangling", "a file")) == ("missing-file", "dangling")
    assert reader.readlink("dangling") == "nowhere"


# -- regular files only


def make_fifo(path: Path) -> None:
    os.mkfifo(path)


def make_socket(path: Path) -> None:
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.close()  # the socket file stays


def make_device(path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("mknod of a device node needs root")
    os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 3))  # what /dev/null is


def make_dir(path: Path) -> None:
    path.mkdir()


@pytest.mark.parametrize("make", [make_fifo, make_socket, make_device, make_dir])
def test_only_regular_files_are_opened(
    root: Path, make: Callable[[Path], None], opened: list[str]
) -> None:
    """FIFOs, sockets, device nodes and directories are refused without being opened."""
    make(root / "thing")
    (root / "link").symlink_to("/thing")
    reader = RootReader(root)
    with deadline(5):
        assert problem(lambda: reader.read("thing")) == ("not-a-file", "thing")
        assert problem(lambda: reader.read("link")) == ("not-a-file", "link")
        assert problem(lambda: reader.size("thing")) == ("not-a-file", "thing")
    assert opened == []


def test_a_file_where_a_directory_is_expected(root: Path) -> None:
    write(root / "etc/modprobe.d", "options x y=1\n")
    reader = RootReader(root)
    assert problem(lambda: reader.listdir("etc/modprobe.d")) == (
        "not-a-directory",
        "etc/modprobe.d",
    )
    assert reader.listdir("etc/missing.d") == []


# -- content


def test_size_cap_reads_at_most_one_byte_more(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Over the cap is a typed error, found by reading cap + 1 bytes, not the whole file."""
    write(root / "big", b"x" * 1_000_000)
    write(root / "fits", b"y" * 1000)
    asked: list[int] = []
    real_read = os.read

    def counting_read(fd: int, n: int) -> bytes:
        asked.append(n)
        return real_read(fd, n)

    monkeypatch.setattr(os, "read", counting_read)
    reader = RootReader(root, max_bytes=1000)
    assert reader.read("fits") == "y" * 1000
    asked.clear()
    assert problem(lambda: reader.read("big")) == ("file-too-large", "big")
    assert sum(asked) == 1001


def test_non_utf8_and_empty(root: Path) -> None:
    write(root / "latin1", b"caf\xe9\n")
    write(root / "empty", b"")
    reader = RootReader(root)
    assert problem(lambda: reader.read("latin1")) == ("not-utf8", "latin1")
    assert reader.read_bytes("latin1") == b"caf\xe9\n"
    assert reader.read("empty") == ""


def test_errors_name_the_path_as_asked(root: Path) -> None:
    """Reads relative to a resolved directory still name the path the caller used."""
    write(root / "sys/devices/pci0000:00/0000:00:01.0/vendor", b"\xff")
    (root / "sys/bus").mkdir(parents=True)
    (root / "sys/bus/dev").symlink_to("../devices/pci0000:00/0000:00:01.0")
    reader = RootReader(root)
    real = reader.resolve("sys/bus/dev")
    assert real == "sys/devices/pci0000:00/0000:00:01.0"
    assert problem(lambda: reader.read("vendor", at=real, subject="sys/bus/dev/vendor")) == (
        "not-utf8",
        "sys/bus/dev/vendor",
    )


# -- trace and find


def test_trace_records_what_was_read(root: Path) -> None:
    write(root / "d/file", "text\n")
    write(root / "d/sub/x", "")
    write(root / "lib/real.so", "library")
    (root / "d/link").symlink_to("file")
    (root / "lib/alias.so").symlink_to("real.so")
    trace = Trace()
    reader = RootReader(root, trace)
    assert reader.listdir("d") == ["file", "link", "sub"]
    assert reader.read("d/link") == "text\n"
    assert reader.size("lib/alias.so") == len("library")
    assert trace.files == {"d/file": b"text\n"}
    assert trace.links == {"d/link": "file", "lib/alias.so": "real.so"}
    assert trace.dirs == {"d", "d/sub"}
    assert trace.sized == {"lib/real.so"}


def test_find_stays_out_of_linked_directories(root: Path) -> None:
    write(root / "home/a/b/c/x.service", "deep enough\n")
    write(root / "home/a/b/c/d/x.service", "too deep\n")
    write(root / "home/x.service", "top\n")
    (root / "home/escape").symlink_to("/")
    (root / "alias").symlink_to("home")
    reader = RootReader(root)
    assert reader.find("home", "x.service", 3) == ["home/a/b/c/x.service", "home/x.service"]
    assert reader.find("alias", "x.service", 3) == []


# -- the serving inputs and the CLI's current files


def serving_spec(model_config: str | None = None, container_rootfs: str | None = None) -> Spec:
    serving = ServingSpec(
        version="0.5.9",
        model_path="/models/m",
        unit="sglang",
        model_config=model_config,
        container_rootfs=container_rootfs,
    )
    return Spec(node="n", pools=(PoolSpec(name="p", lxc=LxcSpec(100, serving=serving)),))


@pytest.mark.parametrize("absolute", [True, False], ids=["absolute", "relative"])
def test_serving_inputs_never_leave_the_root(root: Path, absolute: bool, opened: list[str]) -> None:
    """Model config, container rootfs and unit links aiming outside read as not found.

    The links name the outside files exactly (the host's absolute path, or enough `..`
    to climb out); inside the root neither exists, so nothing is found.
    """
    outside = root.parent / "outside"
    write(outside / "config.json", '{"outside": true}')
    write(outside / "var/lib/dpkg/status", "Package: outside\n")
    write(outside / "etc/systemd/system/sglang.service", "[Service]\n")

    def link(path: Path, target: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.symlink_to(target if absolute else os.path.relpath(target, path.parent))

    link(root / "models/config.json", outside / "config.json")
    link(root / "ct", outside)  # the whole container rootfs
    write(root / "ct2/var/lib/dpkg/status", "Package: inside\n")
    link(
        root / "ct2/etc/systemd/system/sglang.service",
        outside / "etc/systemd/system/sglang.service",
    )
    for rootfs, expected in (("ct", []), ("ct2", ["ct2/var/lib/dpkg/status"])):
        found = read_serving_files(
            root,
            serving_spec(model_config="models/config.json", container_rootfs=rootfs),
            installed_files,
        )
        assert [f.path for f in found.files] == expected
    assert not any(path.startswith(os.fspath(outside)) for path in opened)


def test_serving_inputs_follow_links_inside_the_root(root: Path) -> None:
    """A Hugging Face cache links config.json into blobs/: followed, inside the root."""
    write(root / "hf/blobs/abc", '{"model_type": "x"}')
    write(root / "hf/blobs/shard", "w" * 10)
    (root / "hf/snap").mkdir()
    (root / "hf/snap/config.json").symlink_to("../blobs/abc")
    (root / "hf/snap/model-1.safetensors").symlink_to("/hf/blobs/shard")
    found = read_serving_files(
        root, serving_spec(model_config="hf/snap/config.json"), installed_files
    )
    assert [(f.path, f.content) for f in found.files] == [
        ("hf/snap/config.json", '{"model_type": "x"}')
    ]
    assert [(s.path, s.size) for s in found.stats] == [("hf/snap/model-1.safetensors", 10)]


def test_serving_inputs_non_utf8_is_a_typed_error(root: Path) -> None:
    """It used to be decoded with U+FFFD and checked as if it were the model's config."""
    write(root / "m/config.json", b'{"name": "\xff"}')
    assert problem(
        lambda: read_serving_files(
            root, serving_spec(model_config="m/config.json"), installed_files
        )
    ) == ("not-utf8", "m/config.json")


def test_plan_current_file_stays_inside_the_root(root: Path, opened: list[str]) -> None:
    """`pvegpu plan` diffs against the host file; a link out of the root is not it."""
    write(root / "etc/pve/lxc/101.conf", "arch: amd64\n")
    (root / "etc/pve/lxc/100.conf").symlink_to("../../../../outside/secret")
    inside = Artifact("etc/pve/lxc/101.conf", "new\n", "test")
    escaping = Artifact("etc/pve/lxc/100.conf", "new\n", "test")
    assert _current(root, inside) == "arch: amd64\n"
    assert _current(root, escaping) is None
    assert not any("secret" in path for path in opened)
    write(root / "etc/pve/lxc/102.conf", b"\xff")
    assert problem(lambda: _current(root, Artifact("etc/pve/lxc/102.conf", "", "t"))) == (
        "not-utf8",
        "etc/pve/lxc/102.conf",
    )
