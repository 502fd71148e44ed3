"""The documentation site as a reader sees it: every page rendered by headless Chromium from file://, with no
network, at 1280 px (a laptop) and 390 px (a phone). ``make docs-check`` builds the site and runs this.

Fails (one line per failure: page, width, what) when, on a page:

- the page scrolls sideways (at either width);
- a code block is wider than its column at 1280 px (at 390 px a block scrolls inside its own frame), or the
  copy button covers a character of the code;
- an image does not load, or is not a link to itself at full size (the lightbox);
- math is not typeset: an ``arithmatex`` span the build left, raw LaTeX (``$...$``, ``\\frac``) in the text,
  a formula the browser does not lay out, a displayed formula wider than the column at 1280 px;
- an identifier in a table (a code span in a cell) is broken over two lines;
- the search box is missing; and, on the home page and an API page, a query finds no result;
- the page asks for anything over the network (a CDN), or logs a JavaScript error.

Needs Chromium and its driver (Debian: ``apt-get install chromium chromium-driver``) and selenium (the ``docs``
extra). ``python -m tests.docs.browser_check SITE [--screenshots DIR] [--pages GLOB]``.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

WIDTHS = (1280, 390)
HEIGHT = 900
SEARCH_PAGES = ("index.html", "api/train-config.html")
SEARCH_QUERY = "SAGEConfig"
OPTIONAL_REQUESTS = ("https://api.github.com/repos/", "https://gitlab.com/api/")
"""Requests a page may make and do without: the star and release counts Material fetches for the header's
repository link (mkdocs.yml repo_url); offline they fail and the link shows without them."""
BROWSERS = ("chromium", "chromium-browser", "google-chrome")
CHROME_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--hide-scrollbars",
    "--disable-dev-shm-usage",  # containers often have a small /dev/shm
    # No network: names do not resolve and every request goes to a closed port (file:// is not affected).
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--proxy-server=http://127.0.0.1:9",
)

# Run in the page; returns the problems it sees, as strings. `wide` is true at the laptop width.
MEASURE = r"""
const wide = arguments[0];
const out = [];
const root = document.documentElement;
const visible = (e) => e.getClientRects().length > 0 && getComputedStyle(e).visibility !== "hidden";
const px = (n) => Math.round(n) + " px";
const text = (e) => (e.textContent || "").trim().replace(/\s+/g, " ").slice(0, 60);
if (root.scrollWidth > root.clientWidth + 1)
  out.push("the page scrolls sideways: " + px(root.scrollWidth - root.clientWidth) + " wider than the window");
