"""docs/spec.md lists exactly the spec's keys, with the types, defaults and rules enforced."""

from __future__ import annotations

import re
from pathlib import Path

from pvegpu.engines import spec_engines
from pvegpu.spec.reference import Row
from pvegpu.spec.reference import rows as engine_rows

DOC = Path(__file__).resolve().parent.parent / "docs" / "spec.md"
_KEY_CELL = re.compile(r"^\| `([^`]+)` \|")


def rows() -> list[Row]:
    """The reference with the registry's engines: their names, their own keys."""
    return list(engine_rows(spec_engines()))


def test_every_key_is_documented_with_its_type_default_and_constraint() -> None:
    lines = DOC.read_text().splitlines()
    missing = [r.markdown() for r in rows() if not any(x.startswith(r.markdown()) for x in lines)]
    assert not missing, "docs/spec.md lacks or misstates:\n" + "\n".join(missing)


def test_the_reference_documents_no_key_the_loader_does_not_accept() -> None:
    documented = [
        m.group(1) for line in DOC.read_text().splitlines() if (m := _KEY_CELL.match(line))
    ]
    assert documented == [r.key for r in rows()]


def test_rows_follow_the_rules_table() -> None:
    by_key = {r.key: r for r in rows()}
    assert by_key["pools[].lxc.vmid"].constraint == "100..999999999"
    assert by_key["pools[].lxc.vmid"].default == "required"
    assert by_key["pools[].lxc.serving.port"].default == "`30000`"
    assert by_key["pools[].lxc.devices"].type == '`"dev"` or `"raw"`'
