from __future__ import annotations

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pvegpu.errors import RenderError
from pvegpu.pvefiles import pcicfg
from pvegpu.pvefiles.pcicfg import PciMap, PciMapping
from strategies import hand_written_section, mapping_ids, pci_mapping, pci_mappings

# The reference example (proxmox-formats.md), as Proxmox writes it.
REFERENCE = """\
pro6000
\tmap id=10de:2bb5,iommugroup=12,node=kpro6,path=0000:01:00,subsystem-id=10de:204b
\tmap id=10de:2bb5,iommugroup=13,node=kpro6,path=0000:11:00,subsystem-id=10de:204b
\tdescription LXC-side GPUs on NUMA 0

pro6000-vm
\tmap id=10de:2bb5,iommugroup=40,node=kpro6,path=0000:81:00,subsystem-id=10de:204b
\tmap id=10de:2bb5,iommugroup=41,node=kpro6,path=0000:91:00,subsystem-id=10de:204b

"""


def gpu_map(bus: int, group: int, node: str = "kpro6") -> PciMap:
    return PciMap("10de:2bb5", node, f"0000:{bus:02x}:00", group, "10de:204b")


VM_MAPPING = PciMapping("pro6000-vm", (gpu_map(0x81, 40), gpu_map(0x91, 41)))


def syntax_error(text: str) -> RenderError:
    with pytest.raises(RenderError) as caught:
        pcicfg.parse(text)
    return caught.value


def test_parse_reference_example() -> None:
    """The documented file parses into its two mappings with every map key typed."""
    lxc, vm = pcicfg.parse_mappings(REFERENCE)
    assert lxc.id == "pro6000"
    assert lxc.description == "LXC-side GPUs on NUMA 0"
    assert lxc.maps[0] == gpu_map(0x01, 12)
    assert vm == VM_MAPPING


def test_format_reference_example_byte_for_byte() -> None:
    """format() prints Proxmox's canonical form: bare id, TABs, map lines first, blank after."""
    assert pcicfg.format(pcicfg.parse_mappings(REFERENCE)) == REFERENCE


def test_format_orders_keys_like_the_gui() -> None:
    """Map keys alphabetical, options sorted after all map lines, booleans as 1/0."""
    mapping = PciMapping(
        "a1",
        (PciMap("10de:2bb5", "n1", "0000:81:00.0", 7, "10de:204b", description="slot 3"),),
        description="d",
        live_migration_capable=False,
        mdev=True,
    )
    assert pcicfg.format([mapping]) == (
        "a1\n"
        "\tmap description=slot 3,id=10de:2bb5,iommugroup=7,node=n1,path=0000:81:00.0,"
        "subsystem-id=10de:204b\n"
        "\tdescription d\n"
        "\tlive-migration-capable 0\n"
        "\tmdev 1\n"
        "\n"
    )


def test_parse_accepts_what_sectionconfig_accepts() -> None:
    """Comments anywhere, spaces as indent, `yes` booleans and unknown keys are read."""
    text = (
        "# managed by hand\n"
        "gpu\n"
        "  mdev yes\n"
        "# inside a section\n"
        "\tmap node=kpro6,path=0000:c1:00.0,id=10DE:2BB5,future-key=x\n"
        "\tfuture-option 3\n"
    )
    (section,) = pcicfg.parse(text)
    assert section.mapping.mdev is True
    assert section.maps[0].value == "node=kpro6,path=0000:c1:00.0,id=10DE:2BB5,future-key=x"
    assert section.options == (("mdev", "yes"), ("future-option", "3"))
    assert pcicfg.comment_lines(text) == (1, 4)


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("1gpu\n\tmap id=10de:2bb5,node=n,path=0000:01:00\n", 1, "not a valid mapping id"),
        ("pci:gpu\n\tmap id=10de:2bb5,node=n,path=0000:01:00\n", 1, "not a valid mapping id"),
        ("g1\n\tdescription a\n\tdescription b\n", 3, "'description' repeated"),
        ("g1\n\tmdev maybe\n", 2, "not a boolean"),
        ("g1\n\tmap id=10de:2bb5,path=0000:01:00\n", 2, "lacks node"),
        ("g1\n\tmap node=n,path=0000:01:00\n", 2, "lacks id"),
        ("g1\n\tmap id=10de:2bb5,node=n\n", 2, "lacks path"),
        ("g1\n\tmap id=10de:2bb5,node=n,path=81:00.0\n", 2, "not dddd:bb:dd"),
        ("g1\n\tmap id=10de:2bb5,node=n,path=0000:81:00.0;0000:81:0\n", 2, "not dddd:bb:dd"),
        ("g1\n\tmap id=10de:2bb5,node=n,path=0000:81:00,iommugroup=x\n", 2, "not an IOMMU group"),
        ("g1\n\tmap 10de:2bb5\n", 2, "not key=value"),
        ("g1\n\tmap id=10de:2bb5,id=10de:2bb5,node=n,path=0000:01:00\n", 2, "given twice"),
        ("g1\n\tdescription\n", 2, "has no value"),
        ("\tdescription orphan\n", 1, "outside any section"),
        ("g1\n\tdescription a\n\ng1\n\tdescription b\n", 4, "already defined at line 1"),
    ],
)
def test_parse_refuses_broken_files(text: str, line: int, message: str) -> None:
    """Each broken construct is a pcicfg-syntax problem naming the file and line."""
    (problem,) = syntax_error(text).problems
    assert problem.code == "pcicfg-syntax"
    assert problem.subject == f"{pcicfg.PATH} line {line}"
    assert message in problem.message


