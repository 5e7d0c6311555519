"""``hicache-mooncake fsck PATH...``: verify SSD tier directories (and optionally repair them).

A PATH is an SSD engine directory or a ``tiers.ssd.path`` (every rank directory under it is
checked). Exit status: 0 clean; 1 data lost or damaged (corrupt, torn or misdirected entries,
dropped when ``--repair``; region files missing, truncated or swapped) or a failed clear recorded
(``ssd.clear_record``: the engine refuses every call until ``--repair`` finishes the clear); 2 when
a path is not an SSD engine directory, is in use during ``--repair``, or a failed clear cannot be
finished. A superblock the engine tolerates (it opens
the directory anyway) is a warning, not an error.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def register(sub: Any) -> None:
    parser = sub.add_parser("fsck", help="verify SSD tier files: entries, bytes, corrupt, torn (by region)")
    parser.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="SSD engine directory, or a tiers.ssd.path (checks every rank directory under it)",
    )
    parser.add_argument(
        "--repair",
        action="store_true",
        help="drop bad entries (marks them dead on disk); finish a clear that could not write its epoch",
    )
    parser.add_argument(
        "--json",
        dest="json_out",
        nargs="?",
        const="-",
        default=None,
        help="write the report as JSON (to a file, or stdout)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(
        func=run,
        exit_findings="corrupt or torn entries, lost regions or a failed clear found (--repair fixes)",
    )


def run(args: argparse.Namespace) -> int:
    from hicache_mooncake.ssd.errors import SsdInUseError
    from hicache_mooncake.ssd.fsck import fsck

    try:
        report = fsck(args.paths, repair=args.repair, progress=not args.no_progress and sys.stderr.isatty())
    except SsdInUseError as e:
        print(f"fsck: {e}", file=sys.stderr)
        return 2
    if args.json_out == "-":
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(report.summary())
        if args.json_out:
            with open(args.json_out, "w", encoding="utf-8") as f:
                json.dump(report.to_dict(), f, indent=2)
    if report.errors:
        return 2
    return 0 if report.clean else 1
