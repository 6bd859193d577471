"""docs/ and the README stand alone: users have the repository, not the developers' shared notes,
and every relative link they follow lands on a file that exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
USER_TEXTS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "examples").glob("*.py")])
# a markdown link or image whose target is a path in the repository (no scheme, no pure anchor)
LINK = re.compile(r"\]\((?!https?:|mailto:|#)([^)\s]+)\)")


@pytest.mark.parametrize("path", USER_TEXTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_user_texts_cite_nothing_outside_the_repository(path: Path):
    text = path.read_text(encoding="utf-8")
    for needle in ("REFERENCE.md", "REFERENCE §", "REFERENCE's", "../shared", "ARCHITECTURE.md"):
        assert needle not in text, f"{path.relative_to(ROOT)} cites {needle!r}, a file users do not have"


@pytest.mark.parametrize("path", [p for p in USER_TEXTS if p.suffix == ".md"], ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_at_files_that_exist(path: Path):
    missing = []
    for target in LINK.findall(path.read_text(encoding="utf-8")):
        file = target.split("#", 1)[0]
        if file and not (path.parent / file).exists():
            missing.append(target)
    assert not missing, f"{path.relative_to(ROOT)} links to missing files: {missing}"


def test_the_first_answer_grid_in_docs_grid_md_is_valid():
    """docs/grid.md's "A first answer" grid is the one a new user copies: it must load, and say
    what the text says it derives (41,675 KV blocks, a 2,000-token prefix, NVLink 4)."""
    from poa_mc.model.config import loads_grid

    text = (ROOT / "docs" / "grid.md").read_text(encoding="utf-8")
    section = text.split("## A first answer\n", 1)[1]
    toml = section.split("```toml\n", 1)[1].split("```", 1)[0]
    cell = loads_grid(toml).cells()[0].spec
    assert cell.cluster.decode_kv_blocks == 41675 and cell.workload.prefix_tokens == 2000
    assert cell.cluster.transfer_gbps == 450.0
