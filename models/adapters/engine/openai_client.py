"""A minimal OpenAI-style HTTP client on the standard library: one JSON POST (or one streamed answer), retries, and
errors turned into one line.

Requests run in threads so a batch keeps N requests in flight; each measures its own client-side wall time. A
streamed answer (server-sent events) is assembled into the body an unstreamed one has, and keeps what only a stream
shows: when its first chunk of text came and how many chunks the text came in (a block-diffusion server sends a
block per chunk, so no per-token figure is derived from the chunks' times).
"""

from __future__ import annotations

import dataclasses
import json
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence, TypeVar


class RequestFailed(Exception):
    """A request that got no usable answer: an HTTP error status (``status`` set) or no connection (None)."""

    def __init__(self, message: str, status: int | None = None, attempts: int = 1):
        super().__init__(message)
        self.status = status
        self.attempts = attempts

    @property
    def retryable(self) -> bool:
        """No connection, or the server's own failure (5xx): worth asking again; a 4xx would fail the same way."""
        return self.status is None or self.status >= 500


@dataclass(frozen=True)
class Answer:
    body: dict[str, Any]
    seconds: float  # wall time from sending the request to the last byte of the answer, client side
    first_chunk_s: float | None = None  # streamed: from sending to the first chunk that carried generated text
    chunks: int | None = None  # streamed: server-sent events that carried generated text; None when not streamed
    attempts: int = 1  # requests sent for this answer (retries after connection errors and 5xx included)


def error_message(raw: bytes) -> str:
    """The server's own words from an error body ({"error": {"message"}} or {"message"}), on one line."""
    try:
        body = json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace").strip()[:300] or "no message"
    error = body.get("error", body) if isinstance(body, dict) else body
    message = error.get("message", error) if isinstance(error, dict) else error
    return " ".join(str(message).split())[:300]


def _request(url: str, payload: dict[str, Any], headers: Mapping[str, str] | None) -> urllib.request.Request:
    return urllib.request.Request(url, data=json.dumps(payload).encode(), method="POST",
                                  headers={"Content-Type": "application/json", **(headers or {})})


def _open(request: urllib.request.Request, timeout: float):
    """The open response, or RequestFailed: an HTTP status with the server's message, or no connection."""
    try:
        return urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as error:
        raise RequestFailed(f"HTTP {error.code}: {error_message(error.read())}", error.code) from None
    except (OSError, ValueError) as error:  # refused, reset, timed out
        raise RequestFailed(f"no answer ({getattr(error, 'reason', None) or error})") from None


def post_json(url: str, payload: dict[str, Any], timeout: float,
              headers: Mapping[str, str] | None = None) -> Answer:
    start = time.perf_counter()
    try:
        with _open(_request(url, payload, headers), timeout) as response:
            raw = response.read()
    except (OSError, ValueError) as error:  # reset while reading
        raise RequestFailed(f"no answer ({error})") from None
    seconds = time.perf_counter() - start
    try:
        return Answer(json.loads(raw), seconds)
    except ValueError:
        raise RequestFailed("the answer is not JSON") from None


def fetch_json(url: str, timeout: float, headers: Mapping[str, str] | None = None) -> Any:
    """GET a JSON document, or RequestFailed (an HTTP status, no connection, not JSON)."""
    request = urllib.request.Request(url, headers=dict(headers or {}), method="GET")
    try:
        with _open(request, timeout) as response:
            raw = response.read()
    except (OSError, ValueError) as error:
        raise RequestFailed(f"no answer ({error})") from None
    try:
        return json.loads(raw)
    except ValueError:
        raise RequestFailed("the answer is not JSON") from None


def chunk_text(chunk: dict[str, Any]) -> str:
    """The generated text one streamed chunk carries: a chat delta's content (or reasoning, where a server streams
    that apart) or a completion's text; "" for a chunk with none (the role, the finish reason, the usage)."""
    choices = chunk.get("choices") or []
    if not choices or not isinstance(choices[0], dict):
        return ""
    choice = choices[0]
    delta = choice.get("delta")
    if isinstance(delta, dict):
        return "".join(part for key in ("content", "reasoning_content", "reasoning")
                       if isinstance(part := delta.get(key), str))
    return choice["text"] if isinstance(choice.get("text"), str) else ""


