"""Make the report-page screenshots of docs/ipu_model.md (docs/images/report_*.png).

1. The seed-003 model (``examples/mnist/poptorch_port.py``: the PopTorch Fashion-MNIST
   classifier, batch 16, SGD lr 0.001 momentum 0.9) trains 20 steps on random 28 x 28 images
   through ``poptorch.trainingModel`` with ``Options().enableProfiling(<out>/seed003)``, which
   writes ``seed003/profile.json`` at compile time and again at ``detachFromDevice`` (with the
   host-side time measured). ``xlgraph-report seed003/profile.json -o seed003.html``.
2. The examples' two CNNs (``examples/mnist/fashion.py``'s classifier and ``cnn.py``'s MNIST
   CNN), as ``benchmarks/ipu_model_epochs.py`` builds their training programs on a whole chip,
   saved as ``fashion_cnn.json`` and ``mnist_cnn.json``;
   ``xlgraph-report fashion_cnn.json mnist_cnn.json -o compare.html``.
3. Headless chromium (Debian's, through Selenium and the system chromedriver) screenshots each
   view into ``docs/images``.

Run: ``PYTHONPATH=. python docs/report_screenshots.py [--out /tmp/report-pages]``.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
IMAGES = ROOT / "docs" / "images"
REPORT_VIEWS = ("view-tiles", "view-categories", "view-liveness", "view-operations",
                "view-time")
COMPARE_VIEWS = ("view-diff-summary", "view-side-by-side", "view-diff-operations")


def seed003_profile(out: Path, steps: int = 20) -> Path:
    """Train the seed-003 model ``steps`` steps with profiling on; its profile.json."""
    sys.path.insert(0, str(ROOT / "examples" / "mnist"))
    import torch
    from poptorch_port import ClassificationModel, ModelwithLoss

    import xlgraph.poptorch as poptorch

    torch.manual_seed(0)
    opts = poptorch.Options().enableProfiling(str(out / "seed003"))
    model = ClassificationModel()
    optimizer = poptorch.optim.SGD(model.parameters(), lr=0.001, momentum=0.9)
    training = poptorch.trainingModel(ModelwithLoss(model, torch.nn.CrossEntropyLoss()),
                                      options=opts, optimizer=optimizer)
    for _ in range(steps):
        training(torch.randn(16, 1, 28, 28), torch.randint(0, 10, (16,)))
    training.detachFromDevice()
    return out / "seed003" / "profile.json"


def cnn_profiles(out: Path) -> tuple[Path, Path]:
    """The examples' two CNN training programs on a whole chip, saved."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import ipu_model_epochs as programs

    import xlgraph

    paths = []
    for name, file in (("seed003_fashion_poptorch", "fashion_cnn.json"),
                       ("seed000_mnist_cnn", "mnist_cnn.json")):
        session = xlgraph.Session(programs.build(name), "ipu_model",
                                  ipu_model=xlgraph.IPUModel.full())
        paths.append(session.report().save(out / file))
    return paths[0], paths[1]


def report_command(*args: str | Path) -> None:
    """``xlgraph-report ARGS`` (the console script, else the module)."""
    script = shutil.which("xlgraph-report")
    command = [script] if script else [sys.executable, "-m", "xlgraph.ipu.page.cli"]
    subprocess.run([*command, *map(str, args)], check=True)


def headless_chromium(width: int, height: int) -> Any:
    """Debian's chromium, headless, through Selenium and the system chromedriver."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                f"--window-size={width},{height}", "--force-device-scale-factor=1"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)


def screenshots(page: Path, views: tuple[str, ...], prefix: str, select: bool = False) -> None:
    """Each view of ``page`` as docs/images/<prefix>_<view>.png; with ``select``, after sorting
    the operation table by cycles and clicking its first convolution (highlighted on the
    liveness chart)."""
    from selenium.webdriver.common.by import By

    browser = headless_chromium(1300, 2200)
    try:
        browser.get(page.resolve().as_uri())
        if select:
            browser.find_element(By.CSS_SELECTOR, "#ops-table th[data-key=cycles]").click()
            browser.find_element(By.XPATH, "//table[@id='ops-table']/tbody/tr[td[3]='conv']"
                                 ).click()
            browser.execute_script("document.querySelectorAll('.scroll')"
                                   ".forEach(e => { e.scrollLeft = 0; e.scrollTop = 0; })")
        for view in views:
            element = browser.find_element(By.ID, view)
            browser.execute_script("arguments[0].scrollIntoView()", element)
            name = view.removeprefix("view-").replace("-", "_")
            element.screenshot(str(IMAGES / f"{prefix}_{name}.png"))
    finally:
        browser.quit()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/report-pages"),
                        help="where the profiles and pages go")
    out = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    IMAGES.mkdir(parents=True, exist_ok=True)
    report_command(seed003_profile(out), "-o", out / "seed003.html")
    fashion, mnist = cnn_profiles(out)
    report_command(fashion, mnist, "-o", out / "compare.html")
    screenshots(out / "seed003.html", REPORT_VIEWS, "report", select=True)
    screenshots(out / "compare.html", COMPARE_VIEWS, "compare")


if __name__ == "__main__":
    main()
