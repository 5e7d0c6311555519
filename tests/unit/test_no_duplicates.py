"""No two places of product code share 8 or more lines (issue 43).

A small scanner: each product module's lines as their tokens (white space folded, every string
literal as ``""``), blank lines, comments, docstrings and lines of lone brackets or commas left
out; every window of ``WINDOW`` consecutive
such lines is a fingerprint, and a fingerprint found at two places (two files, or two places of one
file) fails the test with both locations. The same logic written twice is folded into one place;
``tools/`` and the tests are not product code (``product_code``).

``KNOWN``: accepted duplicates by (file, first line's text): empty, and an entry that no longer
occurs fails the test (so the set can only shrink back to empty).
"""

from __future__ import annotations

import re
import tokenize
from collections import defaultdict
from pathlib import Path

from product_code import Module, product_modules

WINDOW = 8
_FILLER = re.compile(r"^[()\[\]{},:;\s]*$")  # lone brackets and commas
_SKIP = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING}
_STRINGS = {tokenize.STRING, *(getattr(tokenize, n) for n in ("FSTRING_START",) if hasattr(tokenize, n))}
KNOWN: set[tuple[str, str]] = set()


def code_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, normalized text) of the lines that count: the line's tokens, each string
    literal (f-strings too) as ``""`` so that a block differing only in its messages is still the
    same block, except in lines of strings alone (a table's rows); comments and docstrings dropped."""
    rows: dict[int, list[tokenize.TokenInfo]] = defaultdict(list)
    statement: list[tokenize.TokenInfo] = []
    with path.open("rb") as f:
        for tok in tokenize.tokenize(f.readline):
            if tok.type in (tokenize.NEWLINE, tokenize.ENDMARKER):
                if not (len(statement) == 1 and statement[0].type in _STRINGS):  # a docstring: prose
                    for kept in statement:
                        rows[kept.start[0]].append(kept)
                statement = []
            elif tok.type not in _SKIP:
                statement.append(tok)
    out = []
    for number in sorted(rows):
        toks = rows[number]
        data = all(t.type in _STRINGS or t.type == tokenize.OP for t in toks)  # "a": "b", in a table
        text = " ".join('""' if t.type in _STRINGS and not data else t.string for t in toks)
        if not _FILLER.match(text):
            out.append((number, text))
    return out


def duplicates(modules: list[Module]) -> list[tuple[str, str, str]]:
    """(place, other place, first line) of each run of ``WINDOW`` lines found twice; overlapping
    windows of one run are reported once (at the run's first window)."""
    places: dict[tuple[str, ...], list[tuple[str, int, int]]] = defaultdict(list)
    for module in modules:
        lines = code_lines(module.path)
        for i in range(len(lines) - WINDOW + 1):
            key = tuple(text for _, text in lines[i : i + WINDOW])
            places[key].append((module.rel, lines[i][0], lines[i + WINDOW - 1][0]))
    found = []
    reported: set[tuple[str, int]] = set()
    for key, where in places.items():
        if len(where) < 2:
            continue
        (a, a0, a1), (b, b0, b1) = (
            where[0],
            next((w for w in where[1:] if w[0] != where[0][0] or w[1] > where[0][2]), (None, 0, 0)),
        )
        if b is None:  # one run of alike lines (a table's rows), not a copy
            continue
        if (a, a0 - 1) in reported or (a, a0) in reported:
            reported.add((a, a0))
            continue
        reported.add((a, a0))
        found.append((f"{a}:{a0}-{a1}", f"{b}:{b0}-{b1}", key[0]))
    return found


def _file(place: str) -> str:
    return place.rsplit(":", 1)[0]


def test_no_two_places_of_product_code_share_eight_lines() -> None:
    found = duplicates(list(product_modules()))
    seen = {(_file(a), first) for a, _b, first in found}
    new = [f"{a} ~ {b}  ({first})" for a, b, first in found if (_file(a), first) not in KNOWN]
    assert not new, f"{WINDOW} or more lines written twice (fold them into one place):\n" + "\n".join(new)
    gone = sorted(KNOWN - seen)
    assert not gone, f"folded: remove from KNOWN: {gone}"


def test_the_scanner_reports_both_places_of_a_copied_block(tmp_path: Path) -> None:
    block = "".join(f"x{i} = compute({i})\n" for i in range(WINDOW))
    a = tmp_path / "a.py"
    b = tmp_path / "b.py"
    a.write_text("import os\n\n" + block)
    b.write_text("def f():\n    pass\n" + block.replace("\n", "\n\n    # a comment\n", 1))
    mods = [Module("pkg.a", a, False), Module("pkg.b", b, False)]
    assert duplicates_at(mods, tmp_path) == [("a.py:3-10", "b.py:3-12")]
    b.write_text(block.replace("compute(3)", "compute(33)"))
    assert duplicates_at(mods, tmp_path) == []


def duplicates_at(modules: list[Module], base: Path) -> list[tuple[str, str]]:
    """``duplicates`` with places relative to ``base`` (for modules outside the repository)."""

    class Local(Module):
        @property
        def rel(self) -> str:
            return str(self.path.relative_to(base))

    return [(a, b) for a, b, _ in duplicates([Local(m.name, m.path, m.is_package) for m in modules])]