def test_parse_refuses_missing_blank_line_between_sections() -> None:
    """Without the blank line Proxmox would silently drop the second section: refuse."""
    text = REFERENCE.replace("\n\npro6000-vm", "\npro6000-vm")
    (problem,) = syntax_error(text).problems
    assert problem.subject == f"{pcicfg.PATH} line 5"
    assert "without the blank line that must end section 'pro6000'" in problem.message


def test_blank_but_not_empty_line_does_not_end_a_section() -> None:
    """A whitespace-only line is skipped, as SectionConfig skips it: the section goes on."""
    (section,) = pcicfg.parse("g1\n\tdescription a\n \t\n\tmdev 0\n")
    assert section.options == (("description", "a"), ("mdev", "0"))


@pytest.mark.parametrize(
    ("mapping", "message"),
    [
        (PciMapping("x", (gpu_map(1, 1),)), "mapping id is a letter"),
        (PciMapping("9gpu", (gpu_map(1, 1),)), "mapping id is a letter"),
        (PciMapping("gpu", ()), "at least one map line"),
        (PciMapping("gpu", (attrs.evolve(gpu_map(1, 1), id="10DE:2BB5"),)), "lowercase"),
        (PciMapping("gpu", (attrs.evolve(gpu_map(1, 1), path="0000:1:00"),)), "dddd:bb:dd"),
        (PciMapping("gpu", (attrs.evolve(gpu_map(1, 1), node="kpro6.lan"),)), "node name"),
        (PciMapping("gpu", (attrs.evolve(gpu_map(1, 1), description="a,b"),)), "without commas"),
        (PciMapping("gpu", (gpu_map(1, 1),), description="two\nlines"), "one line"),
        (PciMapping("gpu", (gpu_map(1, 1),), description=" padded"), "one line"),
    ],
)
def test_format_refuses_unwritable_values(mapping: PciMapping, message: str) -> None:
    """Values that would not read back the same (or that Proxmox rejects) are refused."""
    with pytest.raises(RenderError) as caught:
        pcicfg.format([mapping])
    (problem,) = caught.value.problems
    assert problem.code == "pcicfg-value"
    assert message in problem.message


def test_patch_replaces_in_place_appends_and_keeps_others() -> None:
    """Same id: rewritten where it was; new id: appended; other sections kept in order,
    and so is a `#` line outside the sections pvegpu writes."""
    existing = (
        "# kept: pvegpu changes only its own mappings\n"
        "nic\n\tmap id=8086:1592,node=kpro6,path=0000:41:00.0\n\n"
        + REFERENCE.replace("pro6000-vm", "pro6000-old")
    )
    lxc = PciMapping("pro6000", (gpu_map(0x01, 12),), description="LXC-side GPUs on NUMA 0")
    out = pcicfg.patch(existing, [lxc, VM_MAPPING])
    assert [s.id for s in pcicfg.parse(out)] == ["nic", "pro6000", "pro6000-old", "pro6000-vm"]
    assert pcicfg.parse_mappings(out)[1] == lxc
    assert pcicfg.parse_mappings(out)[3] == VM_MAPPING
    assert out.startswith(
        "# kept: pvegpu changes only its own mappings\n"
        "nic\n\tmap id=8086:1592,node=kpro6,path=0000:41:00.0\n\npro6000\n"
    )
    assert pcicfg.dropped_comment_lines(existing, ["pro6000", "pro6000-vm"]) == ()


