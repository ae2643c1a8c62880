"""Every relative link and image of README.md and docs/*.md resolves to a file of the repository
(and to a heading, when it names one); no page points to what a user does not have."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# [text](target) and ![alt](target), an optional "title" after the target
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
# text a user cannot follow: the project's private notes and its tracker's numbers
PRIVATE = re.compile(
    r"seeds/|REFERENCE\.md|REFERENCE §|\bshared/|\bissues? \d+|\bissue #?\d+|(?<![\w&/])#\d{2,}\b",
    re.IGNORECASE,
)


def _prose(text):
    """The page without its fenced code blocks (code may hold anything)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)


def _anchors(path):
    """GitHub's anchors of a Markdown file's headings."""
    anchors = set()
    for line in _prose(path.read_text()).splitlines():
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-")
            anchors.add(slug)
    return anchors


def _links(page):
    for target in LINK.findall(_prose(page.read_text())):
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):  # http:, https:, mailto:
            continue
        yield target


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(page):
    broken = []
    for target in _links(page):
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists() or ROOT not in (resolved, *resolved.parents):
            broken.append(target)
        elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
            broken.append(target)
    assert not broken, f"{page.name}: links to nothing in the repository: {broken}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_private_references(page):
    hits = [
        f"{i}: {line.strip()}"
        for i, line in enumerate(page.read_text().splitlines(), 1)
        if PRIVATE.search(line)
    ]
    assert not hits, f"{page.name} names what users do not have:\n" + "\n".join(hits)


def test_the_link_pattern_finds_links_images_and_anchors():
    text = "see [a](docs/hmc.md#calibration), ![img](_static/x.png \"t\") and [u](https://x.org)"
    assert LINK.findall(text) == ["docs/hmc.md#calibration", "_static/x.png", "https://x.org"]
    assert PRIVATE.search("as seeds/004 says") and PRIVATE.search("(issue 31)")
    assert PRIVATE.search("fixed in #45") and not PRIVATE.search("## Heading")
    assert not PRIVATE.search("HMC & #1 and a [link](a.md#h2)")
    assert {"installing", "a-first-example"} <= _anchors(ROOT / "README.md")


SOURCES = sorted(p for p in (ROOT / "sklearn_bnn").rglob("*") if p.suffix in {".py", ".md"})


def test_no_private_references_in_the_package():
    """Docstrings, comments and messages cite papers by author and year: no seeds/ file, no
    REFERENCE section, no shared/ path and no tracker number (users have none of them)."""
    hits = [
        f"{path.relative_to(ROOT)}:{i}: {line.strip()}"
        for path in SOURCES
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if PRIVATE.search(line)
    ]
    assert not hits, "the package names what users do not have:\n" + "\n".join(hits)
