"""A minimal OpenAI-style HTTP client on the standard library: one JSON POST, errors turned into one line.

Requests run in threads so a batch keeps N requests in flight; each measures its own client-side wall time.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Sequence


class RequestFailed(Exception):
    """A request that got no usable answer: an HTTP error status (``status`` set) or no connection (None)."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Answer:
    body: dict[str, Any]
    seconds: float  # wall time from sending the request to the last byte of the answer, client side


def error_message(raw: bytes) -> str:
    """The server's own words from an error body ({"error": {"message"}} or {"message"}), on one line."""
    try:
        body = json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace").strip()[:300] or "no message"
    error = body.get("error", body) if isinstance(body, dict) else body
    message = error.get("message", error) if isinstance(error, dict) else error
    return " ".join(str(message).split())[:300]


def post_json(url: str, payload: dict[str, Any], timeout: float) -> Answer:
    data = json.dumps(payload).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"}, method="POST")
    start = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            raw = response.read()
    except urllib.error.HTTPError as error:
        raise RequestFailed(f"HTTP {error.code}: {error_message(error.read())}", error.code) from None
    except (OSError, ValueError) as error:  # refused, reset, timed out
        raise RequestFailed(f"no answer ({getattr(error, 'reason', None) or error})") from None
    seconds = time.perf_counter() - start
    try:
        return Answer(json.loads(raw), seconds)
    except ValueError:
        raise RequestFailed("the answer is not JSON") from None


def post_all(requests: Sequence[tuple[str, dict[str, Any]]], timeout: float) -> list[Answer | RequestFailed]:
    """All (url, payload) requests in flight at once; each slot holds its answer or the failure it met."""

    def one(request: tuple[str, dict[str, Any]]) -> Answer | RequestFailed:
        try:
            return post_json(*request, timeout)
        except RequestFailed as failure:
            return failure

    if len(requests) == 1:
        return [one(requests[0])]
    with ThreadPoolExecutor(max_workers=len(requests)) as pool:
        return list(pool.map(one, requests))
