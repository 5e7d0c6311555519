"""What the e2e tests send and compare: prompts as token ids, greedy answers, the reference answers
of a model with no cache at all (transformers, in the test process), and the readings of SGLang's
``/metrics`` and our backend's own endpoints."""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from e2e_server import Server, http

PAGE = 64
FIRST_TOKEN_ID = 4  # after the special tokens
VOCAB = 1004
NEW_TOKENS = 8


def token_ids(count: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(FIRST_TOKEN_ID, VOCAB) for _ in range(count)]


def shared_prefix_prompts(seed: int, count: int = 3, shared: int = 896, own: int = 124) -> list[list[int]]:
    """``count`` prompts of ``shared + own`` tokens that share their first ``shared`` tokens."""
    prefix = token_ids(shared, seed)
    return [prefix + token_ids(own, seed * 1000 + i + 1) for i in range(count)]


def generate(server: Server, ids: list[int], timeout: float = 300.0) -> dict[str, Any]:
    body = {
        "input_ids": ids,
        "sampling_params": {"temperature": 0.0, "max_new_tokens": NEW_TOKENS, "ignore_eos": True},
    }
    status, reply = http("POST", f"{server.url}/generate", body, timeout=timeout)
    if status != 200 or not isinstance(reply, dict):
        raise AssertionError(f"/generate answered {status}: {reply!r}")
    return reply


def storage_tokens(reply: dict[str, Any]) -> int:
    """Prompt tokens SGLang took from L3 for this request (``--enable-cache-report``)."""
    details = reply["meta_info"].get("cached_tokens_details") or {}
    return int(details.get("storage", 0))


class Reference:
    """Greedy answers of the same weights with no cache at all: transformers' LlamaForCausalLM on
    the CPU in float32, one full forward per new token."""

    def __init__(self, model_dir: Path) -> None:
        import torch
        from transformers import AutoModelForCausalLM

        self._torch = torch
        self._model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
        self._memo: dict[tuple[int, ...], list[int]] = {}

    def answer(self, ids: list[int]) -> list[int]:
        key = tuple(ids)
        if key not in self._memo:
            torch = self._torch
            seq = list(ids)
            out: list[int] = []
            with torch.no_grad():
                for _ in range(NEW_TOKENS):
                    logits = self._model(torch.tensor([seq])).logits[0, -1]
                    nxt = int(torch.argmax(logits))
                    out.append(nxt)
                    seq.append(nxt)
            self._memo[key] = out
        return self._memo[key]


def sglang_metric(server: Server, name: str) -> float:
    """Sum of every sample of SGLang's ``/metrics`` counter ``name`` (all label sets)."""
    return sum(v for k, v in server.metrics().items() if k == name or k.startswith(name + "{"))


def prom(url: str) -> dict[str, float]:
    status, text = http("GET", url)
    assert status == 200, text
    out: dict[str, float] = {}
    for line in str(text).splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            with contextlib.suppress(ValueError):
                out[name] = float(value)
    return out


def wait_for(what: str, check: Callable[[], Any], timeout_s: float = 60.0, every_s: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what} (last: {last!r})")


class OurEndpoints:
    """The backend's own admin endpoint and metrics of one rank, from the YAML's ports."""

    def __init__(self, admin_port: int, metrics_port: int, token_file: Path) -> None:
        self.admin = f"http://127.0.0.1:{admin_port}"
        self.metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
        self.token_file = token_file

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        token = self.token_file.read_text().splitlines()[0].strip()
        return http(method, self.admin + path, body, headers={"Authorization": f"Bearer {token}"})

    def tiers(self) -> dict[str, dict[str, Any]]:
        status, body = self.call("GET", "/v1/tiers")
        assert status == 200, body
        return {t["name"]: t for t in body["tiers"]}

    def stored_pages(self) -> int:
        return sum(int(t["entries"]) for t in self.tiers().values())

    def tier_hits(self) -> dict[str, float]:
        """Pages a get found, per tier (our ``hicache_mooncake:tier_hits_total``)."""
        out: dict[str, float] = {}
        for key, value in prom(self.metrics_url).items():
            if key.startswith("hicache_mooncake:tier_hits_total{"):
                tier = key.split('tier="', 1)[1].split('"', 1)[0]
                out[tier] = out.get(tier, 0.0) + value
        return out


ADMIN_API_KEY = "e2e-admin-key"
"""``--admin-api-key`` of every e2e server: SGLang's admin routes (and /flush_cache) need it."""


def sglang_admin(
    server: Server, method: str, path: str, body: Any = None, key: str | None = ADMIN_API_KEY
) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return http(method, server.url + path, body, headers=headers)


def flush(server: Server) -> None:
    """``/flush_cache``: SGLang drops the device and host pools (L3 keeps its pages)."""
    status, body = sglang_admin(server, "POST", "/flush_cache")
    assert status == 200, body


def written_bytes(ours: OurEndpoints, tier: str) -> float:
    """Bytes our backend wrote to ``tier`` (``hicache_mooncake:tier_written_bytes_total``)."""
    return sum(
        v
        for k, v in prom(ours.metrics_url).items()
        if k.startswith("hicache_mooncake:tier_written_bytes_total{") and f'tier="{tier}"' in k
    )
