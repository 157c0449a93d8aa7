"""The sample browser's data: per item, the prompt, the target and every model's output side by side.

It is embedded in the page as JSON inside ``<script type="application/json">``; ``script_json`` escapes it so that
nothing a model wrote (``</script>``, ``<!--``, HTML) can end that element early. The page's script only ever puts
these strings into the DOM as text.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup

from harness.run.records import SampleRecord
from reports.decode_order import decode_view
from reports.report_data import ReportData

# "correct" for the browser's filters: the primary score is at least this (0/1 metrics: right; graded: mostly right).
CORRECT_AT = 0.5


@dataclass(frozen=True)
class BrowserLimits:
    """Caps that keep the page small: items per task (disagreements are kept first) and characters per text (an
    output's decode replay holds its tokens up to the same count of characters)."""

    items_per_task: int = 100
    chars: int = 4000


def clip(text: Any, limit: int) -> str:
    text = "" if text is None else str(text)
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n… [{len(text) - limit} more characters not shown]"


def _finite(value: Any) -> Any:
    """JSON.parse rejects NaN and Infinity; they become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _output(model_index: int, record: SampleRecord, metric: str, limits: BrowserLimits) -> dict[str, Any]:
    score = (record.scores or {}).get(metric)
    score = None if score is None else float(score)
    return {
        "m": model_index,
        "text": clip(record.text, limits.chars),
        "extracted": {str(k): clip(v, 200) for k, v in (record.extracted or {}).items()},
        "score": score,
        "ok": None if score is None or not math.isfinite(score) else score >= CORRECT_AT,
        "truncated": bool(record.hit_max_tokens),
        "tokens": record.gen_tokens,
        "order": decode_view(record, limits.chars),
        "sample": record.sample,  # which of the item's repeated samples (--samples K)
    }


def browser_payload(data: ReportData, limits: BrowserLimits = BrowserLimits()) -> dict[str, Any]:
    """Items grouped by (task, doc_id), each with every model's output (each of its samples, numbered, where it
    drew several per item); capped per task, disagreements first."""
    items: list[dict[str, Any]] = []
    counts: dict[str, dict[str, int]] = {}
    metrics = {(c.label, c.task): c.metric for c in data.cells}
    for task in data.tasks:
        by_doc: dict[str, dict[str, Any]] = {}
        for index, label in enumerate(data.labels):
            for record in data.samples.get((label, task), []):
                doc = str(record.doc_id)
                item = by_doc.setdefault(doc, {
                    "task": task, "doc": doc, "prompt": clip(record.prompt, limits.chars),
                    "prompt_model": index, "target": clip(record.target, 1000), "outputs": [],
                })
                item["outputs"].append(_output(index, record, metrics[(label, task)], limits))
        for item in by_doc.values():
            counts_by_model = Counter(o["m"] for o in item["outputs"])
            for o in item["outputs"]:
                if counts_by_model[o["m"]] > 1:
                    o["of"] = counts_by_model[o["m"]]  # the page names each as "sample j of K"
            verdicts = {o["ok"] for o in item["outputs"] if o["ok"] is not None}
            item["disagree"] = len(verdicts) > 1
        ordered = list(by_doc.values())
        keep = [i for i in ordered if i["disagree"]][: limits.items_per_task]
        keep += [i for i in ordered if not i["disagree"]][: limits.items_per_task - len(keep)]
        chosen = {id(i) for i in keep}
        items.extend(i for i in ordered if id(i) in chosen)
        counts[task] = {"total": len(ordered), "shown": len(keep),
                        "disagree": sum(i["disagree"] for i in ordered)}
    return _finite({"models": list(data.labels), "tasks": list(data.tasks), "items": items, "counts": counts,
                    "limits": {"items_per_task": limits.items_per_task, "chars": limits.chars}})


def script_json(payload: Any) -> Markup:
    """JSON safe inside a <script> element: every <, > and & becomes a \\u escape, non-ASCII is escaped too
    (so lone surrogates from a broken decode cannot make the file unwritable)."""
    text = json.dumps(_finite(payload), ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return Markup(text)
