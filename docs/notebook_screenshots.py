"""Make the notebook screenshots of docs/notebooks.md (docs/images/notebook_*.png).

1. The xlgraph kernel is installed into a temporary ``JUPYTER_DATA_DIR``
   (``python -m xlgraph.popxl_compat --install-kernel --user``).
2. ``jupyter nbconvert --to html --execute`` runs ``examples/notebooks/ipu_model_report.ipynb``
   in it and renders the page, outputs included.
3. Headless chromium (Debian's, through Selenium and the system chromedriver) screenshots the
   inline drawing of the Ir and the inline report into ``docs/images``.

Run: ``PYTHONPATH=. python docs/notebook_screenshots.py [--out /tmp/notebook-pages]``
(needs the ``notebook``, ``report`` and ``image`` extras and Graphviz).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IMAGES = ROOT / "docs" / "images"
NOTEBOOK = ROOT / "examples" / "notebooks" / "ipu_model_report.ipynb"
KERNEL = "xlgraph-docs"


def render(out: Path) -> Path:
    """The executed notebook as HTML in ``out``."""
    env = dict(os.environ, JUPYTER_DATA_DIR=str(out / "jupyter"))
    subprocess.run([sys.executable, "-m", "xlgraph.popxl_compat", "--install-kernel", "--user",
                    "--name", KERNEL], check=True, env=env)
    subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", "--to", "html", "--execute",
                    f"--ExecutePreprocessor.kernel_name={KERNEL}", "--output-dir", str(out),
                    str(NOTEBOOK)], check=True, env=env, cwd=out)
    return out / NOTEBOOK.with_suffix(".html").name


def screenshots(page: Path) -> None:
    """The Ir's drawing (its output) and the report's cell as docs/images/notebook_*.png."""
    from report_screenshots import headless_chromium  # docs/, beside this script
    from selenium.webdriver.common.by import By

    browser = headless_chromium(1100, 1400)
    try:
        browser.get(page.resolve().as_uri())
        for name, selector, around, width in (
                ("notebook_graph", ".jp-RenderedSVG", "jp-OutputArea-child", 3200),
                ("notebook_report", "iframe[title='IPU model report']", "jp-Cell", 1100)):
            browser.set_window_size(width, 1400)  # the drawing at its own size, uncut
            element = browser.find_element(By.CSS_SELECTOR, selector)
            cell = element.find_element(By.XPATH, f"ancestor::div[contains(@class, '{around}')]")
            browser.execute_script("arguments[0].scrollIntoView()", cell)
            time.sleep(2)  # plotly draws the report's charts after the page loads
            cell.screenshot(str(IMAGES / f"{name}.png"))
            shrink(IMAGES / f"{name}.png", 1600)
    finally:
        browser.quit()


def shrink(path: Path, width: int) -> None:
    """Scale the PNG at ``path`` down to ``width`` pixels (a wide drawing stays legible)."""
    from PIL import Image

    image = Image.open(path)
    if image.width > width:
        image = image.resize((width, round(image.height * width / image.width)), Image.LANCZOS)
        image.save(path, optimize=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/notebook-pages"),
                        help="where the kernel and the rendered page go")
    out = parser.parse_args().out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    screenshots(render(out))


if __name__ == "__main__":
    main()
