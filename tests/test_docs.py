"""The front door: a README of at most 300 lines with the pitch, the quick start, the formats, the
architecture picture and the map; everything else on the docs site (docs/, mkdocs.yml), whose
`mkdocs build --strict` runs in `make test`. Here, offline: every page is in the site's nav and
the README links each."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def nav_pages(nav: list[object]) -> set[str]:
    out: set[str] = set()
    for item in nav:
        for value in (item.values() if isinstance(item, dict) else [item]):
            out |= nav_pages(value) if isinstance(value, list) else {str(value)}
    return out


def test_the_readme_is_a_front_door() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 300
    for section in ("## Quick start", "## Formats", "## Architecture", "## Documentation", "## Map of the modules"):
        assert section in text
    assert "```mermaid" in text


def test_every_page_is_on_the_site_and_linked_from_the_readme() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text().replace("!!python/name:", ""))
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert nav_pages(config["nav"]) == pages
    linked = set(re.findall(r"\]\(docs/([\w-]+\.md)\)", (ROOT / "README.md").read_text()))
    assert pages - {"index.md"} <= linked, sorted(pages - linked)


def test_the_site_home_is_the_readme() -> None:
    script = ROOT / "scripts" / "docs-index"
    namespace: dict[str, object] = {"__name__": "docs_index", "__file__": str(script)}
    exec(compile(script.read_text(), str(script), "exec"), namespace)
    expected = namespace["site_home"]((ROOT / "README.md").read_text())  # type: ignore[operator]
    assert (ROOT / "docs" / "index.md").read_text() == expected, "docs/index.md is stale: run scripts/docs-index"
