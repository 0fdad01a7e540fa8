"""``xlgraph-report``: a saved profile as a page, or two compared.

``xlgraph-report profile.json -o report.html`` writes the report page of one profile (what
``report.save``, ``poptorch.Options().enableProfiling(dir)`` or PopXL's ``autoReport`` engine
options wrote); ``xlgraph-report before.json after.json -o diff.html`` the compare page.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from xlgraph.errors import ProfileFormatError

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="xlgraph-report",
        description="Write the IPU model's profile report (report.save's JSON) as a "
                    "self-contained HTML page; with two profiles, a page comparing them.")
    parser.add_argument("profiles", nargs="+", type=Path, metavar="PROFILE",
                        help="profile.json, or before.json after.json to compare")
    parser.add_argument("-o", "--output", type=Path, default=None,
                        help="the HTML file (default: report.html, or diff.html for two)")
    return parser


def _same_file(a: Path, b: Path) -> bool:
    """Whether paths ``a`` and ``b`` name one file (through links, ``..`` or hard links)."""
    try:
        return a.resolve() == b.resolve() or (a.exists() and b.exists() and a.samefile(b))
    except OSError:
        return False


def main(argv: list[str] | None = None) -> int:
    """Run the command; returns the exit status (errors print one line)."""
    parser = _parser()
    args = parser.parse_args(argv)
    if len(args.profiles) > 2:
        parser.error(f"expected one profile or two to compare, got {len(args.profiles)}")
    output = args.output or Path("report.html" if len(args.profiles) == 1 else "diff.html")
    for profile in args.profiles:
        if _same_file(profile, output):
            print(f"xlgraph-report: the output {output} is the profile {profile}: writing the "
                  f"page there would replace the profile; give another -o", file=sys.stderr)
            return 2
    from xlgraph.ipu.page import require_plotly, write_compare, write_report
    from xlgraph.ipu.report import ProfileReport

    try:
        require_plotly()
        reports = [ProfileReport.load(p) for p in args.profiles]
    except (ImportError, ProfileFormatError, OSError) as exc:
        print(f"xlgraph-report: {exc}", file=sys.stderr)
        return 2
    try:
        if len(reports) == 1:
            out = write_report(reports[0], output)
        else:
            first, second = args.profiles
            names = (first.name, second.name) if first.name != second.name else (
                str(first), str(second))
            out = write_compare(reports[0], reports[1], output, names)
    except OSError as exc:
        print(f"xlgraph-report: cannot write the page: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