def test_patch_keeps_other_nodes_map_lines() -> None:
    """pci.cfg is cluster-wide: a mapping's devices on other nodes stay where they are."""
    existing = (
        "pro6000-vm\n"
        "\tmap id=10de:2bb5,iommugroup=7,node=kpro5,path=0000:21:00\n"
        "\tmap id=10de:2bb5,iommugroup=40,node=kpro6,path=0000:e1:00\n"
        "\tmap id=10de:2bb5,iommugroup=8,node=kpro7,path=0000:21:00\n"
        "\tdescription all VM GPUs\n"
        "\n"
    )
    out = pcicfg.patch(existing, [VM_MAPPING])
    (merged,) = pcicfg.parse_mappings(out)
    assert [(m.node, m.path) for m in merged.maps] == [
        ("kpro5", "0000:21:00"),
        ("kpro6", "0000:81:00"),
        ("kpro6", "0000:91:00"),
        ("kpro7", "0000:21:00"),
    ]
    # Options the new mapping leaves unset keep their old value.
    assert merged.description == "all VM GPUs"


# A mapping written by hand: description first, booleans as words, spaces for TABs, a
# note inside; Proxmox reads it, and only a Proxmox write of this mapping would reorder it.
HAND_WRITTEN = (
    "other\n"
    "  description router NIC\n"
    "\tzeta 1\n"
    "# port 0 only\n"
    "\tmap path=0000:c1:00,node=kpro6,id=1002:74a1,x=y\n"
    "\tmdev no\n"
    "\tlive-migration-capable yes \n"
)


def test_patch_keeps_a_mapping_it_does_not_own_byte_for_byte() -> None:
    """The issue's case: a mapping pvegpu does not own keeps its key order, spacing,
    spelling and `#` lines; only the owned mapping is printed canonically."""
    out = pcicfg.patch(HAND_WRITTEN + "\n", [VM_MAPPING])
    assert out == HAND_WRITTEN + "\n" + pcicfg.format([VM_MAPPING])
    assert pcicfg.dropped_comment_lines(HAND_WRITTEN, ["pro6000-vm"]) == ()


def test_patch_prints_the_owned_mapping_canonically_and_drops_its_comments() -> None:
    """Owned: printed as Proxmox prints it, its unknown key and unset options kept (its
    `#` line is the one the plan reports); the mapping after it keeps its bytes."""
    existing = HAND_WRITTEN.replace("other", "pro6000-vm") + "\nnext\n  mdev yes\n\n"
    out = pcicfg.patch(existing, [VM_MAPPING])
    maps = pcicfg.format([VM_MAPPING]).removeprefix("pro6000-vm\n").removesuffix("\n")
    assert out == (
        f"pro6000-vm\n{maps}"
        "\tdescription router NIC\n\tlive-migration-capable 1\n\tmdev 0\n\tzeta 1\n\n"
        "next\n  mdev yes\n\n"
    )
    assert pcicfg.dropped_comment_lines(existing, ["pro6000-vm"]) == (4,)


def test_patch_drops_only_the_moved_line_of_a_mapping_it_does_not_own() -> None:
    """A mapping that loses a device keeps every other byte; one that loses its last
    goes whole, with the empty line that ended it, and its `#` lines are reported."""
    second = "\tmap id=1002:74a1,node=kpro6,path=0000:d1:00\n"
    existing = HAND_WRITTEN + second + "\ngone\n# only line\n" + second + "\nlast\n\tmdev 1\n\n"
    drop = {"other": [second.strip().removeprefix("map ")], "gone": [second.strip()[4:]]}
    out = pcicfg.patch(existing, [VM_MAPPING], drop=drop)
    assert out == HAND_WRITTEN + "\nlast\n\tmdev 1\n\n" + pcicfg.format([VM_MAPPING])
    assert pcicfg.dropped_comment_lines(existing, ["pro6000-vm"], drop) == (11,)


