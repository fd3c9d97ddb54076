"""Result claims in prose come from a generated findings file: every number between ``<!-- findings: PATH -->`` and
``<!-- /findings -->`` in the READMEs appears in that findings.md (docs/reports.md, "Findings")."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = ["README.md", "docs/results.md", "results/quick-protocol2/README.md"]
BLOCK = re.compile(r"<!-- findings: (?P<path>\S+) -->(?P<text>.*?)<!-- /findings -->", re.S)
NUMBER = re.compile(r"(?<![\w.])[−+]?(?:\d+\.\d+(?!\d|\.\d)|\d+%)")


def cited_numbers(text: str) -> list[str]:
    """The decimals and percentages of ``text``, with their sign where one is written (a true minus), links left
    out; a number is whole (``0.04`` is not ``0.041``)."""
    return NUMBER.findall(re.sub(r"\]\([^)]*\)", "]", text).replace("-", "−"))


def numbers_in(findings: str) -> set[str]:
    """Every number of a findings file, signed as written and unsigned (prose may leave a loss's sign to words)."""
    found = set(cited_numbers(findings))
    return found | {n.lstrip("−+") for n in found}


def test_cited_numbers_are_whole_and_signed_apart_from_link_targets():
    assert cited_numbers("Δ −2.43 [−3.11, −1.69], Holm p 0.0137 at 50% ([x](a/b-1.2.md)), v5.24.0, +3.57.") == [
        "−2.43", "−3.11", "−1.69", "0.0137", "50%", "+3.57"]
    assert "0.04" not in numbers_in("Holm p 0.041") and "+2.89" not in numbers_in("−2.89")
    assert "2.89" in numbers_in("−2.89")


@pytest.mark.parametrize("page", PAGES)
def test_every_number_in_a_findings_block_is_in_its_findings_file(page):
    text = (ROOT / page).read_text(encoding="utf-8")
    blocks = list(BLOCK.finditer(text))
    assert blocks, f"{page} has no <!-- findings: PATH --> block"
    for block in blocks:
        source = (ROOT / page).parent / block["path"]
        found = numbers_in(source.read_text(encoding="utf-8"))
        missing = [n for n in cited_numbers(block["text"]) if n not in found]
        assert not missing, f"{page}: numbers not in {block['path']}: {missing}"
