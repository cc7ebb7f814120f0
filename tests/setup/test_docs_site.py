"""The documentation site builds as `make docs` builds it (`mkdocs build --strict`: a broken link or anchor, or a page
left out of the navigation, fails it), every relative link of README.md leads to a page or file of that site (and
its anchor, if any, to a heading of that page), and the README stays short: the details live in docs/."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT

README = ROOT / "README.md"
MAX_README_LINES = 250
# Markdown links and pictures, [text](target) and ![text](target); a title after the target is not used here.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built into a temporary folder exactly as `make docs` builds it into site/."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)], cwd=ROOT,
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stdout}\n{result.stderr}"
    return out


def relative_links(text: str) -> list[str]:
    return [target for target in LINK.findall(text) if not re.match(r"^[a-z][a-z0-9+.-]*:", target)]


def built_file(site: Path, target: str) -> Path:
    """Where a README link to docs/... lands in the built site (use_directory_urls is off: docs/x.md is x.html)."""
    path = target.split("#", 1)[0]
    assert path.startswith("docs/"), f"README.md links to {target!r}, outside the documentation site"
    inside = Path(path).relative_to("docs")
    return site / (inside.with_suffix(".html") if inside.suffix == ".md" else inside)


def test_the_readme_is_short():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines: move the details into docs/"


def test_every_relative_link_of_the_readme_resolves_in_the_built_site(site):
    links = relative_links(README.read_text(encoding="utf-8"))
    assert "docs/screenshot.png" in links and "docs/api.md" in links and len(links) >= 10
    missing, anchors_missing = [], []
    for target in links:
        built = built_file(site, target)
        if not built.is_file():
            missing.append(target)
        elif "#" in target and f'id="{target.split("#", 1)[1]}"' not in built.read_text(encoding="utf-8"):
            anchors_missing.append(target)
    assert not missing, f"README.md links to what the site does not have: {missing}"
    assert not anchors_missing, f"README.md links to headings the pages do not have: {anchors_missing}"


def test_every_documentation_page_is_built(site):
    pages = sorted(path.stem for path in (ROOT / "docs").glob("*.md"))
    assert {"index", "getting-started", "api", "configuration", "architecture", "benchmarks"} <= set(pages)
    assert not [page for page in pages if not (site / f"{page}.html").is_file()]


def test_the_link_check_catches_a_broken_link(site):
    assert relative_links("[a](docs/api.md) [b](https://example.com) ![c](docs/nothing.png)") == [
        "docs/api.md", "docs/nothing.png"]
    assert built_file(site, "docs/api.md#x").is_file() and not built_file(site, "docs/nothing.png").exists()
    with pytest.raises(AssertionError, match="outside the documentation site"):
        built_file(site, "app/main.py")
