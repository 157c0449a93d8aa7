"""The report's decode-order views from hand-made samples whose orders are known: the browser's replay payload and
the per-task figure of mean commit step against position."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from harness.run.records import SampleRecord
from reports import figures
from reports.html import write_report
from reports.browser import BrowserLimits, browser_payload
from reports.decode_order import NO_TEXT, NOT_RECORDED, decode_view, order_curve
from reports.report_data import gather


WORD = "w{} "
EVIL_WORD = "</script><b>w0</b> "  # a model's text: shown as text, never as markup


def with_order(records: list[dict], steps: list[int] | None, text: bool = True, evil_first: bool = False
               ) -> list[dict]:
    """The records with the same commit steps and a piece "w<i> " per token (none where ``text`` is False; the
    first one markup where ``evil_first``)."""
    for record in records:
        if steps is not None:
            record["commit_step"] = list(steps)
            record["token_ids"] = list(range(len(steps)))
            if text:
                pieces = [WORD.format(i) for i in range(len(steps))]
                record["token_text"] = [EVIL_WORD] + pieces[1:] if evil_first else pieces
    return records


def record(steps: list[int] | None, text: bool = True) -> SampleRecord:
    data = {"prompt": "p", "text": "t", "raw_text": "t", "token_ids": [], "gen_tokens": 0, "gen_tokens_after_stop": 0,
            "canvas_tokens": 8, "nfe": 1.0, "hit_max_tokens": False, "latency_s": 0.1, "batch_latency_s": 0.1,
            "batch_size": 1, "warmup": False}
    return SampleRecord.from_json(with_order([data], steps, text)[0])


def test_decode_view_holds_each_token_with_its_step_within_the_character_cap():
    view = decode_view(record([3, 1, 2, 3]), chars=4000)
    assert view == {"pieces": ["w0 ", "w1 ", "w2 ", "w3 "], "steps": [3, 1, 2, 3], "last": 3, "hidden": 0}
    capped = decode_view(record([3, 1, 2, 3]), chars=7)  # two pieces of 3 characters fit in 7
    assert capped["pieces"] == ["w0 ", "w1 "] and capped["steps"] == [3, 1] and capped["hidden"] == 2
    assert capped["last"] == 3  # the slider still ends at the decode's last step


def test_decode_view_says_why_it_has_no_replay():
    assert decode_view(record(None), 4000) == {"note": NOT_RECORDED}
    assert decode_view(record([1, 2], text=False), 4000) == {"note": NO_TEXT}


def test_order_curve_on_known_orders():
    left_to_right = order_curve([record(list(range(1, 21)))])
    assert left_to_right == pytest.approx([(b + 1) / 20 for b in range(20)])  # the diagonal
    right_to_left = order_curve([record(list(range(20, 0, -1)))])
    assert right_to_left == pytest.approx([(20 - b) / 20 for b in range(20)])
    # Each sample on its own scale and weighing the same: [1,2,3,4] gives 0.375, 0.875; [1,1] (one forward) 1.0, 1.0.
    mixed = order_curve([record([1, 2, 3, 4]), record([1, 1]), record(None)], bins=2)
    assert mixed == pytest.approx([(0.375 + 1.0) / 2, (0.875 + 1.0) / 2])
    assert order_curve([record([1])], bins=2) == [None, 1.0]  # one token, at the middle: the first bin is empty
    assert order_curve([record(None)]) is None


def orders_run(tmp_path, rf):
    """An AR model (one token per forward) and a diffusion model that commits the end first, both on gsm8k; on mbpp
    the diffusion model recorded no steps."""
    ar, diffusion = list(range(1, 21)), [5 - i // 4 for i in range(20)]
    return rf.write_run(tmp_path / "run", [
        rf.Entry("qwen3", "gsm8k", with_order(rf.samples([1.0, 0.0, 1.0]), ar)),
        rf.Entry("refusion", "gsm8k", with_order(rf.samples([1.0, 1.0, 0.0]), diffusion, evil_first=True),
                 kind="refusion"),
        rf.Entry("refusion", "mbpp", rf.samples([1.0, 0.0]), kind="refusion"),
    ])


def test_browser_payload_carries_each_outputs_replay(tmp_path, rf):
    payload = browser_payload(gather([orders_run(tmp_path, rf)]), BrowserLimits(items_per_task=2))
    gsm8k = [i for i in payload["items"] if i["task"] == "gsm8k"]
    assert len(gsm8k) == 2  # the replay rides on the items the cap keeps, no more
    for item in gsm8k:
        ar, diffusion = sorted(item["outputs"], key=lambda o: o["m"])
        assert ar["order"]["steps"] == list(range(1, 21)) and ar["order"]["last"] == 20
        assert diffusion["order"]["steps"][:4] == [5, 5, 5, 5] and diffusion["order"]["last"] == 5
    mbpp = [o for i in payload["items"] if i["task"] == "mbpp" for o in i["outputs"]]
    assert mbpp and all(o["order"] == {"note": NOT_RECORDED} for o in mbpp)


def test_order_figure_per_task_with_a_line_per_model(tmp_path, rf):
    charts = figures.order_lines(gather([orders_run(tmp_path, rf)]))
    assert list(charts) == ["gsm8k"]  # no model recorded steps on mbpp
    texts = [b.text for b in charts["gsm8k"].texts]
    assert "qwen3" in texts and "refusion" in texts and "strictly left to right" in texts
    assert "position in the answer (fraction of its tokens)" in texts


REPLAYS = "[...document.querySelectorAll('details.decode')]"
OPEN_ALL = f"{REPLAYS}.forEach(d => {{ d.open = true; }}), {REPLAYS}.length"


def at_step(index: int, step: int) -> str:
    """Move replay ``index``'s slider to ``step``; its committed tokens' texts and its status line."""
    return (f"(() => {{ const d = {REPLAYS}[{index}]; const s = d.querySelector('input.step'); s.value = '{step}';"
            " s.dispatchEvent(new Event('input'));"
            " return {shown: [...d.querySelectorAll('.tok:not(.mask)')].map(t => t.textContent).join(''),"
            " masked: d.querySelectorAll('.tok.mask').length, status: d.querySelector('.step-status').textContent};"
            " })()")


TOKEN_BOXES = (f"(() => {{ const d = {REPLAYS}[1]; d.scrollIntoView(); const ts = d.querySelectorAll('.tok');"
               " return [ts[0], ts[ts.length - 1]].map(t => { const r = t.getBoundingClientRect();"
               " return {x0: r.left, y0: r.top, x1: r.right, y1: r.bottom, bg: getComputedStyle(t).backgroundColor};"
               " }); })()")


def share_of_colour(screenshot, box: dict, tolerance: int = 30) -> float:
    """The share of a token's box on screen painted in its background colour (the rest is its glyphs)."""
    expected = np.array([int(v) for v in box["bg"][4:-1].split(",")])
    crop = np.asarray(screenshot.crop((round(box["x0"]), round(box["y0"]), round(box["x1"]), round(box["y1"]))))
    return float((np.abs(crop.astype(int) - expected).max(axis=2) <= tolerance).mean())


