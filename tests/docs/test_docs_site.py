"""The documentation site builds in strict mode, and the README is a landing page whose links all exist.

A broken link, a broken anchor, a page missing from (or only in) the navigation, or a docstring griffe
cannot parse fails ``mkdocs build --strict``; the tests below break all five on purpose in one copy of the docs
and check that its one strict build fails with one warning naming each (a build per breakage took 70 s, one 15 s).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MKDOCS = [sys.executable, "-m", "mkdocs"]


def _build(config_dir: Path, site: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        [*MKDOCS, "build", "--strict", "--site-dir", str(site)],
        cwd=config_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site, built once in strict mode."""
    site = tmp_path_factory.mktemp("built") / "site"
    result = _build(ROOT, site)
    assert result.returncode == 0, result.stdout + result.stderr
    return site


def test_the_site_builds_in_strict_mode(site):
    for page in ("index.html", "train.html", "api/objective-loss.html", "planted/passk.png"):
        assert (site / page).is_file(), page
    api = (site / "api" / "objective-loss.html").read_text(encoding="utf-8")
    assert "sage_loss" in api and ":func:`" not in api  # docstrings rendered
    assert "branch_guide" in (site / "api" / "objective-guides.html").read_text(encoding="utf-8")


def test_names_in_docstrings_link_to_their_entries(site):
    """docs/_ext/griffe_rst.py: CrossReferences (a role, a dotted name, a name in the docstring's scope)."""
    config = (site / "api" / "train-config.html").read_text(encoding="utf-8")
    assert (
        'href="train-trainer.html#sagerl.train.trainer.SAGETrainer"' in config
    )  # :class:`sagerl.train.SAGETrainer`
    assert (
        'href="objective-guides.html#sagerl.objective.registry.GuideParams"' in config
    )  # :class:`...GuideParams`
    verl = (site / "api" / "verl.html").read_text(encoding="utf-8")
    assert (
        'href="#sagerl.integrations.verl.worker.SAGETrainingWorker"' in verl
    )  # :class:`~.worker.SAGETrainingWorker`
    assert "<code>output_dir</code>" in (site / "api" / "train-run.html").read_text(encoding="utf-8")  # a key


def test_every_config_field_is_in_a_table_on_an_api_page(site):
    """Each config class's page (docs/_ext/config_fields.py) has a row per field: name, default, help."""
    sys.path.insert(0, str(ROOT / "docs" / "_ext"))
    import config_fields

    pages = {p.name: p.read_text(encoding="utf-8") for p in (site / "api").glob("*.html")}
    for path in config_fields.config_classes():
        anchor = f'id="{path}"'
        page = next((name for name, html in pages.items() if anchor in html), None)
        assert page is not None, f"{path} is on no API page: add its module to one of docs/api/*.md"
        html = pages[page]
        for field in config_fields.config_fields(path):
            assert f"<td><code>{field.name}</code></td>" in html, f"{path}.{field.name} not in {page}'s table"


