"""The docs a newcomer reads: every relative link resolves, and the README stays short."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.unit

PAGES = [ROOT / "README.md", ROOT / "benchmarks" / "README.md",
         *sorted((ROOT / "docs").glob("*.md"))]
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path):
    broken = []
    for target in _LINK.findall(page.read_text()):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue  # a URL or an anchor
        path = (page.parent / target.split("#", 1)[0]).resolve()
        if not path.exists():
            broken.append(target)
    assert broken == [], f"{page.relative_to(ROOT)} links to missing {broken}"


def test_the_readme_starts_with_the_two_commands_and_stays_short():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert lines[3].startswith("make demo") and lines[4].startswith("make test")
    assert len(lines) <= 300
    for doc in ("docs/spec.md", "docs/traffic.md", "docs/architecture.md"):
        assert doc in "\n".join(lines), f"the README links {doc}"
