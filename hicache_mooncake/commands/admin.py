"""``hicache-mooncake admin ACTION``: per-tier operations on running backends, through their admin
endpoints (``admin.port`` in the YAML). By default every rank of this host (found through the
discovery files the ranks write); ``--url`` names endpoints by hand.

Actions: ``show``; ``resize TIER SIZE``; ``detach TIER [--mode drain|drop]``; ``attach TIER
[--path P] [--capacity C] [--set KEY=VALUE]... [--config FILE]``; ``freeze``; ``unfreeze``; ``clear
--tenant NAME``; ``ops``; ``hint pin|unpin|shared|session-open|session-close|show`` (policy hints
on SGLang page hashes, from the arguments or ``--file``); ``lookup HASH... [--tenant T] [--remote]``
(which tier of each rank holds each page, and the leading run held: ``POST /v1/lookup``, read-only);
``layout`` (page geometry, key format, tiers: ``GET /v1/layout``). ``lookup`` and ``layout`` print
the answers as JSON, keyed by endpoint. A long action starts on every rank at
once, then its progress is printed until each rank is done (``--no-wait``: print the operation and
return).

Ranks whose tiers are a host cache (``tiers.host_cache``) label themselves so: tier and tenant
actions go to that cache's service, which serves its own endpoint, once for the host; hints go to
the ranks, which map the page hashes and forward them to the service's policy
(``hicache_mooncake.host_cache.admin_routing``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from hicache_mooncake.admin.auth import TOKEN_FILE, read_token_file, token_path
from hicache_mooncake.admin.client import AdminClient, AdminError, RankEndpoint, rank_endpoints
from hicache_mooncake.admin.hint_routes import MAX_PAGE_HASHES
from hicache_mooncake.admin.server import discovery_dir
from hicache_mooncake.commands import UsageError
from hicache_mooncake.config.admin import TOKEN_ENV, AdminConfig
from hicache_mooncake.config.errors import ConfigError
from hicache_mooncake.config.loader import deep_merge
from hicache_mooncake.host_cache.admin_routing import endpoints_for
from hicache_mooncake.sizes import format_size

_LONG = ("resize", "detach", "attach", "clear")
_JSON_ONLY = ("lookup", "layout")  # answers for routers and scripts: printed as JSON
_HINTS_WITH_TTL = ("pin", "shared")
_HINT_BODY_BYTES = 4 << 20  # hashes per request: at most MAX_PAGE_HASHES and about this much JSON


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "admin",
        help="per-tier operations and policy hints on running backends (show, resize, attach, hint, ...)",
        description=__doc__,
    )
    parser.add_argument("--url", action="append", default=[], help="an admin endpoint (repeatable)")
    parser.add_argument("--discovery-dir", default="", help="where the ranks register (default: admin's)")
    parser.add_argument(
        "--token-file",
        default="",
        help=f"file with the bearer token (default: ${TOKEN_ENV}, else the admin.token the ranks generated in the discovery directory)",
    )
    parser.add_argument("--json", action="store_true", help="print the answers as JSON")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds an operation may take")
    parser.add_argument("--no-wait", action="store_true", help="start long operations and return")
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    actions.add_parser("show", help="tiers, capacities, use, tenants")
    actions.add_parser("ops", help="operations run recently")
    p = actions.add_parser("resize", help="give the DRAM or SSD tier a new size")
    p.add_argument("tier")
    p.add_argument("size", help="e.g. 8GiB")
    p = actions.add_parser("detach", help="take a tier out (drain: move its pages first)")
    p.add_argument("tier")
    p.add_argument("--mode", choices=("drain", "drop"), default="drain")
    p = actions.add_parser("attach", help="add a tier the YAML did not have (ssd, remote, dram)")
    p.add_argument("tier")
    p.add_argument("--path", help="tiers.<tier>.path (ssd)")
    p.add_argument("--capacity", help="tiers.<tier>.capacity")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="any YAML key, dotted")
    p.add_argument("--config", help="a YAML file with the sections to merge (e.g. tiers.remote, metadata)")
    actions.add_parser("freeze", help="refuse new pages (reads go on)")
    actions.add_parser("unfreeze", help="accept new pages again")
    p = actions.add_parser("clear", help="remove one tenant's pages from every tier")
    p.add_argument("--tenant", required=True, help='the tenant ("" for the default one)')
    p = actions.add_parser("lookup", help="which tier holds each page (SGLang page hashes), read-only")
    p.add_argument("keys", nargs="+", metavar="HASH", help="SGLang page hashes, in prefix order")
    p.add_argument("--tenant", help="the tenant the pages belong to (default: the backend's)")
    p.add_argument("--remote", action="store_true", help="ask the remote pool too (network I/O)")
    actions.add_parser("layout", help="page geometry, key format and tiers of each rank (JSON)")
    _register_hints(actions)
    parser.set_defaults(func=run, exit_findings="an operation failed or stopped at its timeout on some rank")


def _register_hints(actions: Any) -> None:
    hint = actions.add_parser(
        "hint",
        help="policy hints: pin pages, mark them shared, open/close a session (SGLang page hashes)",
        description="Tell every rank's eviction policy what will be read again. Pages are named by "
        "SGLang's page hashes, given as arguments and/or --file (one per line, '-': stdin).",
    )
    kinds = hint.add_subparsers(dest="hint_action", metavar="HINT")
    kinds.required = True
    helps = {
        "pin": "keep the pages until --ttl seconds (or unpin)",
        "unpin": "release pinned pages",
        "shared": "mark the pages shared (a system prompt) for --ttl seconds",
        "session-open": "the session's pages will likely be read again",
        "session-close": "the session is over: its pages go first",
    }
    for name, text in helps.items():
        p = kinds.add_parser(name, help=text)
        if name.startswith("session-"):
            p.add_argument("session", help="the session id")
        p.add_argument("hashes", nargs="*", metavar="HASH", help="SGLang page hashes")
        p.add_argument("--file", help="a file of page hashes, one per line ('-': stdin)")
        p.add_argument("--tenant", help="the tenant the pages belong to (default: the backend's)")
        if name in _HINTS_WITH_TTL:
            p.add_argument("--ttl", type=float, required=True, help="seconds the hint holds")
    kinds.add_parser("show", help="pinned, shared and attached pages, open and closed sessions")


def _page_hashes(args: argparse.Namespace) -> list[str]:
    """The page hashes of a hint action: its arguments, then ``--file``'s lines (blank ones and
    ``#`` comments skipped)."""
    hashes = list(args.hashes)
    if args.file:
        try:
            if args.file == "-":
                lines = sys.stdin.read().splitlines()
            else:
                with open(os.path.expanduser(args.file), encoding="utf-8") as f:
                    lines = f.read().splitlines()
        except OSError as exc:
            raise UsageError(f"--file {args.file}: {exc.strerror or exc}") from None
        hashes += [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
    if not hashes and not args.hint_action.startswith("session-"):
        raise UsageError(f"hint {args.hint_action}: name at least one page hash (arguments or --file)")
    return hashes


def _chunks(hashes: list[str]) -> Iterator[list[str]]:
    """``hashes`` in requests the endpoint accepts (``MAX_PAGE_HASHES``, its body limit)."""
    chunk: list[str] = []
    size = 0
    for h in hashes:
        if chunk and (len(chunk) >= MAX_PAGE_HASHES or size + len(h) + 4 > _HINT_BODY_BYTES):
            yield chunk
            chunk, size = [], 0
        chunk.append(h)
        size += len(h) + 4
    yield chunk


def _hint(client: AdminClient, args: argparse.Namespace) -> dict[str, Any]:
    """One hint action on one rank, in as many requests as the hashes need; the last answer with
    the pages of all of them."""
    action = args.hint_action
    if action == "show":
        return client.hints()
    pages = 0
    answer: dict[str, Any] = {}
    for chunk in _chunks(args.page_hashes):
        if action == "pin":
            answer = client.pin(chunk, args.ttl, args.tenant)
        elif action == "unpin":
            answer = client.unpin(chunk, args.tenant)
        elif action == "shared":
            answer = client.mark_shared(chunk, args.ttl, args.tenant)
        else:
            answer = client.session(args.session, action.removeprefix("session-"), chunk, args.tenant)
        pages += int(answer.get("pages", 0))
    return {**answer, "pages": pages}


def _token(args: argparse.Namespace) -> str | None:
    """--token-file, else $HICACHE_MOONCAKE_ADMIN_TOKEN, else the token the ranks generated in the
    discovery directory (``admin.token``; absent: None, and the endpoint will answer 401)."""
    if args.token_file:
        try:
            with open(os.path.expanduser(args.token_file), encoding="utf-8") as f:
                return f.readline().strip() or None
        except OSError as exc:
            raise UsageError(f"--token-file: {exc.strerror or exc}") from None
    from_env = os.environ.get(TOKEN_ENV, "").strip()
    if from_env:
        return from_env
    try:
        return read_token_file(token_path(_directory(args)))
    except FileNotFoundError:
        return None
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


def _directory(args: argparse.Namespace) -> Path:
    return discovery_dir(
        AdminConfig(discovery_dir=os.path.abspath(args.discovery_dir))
        if args.discovery_dir
        else AdminConfig()
    )


def _ranks(args: argparse.Namespace) -> list[RankEndpoint]:
    if args.url:
        return [RankEndpoint(u) for u in args.url]
    directory = _directory(args)
    found = rank_endpoints(directory)
    if not found:
        raise UsageError(f"no admin endpoint registered in {directory} (is admin.port set? or pass --url)")
    try:
        # lookup and layout speak of SGLang page hashes, which the ranks map: routed as hints are
        chosen = endpoints_for("hint" if args.action in _JSON_ONLY else args.action, found)
    except ValueError as exc:
        raise UsageError(f"{directory}: {exc}") from None
    if not chosen:
        raise UsageError(
            f"no endpoint registered in {directory} takes {args.action!r} (hints go to the ranks)"
        )
    return chosen


def _attach_config(args: argparse.Namespace) -> dict[str, Any]:
    config: dict[str, Any] = {}
    if args.config:
        try:
            with open(args.config, encoding="utf-8") as f:
                loaded = yaml.safe_load(f) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise UsageError(f"--config {args.config}: {exc}") from None
        if not isinstance(loaded, dict):
            raise UsageError(f"--config {args.config}: the top level must be a mapping")
        config = loaded
    sets = list(args.set)
    if args.path:
        sets.append(f"tiers.{args.tier}.path={args.path}")
    if args.capacity:
        sets.append(f"tiers.{args.tier}.capacity={args.capacity}")
    for item in sets:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--set {item!r}: expected KEY=VALUE")
        value: Any = yaml.safe_load(raw) if raw else ""
        for part in reversed(key.split(".")):
            value = {part: value}
        config = deep_merge(config, value)
    return config


def _start(client: AdminClient, args: argparse.Namespace) -> dict[str, Any]:
    action = args.action
    if action == "show":
        return client.show()
    if action == "ops":
        return client.operations()
    if action == "freeze":
        return client.freeze(True)
    if action == "unfreeze":
        return client.freeze(False)
    if action == "resize":
        return client.resize(args.tier, args.size, args.timeout)
    if action == "detach":
        return client.detach(args.tier, args.mode, args.timeout)
    if action == "attach":
        return client.attach(args.tier, _attach_config(args), args.timeout)
    if action == "hint":
        return _hint(client, args)
    if action == "lookup":
        return client.lookup(list(args.keys), args.tenant, True if args.remote else None)
    if action == "layout":
        return client.layout()
    return client.clear(args.tenant, args.timeout)


def _progress_line(rank: RankEndpoint, op: dict[str, Any]) -> str:
    p = op.get("progress", {})
    total = f"/{p['total']}" if p.get("total") else ""
    return f"{rank.name}: {op.get('kind')} {op.get('state')} - {p.get('phase')} {p.get('done', 0)}{total} {p.get('unit', '')}".rstrip()


def run(args: argparse.Namespace) -> int:
    token = _token(args)
    if args.action == "hint" and args.hint_action != "show":
        args.page_hashes = _page_hashes(args)
    ranks = _ranks(args)
    clients = [AdminClient(r.url, token) for r in ranks]

    def one(i: int) -> dict[str, Any]:
        try:
            answer = _start(clients[i], args)
            if args.action in _LONG and not args.no_wait and answer.get("state") == "running":
                answer = clients[i].wait(
                    answer, args.timeout + 30, lambda op: print(_progress_line(ranks[i], op), flush=True)
                )
            return answer
        except AdminError as exc:
            if exc.status == 401:
                raise UsageError(
                    f"{ranks[i].url}: {exc} (--token-file, ${TOKEN_ENV}, or the {TOKEN_FILE} the ranks "
                    f"generated in {_directory(args)}: run as the user the ranks run as)"
                ) from None
            if exc.status == 0:
                raise UsageError(str(exc)) from None
            return {"error": str(exc), "status": exc.status}

    with ThreadPoolExecutor(max_workers=min(len(ranks), 16)) as pool:
        answers = list(pool.map(one, range(len(ranks))))
    findings = any(
        answer.get("error") or (args.action in _LONG and not args.no_wait and not answer.get("complete"))
        for answer in answers
    )
    if args.json or args.action in _JSON_ONLY:
        print(json.dumps({r.url: a for r, a in zip(ranks, answers, strict=True)}, indent=2, default=str))
    else:
        for rank, answer in zip(ranks, answers, strict=True):
            _print(rank, args.action, answer)
    return 1 if findings else 0


def _print(rank: RankEndpoint, action: str, answer: dict[str, Any]) -> None:
    if answer.get("error"):
        print(f"{rank.name} ({rank.url}): refused: {answer['error']}")
        return
    if action == "show":
        print(f"{rank.name} ({rank.url}){' FROZEN' if answer.get('frozen') else ''}")
        print(f"  {'tier':8s} {'entries':>10s} {'used':>10s} {'capacity':>10s} {'max':>10s}")
        for t in answer.get("tiers", []):
            print(
                f"  {t['name']:8s} {int(t['entries']):>10d} {format_size(int(t['used_bytes'])):>10s}"
                f" {format_size(int(t['capacity_bytes'])):>10s} {format_size(int(t['max_capacity_bytes'] or 0)):>10s}"
            )
        for name, t in answer.get("tenants", {}).items():
            print(
                f"  tenant {name or '(default)'}: dram {format_size(int(t.get('dram_bytes', 0)))}"
                f" ssd {format_size(int(t.get('ssd_bytes', 0)))} gets {t.get('get_hit_pages', 0)}/{t.get('get_pages', 0)}"
            )
        return
    if action == "ops":
        for op in answer.get("operations", []):
            print(_progress_line(rank, op))
        return
    if action == "hint":
        h = answer.get("hints", {})
        done = f"{answer['action']} {answer['pages']} pages" if "action" in answer else "hints"
        ttl = f" for {answer['ttl_s']:g}s" if "ttl_s" in answer else ""
        print(
            f"{rank.name}: {done}{ttl}; pinned {h.get('keys_pinned', 0)}, shared {h.get('keys_shared', 0)},"
            f" in sessions {h.get('keys_attached', 0)}, sessions open {h.get('sessions_open', 0)}"
            f" closed {h.get('sessions_closed', 0)}"
        )
        return
    if "kind" in answer:
        p = {
            k: v for k, v in answer.get("progress", {}).items() if k not in ("phase", "done", "total", "unit")
        }
        status = "complete" if answer.get("complete") else answer.get("state")
        print(
            f"{rank.name}: {answer['kind']} {status}{': ' + answer['error'] if answer.get('error') else ''} {p}"
        )
        return
    print(f"{rank.name}: {json.dumps(answer, default=str)}")
