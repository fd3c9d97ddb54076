"""Result claims in prose come from a generated findings file: every number between ``<!-- findings: PATH -->`` and
``<!-- /findings -->`` in the READMEs appears in that findings.md (docs/reports.md, "Findings")."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = ["README.md", "docs/results.md", "results/quick-protocol2/README.md"]
BLOCK = re.compile(r"<!-- findings: (?P<path>\S+) -->(?P<text>.*?)<!-- /findings -->", re.S)
NUMBER = re.compile(r"(?<![\w.])\d+\.\d+|(?<![\w.])\d+%")


def cited_numbers(text: str) -> list[str]:
    """The decimals and percentages of ``text`` (signs dropped: findings write a true minus), links left out."""
    return NUMBER.findall(re.sub(r"\]\([^)]*\)", "]", text))


def test_cited_numbers_are_found_apart_from_link_targets():
    assert cited_numbers("Δ −2.43 [−3.11, −1.69], Holm p 0.0137 at 50% ([x](a/b-1.2.md))") == [
        "2.43", "3.11", "1.69", "0.0137", "50%"]


@pytest.mark.parametrize("page", PAGES)
def test_every_number_in_a_findings_block_is_in_its_findings_file(page):
    text = (ROOT / page).read_text(encoding="utf-8")
    blocks = list(BLOCK.finditer(text))
    assert blocks, f"{page} has no <!-- findings: PATH --> block"
    for block in blocks:
        source = (ROOT / page).parent / block["path"]
        findings = source.read_text(encoding="utf-8")
        missing = [n for n in cited_numbers(block["text"]) if n not in findings]
        assert not missing, f"{page}: numbers not in {block['path']}: {missing}"