def _docs_copy(folder: Path) -> Path:
    """mkdocs.yml, docs/ and the sources mkdocstrings reads, copied to a scratch folder."""
    copy = folder / "repo"
    copy.mkdir()
    shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    shutil.copytree(ROOT / "docs", copy / "docs")
    shutil.copytree(ROOT / "sagerl", copy / "sagerl", ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def _nav_pages(config: Path) -> list[str]:
    def walk(node):
        if isinstance(node, str):
            yield node
        elif isinstance(node, dict):
            for value in node.values():
                yield from walk(value)
        elif isinstance(node, list):
            for value in node:
                yield from walk(value)

    class Loader(yaml.SafeLoader):  # mkdocs.yml's `!ENV NAME` tags read as the name
        pass

    Loader.add_constructor("!ENV", lambda loader, node: None)
    return list(walk(yaml.load(config.read_text(encoding="utf-8"), Loader=Loader)["nav"]))


BREAKAGES = {
    "link": "nowhere.md",
    "anchor": "#no-such-heading",
    "orphan page": "orphan.md",
    "missing page": "missing.md",
    "docstring": "'nope'",
}
"""Each way to break the docs, and the name the failed build's warning gives it."""


def _break(copy: Path, breakage: str) -> None:
    page = copy / "docs" / "train.md"
    if breakage == "link":
        page.write_text(page.read_text() + "\nSee [the lost page](nowhere.md).\n")
    elif breakage == "anchor":
        page.write_text(page.read_text() + "\nSee [grading](evaluate.md#no-such-heading).\n")
    elif breakage == "orphan page":
        (copy / "docs" / "orphan.md").write_text("# Orphan\n")
    elif breakage == "missing page":
        config = copy / "mkdocs.yml"
        config.write_text(
            config.read_text().replace("  - Train: train.md\n", "  - Train: train.md\n  - Lost: missing.md\n")
        )
    else:  # a documented parameter the function does not have
        target = copy / "sagerl" / "eval" / "passk.py"
        text = target.read_text()
        source = text.replace(
            'def pass_at_k(n: int, c: int, k: int) -> float:\n    """',
            'def pass_at_k(n: int, c: int, k: int) -> float:\n    """Args:\n        nope: not a parameter.\n\n    ',
            1,
        )
        assert source != text
        target.write_text(source)


@pytest.fixture(scope="module")
def broken_build(tmp_path_factory) -> subprocess.CompletedProcess:
    """One strict build of a copy of the docs with every breakage of :data:`BREAKAGES` at once (one build, not five:
    strict mode logs each problem as a warning and fails at the end, so each must show as a warning line)."""
    copy = _docs_copy(tmp_path_factory.mktemp("broken"))
    for breakage in BREAKAGES:
        _break(copy, breakage)
    return _build(copy, copy.parent / "site")


@pytest.mark.parametrize("breakage", list(BREAKAGES))
def test_a_broken_link_page_or_docstring_fails_the_build(broken_build, breakage):
    output = broken_build.stdout + broken_build.stderr
    assert broken_build.returncode != 0, "the build passed with every breakage"
    assert f"Aborted with {len(BREAKAGES)} warnings in strict mode" in output, output  # one per breakage
    records = re.split(r"\n(?=[A-Z]+ +- )", output)  # a log record and its indented continuation lines
    named = [r for r in records if r.startswith("WARNING") and BREAKAGES[breakage] in r]
    assert named, f"no warning names the {breakage} ({BREAKAGES[breakage]}):\n{output}"


SHIM = "docs/assets/vendor/iframe-worker/shim.js"
SHIM_SHA256 = "e8e412dbcfea9b7e31b5ffa288d7b6035915e714c542f4176a0cdbe262fc9609"  # npm iframe-worker 1.0.4


def test_the_site_loads_nothing_from_the_network(site):
    """Read from files with no network: no page loads a script, a stylesheet or a font from a server (the
    search worker's shim is the local copy mkdocs.yml names, unchanged from its npm release)."""
    remote = re.compile(r"<(?:script|link|img)\b[^>]*\b(?:src|href)=\"(?:https?:)?//[^\"]+\"[^>]*>")
    for page in site.rglob("*.html"):
        html = page.read_text(encoding="utf-8")
        found = [tag for tag in remote.findall(html) if "<a " not in tag]
        assert not found, f"{page.relative_to(site)} loads {found[0]}"
        assert "iframe-worker/shim.js" in html, f"{page.relative_to(site)} lacks the search worker's shim"
    assert hashlib.sha256((ROOT / SHIM).read_bytes()).hexdigest() == SHIM_SHA256


def test_the_home_page_lists_every_page():
    """docs/index.md's table of pages links every page of the navigation (the API reference by its index)."""
    home = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(([\w/.-]+\.md)(?:#[\w-]*)?\)", home))
    pages = [p for p in _nav_pages(ROOT / "mkdocs.yml") if p != "index.md" and not p.startswith("api/")]
    missing = [p for p in [*pages, "api/index.md"] if p not in linked]
    assert not missing, f"docs/index.md's table of pages does not link {missing}"


def test_every_page_is_in_the_nav_and_every_nav_entry_exists():
    docs = ROOT / "docs"
    pages = {p.relative_to(docs).as_posix() for p in docs.rglob("*.md") if "_ext" not in p.parts}
    nav = _nav_pages(ROOT / "mkdocs.yml")
    assert sorted(set(nav)) == sorted(nav), "a page is in the nav twice"
    assert set(nav) == pages


def test_readme_is_a_landing_page_whose_links_exist():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    assert "make demo" in text and "make test" in text
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    local = [link for link in links if not re.match(r"^[a-z]+://", link)]
    assert local, "the README links no page"
    for link in local:
        path, _, anchor = link.partition("#")
        target = (README.parent / path).resolve()
        assert target.exists(), f"README links {link}, which does not exist"
        if anchor and target.suffix == ".md":
            slugs = {_slug(h) for h in re.findall(r"^#+\s+(.*)$", target.read_text(encoding="utf-8"), re.M)}
            assert anchor in slugs, f"README links {link}: no heading with that anchor in {path}"


def _slug(heading: str) -> str:
    """The anchor MkDocs (toc) gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading).strip().lower()
    text = re.sub(r"[^\w\s-]", "", text)
    return re.sub(r"[\s]+", "-", text)