const stats = {code: 0, images: 0, math: 0, tables: 0};
for (const code of document.querySelectorAll(".md-content pre > code")) {
  if (!visible(code)) continue;
  stats.code += 1;
  const pre = code.parentElement;
  if (wide && code.scrollWidth > code.clientWidth + 1)
    out.push("code block overflows its column by " + px(code.scrollWidth - code.clientWidth) + ": " + text(code));
  // Material's copy button (shown on hover; measured whether shown or not)
  const button = pre.querySelector(".md-code__button, .md-clipboard");
  if (button && visible(button)) {
    const b = button.getBoundingClientRect();
    const walker = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
    let covered = null;
    for (let node = walker.nextNode(); node && !covered; node = walker.nextNode()) {
      const range = document.createRange();
      for (let i = 0; i < node.length && !covered; i++) {
        if (!node.data[i].trim()) continue;
        range.setStart(node, i); range.setEnd(node, i + 1);
        for (const r of range.getClientRects())
          if (r.right > b.left && r.left < b.right && r.bottom > b.top && r.top < b.bottom) covered = node.data[i];
      }
    }
    if (covered) out.push("the copy button covers code (" + JSON.stringify(covered) + "): " + text(code));
  }
}
for (const img of document.querySelectorAll(".md-content img")) {
  stats.images += 1;
  if (!img.complete || img.naturalWidth === 0) { out.push("image does not load: " + img.getAttribute("src")); continue; }
  const link = img.closest("a");
  if (!link || new URL(link.href, location.href).href !== new URL(img.src, location.href).href)
    out.push("image is not a link to itself at full size: " + img.getAttribute("src"));
}
for (const left of document.querySelectorAll(".arithmatex")) out.push("math left untypeset: " + text(left));
for (const math of document.querySelectorAll(".md-content math")) {
  stats.math += 1;
  const r = math.getBoundingClientRect();
  if (r.width < 1 || r.height < 1) out.push("a formula is not laid out (no MathML support?): " + text(math));
}
const column = document.querySelector(".md-content__inner") || document.body;
const right = column.getBoundingClientRect().right - parseFloat(getComputedStyle(column).paddingRight);
for (const inline of document.querySelectorAll(".md-content span.math")) {
  if (inline.closest("table, .md-typeset__scrollwrap")) continue;  // a table scrolls in its own frame
  const r = inline.getBoundingClientRect();
  if (r.right > right + 1) out.push("an inline formula runs out of the column by " + px(r.right - right) + ": " + text(inline));
}
for (const block of document.querySelectorAll(".md-content div.math")) {
  if (wide && block.scrollWidth > block.clientWidth + 1)
    out.push("a displayed formula is wider than the column by " + px(block.scrollWidth - block.clientWidth));
}
const prose = document.createTreeWalker(document.querySelector(".md-content") || document.body, NodeFilter.SHOW_TEXT, {
  acceptNode: (n) => n.parentElement.closest("pre, code, math, script, style, .md-search") ? NodeFilter.FILTER_REJECT
                                                                                           : NodeFilter.FILTER_ACCEPT,
});
for (let node = prose.nextNode(); node; node = prose.nextNode()) {
  const m = node.data.match(/\$[^\s$][^$]{0,200}?[^\s$\\]\$|\\(frac|text|mathrm|beta|pi|sum|left|right|cdot)\b/);
  if (m) out.push("raw LaTeX in the text: " + JSON.stringify(m[0].slice(0, 60)));
}
for (const code of document.querySelectorAll(".md-content table code")) {
  if (!visible(code)) continue;
  stats.tables += 1;
  if (code.getClientRects().length > 1) out.push("identifier broken over two lines in a table: " + text(code));
}
const search = document.querySelector(".md-search__input");
const toggle = document.querySelector("label[for='__search']");
if (!search || !(visible(search) || (toggle && visible(toggle)))) out.push("no search box");
return {problems: out, stats: stats};
"""

SEARCH = r"""
const done = arguments[arguments.length - 1];
const start = Date.now();
(function poll() {
  const items = document.querySelectorAll(".md-search-result__item").length;
  const meta = document.querySelector(".md-search-result__meta");
  if (items > 0 || Date.now() - start > 10000) done({items: items, meta: meta ? meta.textContent.trim() : ""});
  else setTimeout(poll, 100);
})();
"""


@dataclass
class Result:
    pages: int = 0
    renders: int = 0
    failures: list[str] = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        self.failures = []


def browser(profile: Path):
    """A headless Chromium driven by selenium (Debian's chromium and chromium-driver; nothing downloaded), with
    its profile in ``profile``.

    Raises:
        SystemExit: no Chromium or no chromedriver on PATH (names the Debian packages).
    """
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary = next((shutil.which(name) for name in BROWSERS if shutil.which(name)), None)
    driver = shutil.which("chromedriver")
    if binary is None or driver is None:
        raise SystemExit(
            "docs-check needs Chromium and its driver: apt-get install -y chromium chromium-driver "
            f"(found browser={binary}, chromedriver={driver})"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in (*CHROME_FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    return webdriver.Chrome(options=options, service=Service(driver))


def _network_requests(driver) -> list[str]:
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            url = message["params"]["request"]["url"]
            if url.startswith(("http:", "https:", "ws:", "wss:")) and not url.startswith(OPTIONAL_REQUESTS):
                urls.append(url)
    return urls


def _errors(driver) -> list[str]:
    return [
        e["message"][:200]
        for e in driver.get_log("browser")
        if e["level"] == "SEVERE" and not e["message"].startswith(OPTIONAL_REQUESTS)
    ]


def _search(driver) -> str | None:
    """Type the query into the search box; None when results come, else what the box says."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By

    try:
        toggle = driver.find_elements(By.CSS_SELECTOR, "label.md-header__button[for='__search']")
        box = driver.find_element(By.CSS_SELECTOR, ".md-search__input")
        if not box.is_displayed() and toggle:
            toggle[0].click()
        box.click()
        box.send_keys(SEARCH_QUERY)
        found = driver.execute_async_script(SEARCH)
    except WebDriverException as exc:
        return f"the search box cannot be used: {exc.msg}"
    return None if found["items"] > 0 else f"search for {SEARCH_QUERY!r} finds nothing ({found['meta']!r})"


def check(site: Path, screenshots: Path | None = None, pattern: str = "*") -> Result:
    site = site.resolve()
    pages = sorted(
        p.relative_to(site).as_posix()
        for p in site.rglob("*.html")
        if p.name != "404.html" and fnmatch.fnmatch(p.relative_to(site).as_posix(), pattern)
    )
    result = Result(pages=len(pages))
    profile = tempfile.TemporaryDirectory(prefix="sagerl-docs-check-")
    driver = browser(Path(profile.name))
    driver.set_script_timeout(20)
    try:
        for width in WIDTHS:
            driver.execute_cdp_cmd(
                "Emulation.setDeviceMetricsOverride",
                {"width": width, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": width < 600},
            )
            for page in pages:
                where = f"{page} @ {width} px"
                driver.get((site / page).as_uri())
                driver.execute_async_script("document.fonts.ready.then(() => arguments[0]())")
                measured = driver.execute_script(MEASURE, width >= 1000)
                problems = list(measured["problems"])
                if screenshots is not None:  # before the search opens its panel over the page
                    _screenshot(driver, screenshots / f"{page.replace('/', '_')[:-5]}-{width}.png", width)
                if page in SEARCH_PAGES:
                    failed = _search(driver)
                    problems += [failed] if failed else []
                problems += [
                    f"network request (the site must work offline): {u}" for u in _network_requests(driver)
                ]
                problems += [f"JavaScript error: {e}" for e in _errors(driver)]
                result.failures += [f"{where}: {p}" for p in problems]
                result.renders += 1
    finally:
        driver.quit()
        profile.cleanup()
    return result


def _screenshot(driver, path: Path, width: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    height = min(driver.execute_script("return document.documentElement.scrollHeight"), 16000)
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600},
    )
    time.sleep(0.2)
    driver.save_screenshot(str(path))
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": width < 600},
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("site", type=Path, help="the built site (mkdocs build --site-dir SITE)")
    parser.add_argument("--screenshots", type=Path, help="save a full-page PNG of every page and width here")
    parser.add_argument("--pages", default="*", help="only the pages matching this glob (e.g. 'api/*')")
    args = parser.parse_args(argv)
    if not (args.site / "index.html").is_file():
        parser.error(f"{args.site}: no index.html; build the site first (make docs)")
    start = time.monotonic()
    result = check(args.site, args.screenshots, args.pages)
    for failure in result.failures:
        print(failure)
    print(
        f"docs-check: {result.pages} pages x {len(WIDTHS)} widths ({', '.join(f'{w} px' for w in WIDTHS)}) "
        f"checked from file:// with no network in {time.monotonic() - start:.0f} s: "
        f"{len(result.failures)} failure{'s' if len(result.failures) != 1 else ''}"
    )
    return 1 if result.failures else 0


if __name__ == "__main__":
    sys.exit(main())