def test_patch_of_nothing_is_format() -> None:
    """An absent or empty pci.cfg patched is the canonical file of the new mappings."""
    assert pcicfg.patch("", [VM_MAPPING]) == pcicfg.format([VM_MAPPING])


@given(pci_mappings)
def test_format_parse_roundtrip(mappings: list[PciMapping]) -> None:
    """parse(format(m)) == m for every writable set of mappings."""
    assert list(pcicfg.parse_mappings(pcicfg.format(mappings))) == mappings


@given(pci_mappings, pci_mappings, st.booleans())
def test_patch_is_idempotent(
    existing: list[PciMapping], new: list[PciMapping], comment: bool
) -> None:
    """Patching the patched file again changes nothing."""
    text = ("# hand note\n" if comment else "") + pcicfg.format(existing)
    once = pcicfg.patch(text, new)
    assert pcicfg.patch(once, new) == once


@given(
    st.lists(mapping_ids, min_size=1, max_size=4, unique_by=str.lower).flatmap(
        lambda ids: st.tuples(*(hand_written_section(i) for i in ids))
    ),
    st.lists(st.sampled_from(["", "# between\n", "\n"]), min_size=5, max_size=5),
    st.data(),
)
def test_patch_keeps_every_byte_but_the_owned_mapping(
    sections: tuple[str, ...], between: list[str], data: st.DataObject
) -> None:
    """Hand-written sections around an owned one come out byte for byte, and so does
    what lies between them; the owned one is printed in its place as it is when patched
    alone, canonically (or appended, when it is new)."""
    chunks = [(between[i], text + "\n\n") for i, text in enumerate(sections)]
    ids = [text.split("\n", 1)[0] for text in sections]
    owned_at = data.draw(st.integers(0, len(sections)), label="owned section (len: new)")
    owned_id = ids[owned_at] if owned_at < len(sections) else "pvegpu-new"
    new = data.draw(pci_mapping(mapping_id=owned_id), label="owned mapping")
    existing = "".join(a + b for a, b in chunks) + between[-1]
    out = pcicfg.patch(existing, [new])
    if owned_at == len(sections):
        ended = existing if existing.endswith("\n\n") else existing + "\n"
        assert out == ended + pcicfg.format([new])
        return
    owned = pcicfg.patch(chunks[owned_at][1], [new])
    chunks[owned_at] = (chunks[owned_at][0], owned)
    assert out == "".join(a + b for a, b in chunks) + between[-1]
    header, *lines, blank, end = owned.split("\n")
    assert (header, blank, end) == (owned_id, "", "")
    assert all(line.startswith("\t") and not line[1].isspace() for line in lines)
    keys = [line[1:].split(" ", 1)[0] for line in lines]
    options = keys[keys.count("map") :]
    assert keys[: keys.count("map")] == ["map"] * keys.count("map")
    assert options == sorted(options)


@given(pci_mappings, pci_mapping(mapping_id="pvegpu-new"))
def test_patch_keeps_other_sections(existing: list[PciMapping], new: PciMapping) -> None:
    """Sections with other ids come back equal and in their order; the new one is last."""
    existing = [m for m in existing if m.id != new.id]
    out = pcicfg.parse_mappings(pcicfg.patch(pcicfg.format(existing), [new]))
    assert list(out) == [*existing, new]


def test_syntax_problems_are_what_parse_refuses() -> None:
    """plan() asks syntax_problems of the existing file: the problem parse would raise."""
    broken = REFERENCE.replace("\n\npro6000-vm\n", "\npro6000-vm\n")
    with pytest.raises(RenderError) as caught:
        pcicfg.parse(broken)
    assert pcicfg.syntax_problems(broken) == caught.value.problems
    assert caught.value.problems[0].code == "pcicfg-syntax"
    assert pcicfg.syntax_problems(REFERENCE) == ()


def test_value_problems_are_what_format_refuses() -> None:
    """plan() asks value_problems of each mapping it built: what format would refuse."""
    good = PciMapping("pro6000", (gpu_map(0x01, 12),), description="NUMA 0")
    bad = attrs.evolve(good, description="two\nlines")
    with pytest.raises(RenderError) as caught:
        pcicfg.format([bad])
    assert pcicfg.value_problems(bad) == caught.value.problems
    assert caught.value.problems[0].code == "pcicfg-value"
    assert pcicfg.value_problems(good) == ()
