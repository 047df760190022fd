"""Make the docs' pictures (docs/images/*.png) from real runs of the tiny model, never by hand:

- report.png: headless Chromium's screenshot of `specdec-eval report` on a tiny Eagle3 run and its sampled twin;
- sweep-grid.png: the same of a tiny `specdec-eval sweep` (KV manager x batch) report;
- pit-pass-fail.png: the report's own PIT histogram of a clean sampled run (PASS) beside the planted
  `rejection_greedy` (FAIL), side by side.

    python scripts/docs/pictures.py [--keep DIR]     # ~3 minutes on 2 cores; Chromium from `make setup-tests`

Screenshots are cropped to the page's content and saved small (palette PNG) so the repository stays light.
"""

from __future__ import annotations

import base64
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
IMAGES = REPO / "docs" / "images"
CLI = [sys.executable, "-m", "specdec_eval.cli.main"]
TINY = ["--model", "tiny", "--tasks", "gsm8k_smoke", "--num-fewshot", "0", "--no-reference"]
SAMPLED = ["--spec", "eagle3", "--spec-sampling", "rejection", "--gen-kwargs", "temperature=0.7"]


def sh(args: list[str], cwd: Path) -> None:
    print("+", " ".join(args[2:] if args[:2] == CLI[:2] else args), file=sys.stderr)
    subprocess.run(args, cwd=cwd, check=args[-1] != "rejection_greedy", stdout=subprocess.DEVNULL)


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if shutil.which(name):
            return shutil.which(name)  # type: ignore[return-value]
    raise SystemExit("no Chromium on PATH: make setup-tests installs it (as root)")


def screenshot(page: Path, out: Path, width: int, height: int, scratch: Path) -> None:
    """A headless Chromium screenshot of `page`, cropped to where the page has content, as a small palette PNG."""
    import numpy as np
    from matplotlib.image import imread
    from PIL import Image

    raw = scratch / (out.stem + "-raw.png")
    cmd = [chromium(), "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run"]
    cmd += [f"--user-data-dir={scratch / 'profile'}", f"--screenshot={raw}", f"--window-size={width},{height}"]
    subprocess.run([*cmd, page.as_uri()], capture_output=True, timeout=120, check=False)
    pixels = imread(raw)[..., :3]
    rows = np.where((np.abs(pixels - pixels[-1:, :, :]).max(axis=(1, 2))) > 0.02)[0]
    bottom = min(int(rows.max()) + 24, pixels.shape[0]) if rows.size else pixels.shape[0]
    Image.open(raw).convert("RGB").crop((0, 0, width, bottom)).quantize(128).save(out, optimize=True)
    print(f"wrote {out.relative_to(REPO)} ({out.stat().st_size // 1024} KiB)", file=sys.stderr)


def pit_pair(clean: Path, planted: Path, out: Path) -> None:
    """The report's PIT histogram (results/report/pit.py) of each run's sampled lossless gate, side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.image import imread
    from specdec_eval.results.report.pit import pit_histogram

    fig, axes = plt.subplots(1, 2, figsize=(12, 2.8), dpi=100)
    for ax, run, title in ((axes[0], clean, "clean rejection sampler"), (axes[1], planted, "rejection_greedy")):
        summary = json.loads((run / "summary.json").read_text())
        record = next(iter(summary["tasks"].values()))["lossless"]
        png = pit_histogram(record, title)
        ax.imshow(imread(io.BytesIO(base64.b64decode(png)), format="png"))
        ax.set_axis_off()
    fig.tight_layout(pad=0.2)
    fig.savefig(out)
    plt.close(fig)
    from PIL import Image

    Image.open(out).convert("RGB").quantize(128).save(out, optimize=True)
    print(f"wrote {out.relative_to(REPO)} ({out.stat().st_size // 1024} KiB)", file=sys.stderr)


def main() -> int:
    keep = sys.argv[sys.argv.index("--keep") + 1] if "--keep" in sys.argv else None
    work = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="docs-pictures-"))
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("OMP_NUM_THREADS", "2")
    IMAGES.mkdir(parents=True, exist_ok=True)

    def newest(root: Path) -> set[Path]:
        return {p.parent for p in root.glob("runs/*/summary.json")}

    before = newest(work)
    sh([*CLI, "run", *TINY, *SAMPLED, "--limit", "8", "--max-output-len", "32"], work)
    clean = max(newest(work) - before, key=lambda p: p.name)
    before = newest(work)
    sh([*CLI, "run", *TINY, *SAMPLED, "--limit", "8", "--max-output-len", "32", "--inject", "rejection_greedy"], work)
    planted = max(newest(work) - before, key=lambda p: p.name)
    pit_pair(clean, planted, IMAGES / "pit-pass-fail.png")

    sh([*CLI, "report", str(clean), str(planted), "-o", str(work / "report.html")], work)
    screenshot(work / "report.html", IMAGES / "report.png", 1100, 2400, work)

    sweep_dir = work / "sweep"
    sh([*CLI, "sweep", "--dir", str(sweep_dir), "--axis", "kv-cache=v1,v2", "--axis", "batch=1,2", "--", *TINY,
        "--spec", "eagle3", "--limit", "2", "--max-output-len", "8"], work)  # fmt: skip
    screenshot(sweep_dir / "report.html", IMAGES / "sweep-grid.png", 1100, 1400, work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