def test_the_replay_in_chromium_shows_the_tokens_committed_by_each_step(tmp_path, rf, browser, chromium_page):
    page = write_report([orders_run(tmp_path, rf)], tmp_path / "out")
    words = [EVIL_WORD] + [WORD.format(i) for i in range(1, 20)]  # the diffusion model's; the AR model's has w0
    visit = chromium_page.visit(browser, page, tmp_path / "profile", ready="document.body.dataset.browserReady",
                                expressions={
        "opened": OPEN_ALL,
        "built": f"{REPLAYS}.filter(d => d.querySelector('input.step')).length",
        "notes": "[...document.querySelectorAll('.order-note')].map(n => n.textContent)",
        "figures": "[...document.querySelectorAll('#order figure img')].filter(i => i.naturalWidth > 0).length",
        "ar_7": at_step(0, 7),
        "diffusion_1": at_step(1, 1),
        "diffusion_3": at_step(1, 3),
        "diffusion_5": at_step(1, 5),
        "markup": "document.querySelectorAll('.decode-text b').length",
        "boxes": TOKEN_BOXES,
    })
    assert visit.errors == [] and visit.requests == []
    ev = visit.evaluations
    assert ev["opened"] == 6 and ev["built"] == 6  # 3 gsm8k items × 2 models, each replay built when opened
    assert ev["notes"] == [NOT_RECORDED] * 2 and ev["figures"] == 1  # refusion on mbpp; one task with steps
    assert ev["ar_7"]["shown"] == "".join(["w0 "] + words[1:7]) and ev["ar_7"]["masked"] == 13
    assert ev["ar_7"]["status"] == "step 7 of 20 · 7 of 20 tokens"
    assert ev["diffusion_1"]["shown"] == "".join(words[16:])  # the end first: steps 5,5,5,5,4,...,1,1,1,1
    assert ev["diffusion_3"]["shown"] == "".join(words[8:]) and ev["diffusion_3"]["masked"] == 8
    assert ev["diffusion_5"]["shown"] == "".join(words) and ev["diffusion_5"]["masked"] == 0
    assert ev["markup"] == 0
    (tmp_path / "replay.png").write_bytes(visit.screenshot)
    screenshot = Image.open(io.BytesIO(visit.screenshot)).convert("RGB")
    first, last = ev["boxes"]  # step 5 (the scale's end, yellow) and step 1 (its start, dark purple)
    assert first["bg"] == "rgb(253, 231, 37)" and last["bg"] == "rgb(68, 1, 84)"
    assert share_of_colour(screenshot, first) > 0.4 and share_of_colour(screenshot, last) > 0.4