def server_events(lines: Iterable[bytes]) -> Iterable[dict[str, Any]]:
    """The JSON payloads of a server-sent event stream's ``data:`` lines, up to ``[DONE]``; an error event raises."""
    for line in lines:
        text = line.decode("utf-8", "replace").strip()
        if not text.startswith("data:"):
            continue  # blank separators, comments, event names
        data = text[len("data:"):].strip()
        if data == "[DONE]":
            return
        try:
            event = json.loads(data)
        except ValueError:
            raise RequestFailed(f"a streamed chunk is not JSON: {data[:120]}") from None
        if isinstance(event, dict) and "error" in event and not event.get("choices"):
            error = event["error"] if isinstance(event["error"], dict) else {"message": event["error"]}
            code = error.get("code")
            raise RequestFailed(f"error in the stream: {error_message(json.dumps(error).encode())}",
                                code if isinstance(code, int) else None)
        if isinstance(event, dict):
            yield event


def assemble(chunks: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The body an unstreamed answer would have had: the text joined, the last finish reason and usage, and token
    ids where the server streams them (vLLM's ``return_token_ids``)."""
    text, reason, usage, ids, chat = [], None, None, [], False
    for chunk in chunks:
        usage = chunk.get("usage") or usage
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict):
                continue
            delta = choice.get("delta")
            chat = chat or isinstance(delta, dict)
            content = delta.get("content") if isinstance(delta, dict) else choice.get("text")
            text.append(content if isinstance(content, str) else "")
            reason = choice.get("finish_reason") or reason
            ids.extend(choice.get("token_ids") or (delta or {}).get("token_ids") or [])
    joined = "".join(text)
    choice = {"index": 0, "finish_reason": reason,
              **({"message": {"role": "assistant", "content": joined}} if chat else {"text": joined}),
              **({"token_ids": ids} if ids else {})}
    return {"choices": [choice], "usage": usage}


def post_stream(url: str, payload: dict[str, Any], timeout: float,
                headers: Mapping[str, str] | None = None) -> Answer:
    """``payload`` sent with ``stream`` on (and the usage asked for in the last chunk), read event by event."""
    payload = {**payload, "stream": True, "stream_options": {"include_usage": True}}
    start = time.perf_counter()
    first: float | None = None
    chunks, carrying = [], 0
    try:
        with _open(_request(url, payload, headers), timeout) as response:
            for event in server_events(response):
                chunks.append(event)
                if chunk_text(event):
                    carrying += 1
                    first = time.perf_counter() - start if first is None else first
    except (OSError, ValueError) as error:  # reset mid-stream
        raise RequestFailed(f"the stream broke off ({error})") from None
    return Answer(assemble(chunks), time.perf_counter() - start, first, carrying)


T = TypeVar("T")


def with_retries(send: Callable[[], T], retries: int, backoff_s: float,
                 sleep: Callable[[float], None] = time.sleep) -> T:
    """``send`` until it answers: after a connection error or a 5xx up to ``retries`` more times, waiting
    ``backoff_s``, then twice that, and so on. An ``Answer`` (or the last failure) says how many requests it took."""
    for attempt in range(retries + 1):
        try:
            value = send()
            return dataclasses.replace(value, attempts=attempt + 1) if isinstance(value, Answer) else value
        except RequestFailed as failure:
            failure.attempts = attempt + 1
            if not failure.retryable or attempt == retries:
                raise
            sleep(backoff_s * 2 ** attempt)
    raise AssertionError("unreachable")


def run_all(calls: Sequence[Callable[[], Answer]]) -> list[Answer | RequestFailed]:
    """Every call in flight at once; each slot holds its answer or the failure it met."""

    def one(call: Callable[[], Answer]) -> Answer | RequestFailed:
        try:
            return call()
        except RequestFailed as failure:
            return failure

    if len(calls) == 1:
        return [one(calls[0])]
    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        return list(pool.map(one, calls))


def post_all(requests: Sequence[tuple[str, dict[str, Any]]], timeout: float) -> list[Answer | RequestFailed]:
    """All (url, payload) requests in flight at once; each slot holds its answer or the failure it met."""
    return run_all([lambda request=request: post_json(*request, timeout) for request in requests])
