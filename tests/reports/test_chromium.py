"""The report in a real browser: it renders, requests nothing, logs no error, and model output stays text.

Skipped only when no Chromium binary is installed (CI installs one with ``apt-get install -y chromium``).
"""

from __future__ import annotations

import io
import itertools

import numpy as np
from PIL import Image

from reports import figures
from reports.html import write_report
from reports.report_data import gather

EVIL = '</script><script>window.__pwned=1</script><img src="x" onerror="window.__pwned=2"> & <b>not bold</b>'
READY = "document.body && document.body.dataset.browserReady"


def report(tmp_path, rf):
    x = [1.0, 0.0, 1.0, 1.0, 0.0, 1.0]
    y = [1.0, 1.0, 0.0, 1.0, 0.0, 0.0]  # docs 1, 2, 5 disagree on gsm8k
    texts = [EVIL] + [f"Working...\nThe answer is {i}." for i in range(1, 6)]
    run = rf.write_run(tmp_path / "run", [
        rf.Entry("qwen3", "gsm8k", rf.samples(x, texts=texts, latency=0.4), model_ref="Qwen/Qwen3-8B"),
        rf.Entry("qwen3", "mbpp", rf.samples(x[:4], latency=0.3), model_ref="Qwen/Qwen3-8B"),
        rf.Entry("refusion", "gsm8k", rf.samples(y, texts=texts, nfe=6, latency=0.1), model_ref="GSAI-ML/ReFusion",
                 kind="refusion"),
        rf.Entry("refusion", "mbpp", rf.samples(y[:4], nfe=6, latency=0.1), model_ref="GSAI-ML/ReFusion",
                 kind="refusion"),
    ])
    return write_report([run], tmp_path / "out")


def test_report_renders_offline_without_errors(tmp_path, rf, browser, chromium_page):
    page = report(tmp_path, rf)
    visit = chromium_page.visit(browser, page, tmp_path / "profile", ready=READY, expressions={
        "items": "document.querySelectorAll('article.item').length",
        "pwned": "String(window.__pwned)",
        "scripts": "document.scripts.length",
        "bold": "document.querySelectorAll('#s-list b').length",
        "evil_shown": f"[...document.querySelectorAll('#s-list pre')].some(p => p.textContent === {EVIL!r})",
        "images_loaded": "[...document.images].every(i => i.complete && i.naturalWidth > 0)",
        "disagreements": "(() => { document.getElementById('f-disagree').click();"
                         " return document.querySelectorAll('article.item').length; })()",
        "refusion_wrong": "(() => { const m = document.getElementById('f-model'); m.value = '1';"
                          " m.dispatchEvent(new Event('change'));"
                          " const ok = document.getElementById('f-ok'); ok.value = 'wrong';"
                          " ok.dispatchEvent(new Event('change'));"
                          " return document.querySelectorAll('article.item').length; })()",
    })
    (tmp_path / "screenshot.png").write_bytes(visit.screenshot)
    assert visit.requests == []
    assert visit.errors == []
    ev = visit.evaluations
    assert ev["items"] == 10  # 6 gsm8k + 4 mbpp items
    assert ev["pwned"] == "undefined" and ev["scripts"] == 2 and ev["bold"] == 0
    assert ev["evil_shown"] is True and ev["images_loaded"] is True
    assert ev["disagreements"] == 3 + 2  # gsm8k docs 1, 2, 5; mbpp docs 1, 2
    assert ev["refusion_wrong"] == 3  # with "disagree" still on: refusion wrong on gsm8k docs 2, 5 and mbpp doc 2
    image = Image.open(io.BytesIO(visit.screenshot)).convert("RGB")
    assert image.size == (1280, 900)
    colours = image.getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 200  # text, tables and a figure, not a blank page


def test_the_check_catches_requests_and_errors(tmp_path, rf, browser, chromium_page):
    """Negative control: the same page with an external image and a throwing script must not pass."""
    page = report(tmp_path, rf)
    html = page.read_text(encoding="utf-8")
    tampered = html.replace("<main>", '<main><img src="http://example.invalid/pixel.png">'
                                      '<script>throw new Error("boom")</script>', 1)
    bad = tmp_path / "tampered.html"
    bad.write_text(tampered, encoding="utf-8")
    visit = chromium_page.visit(browser, bad, tmp_path / "profile", ready=READY)
    assert any("boom" in e for e in visit.errors)
    assert any("example.invalid" in r for r in visit.requests)  # seen even though the page's policy blocks it
    assert any("example.invalid" in e and "Content Security Policy" in e for e in visit.errors)


FIGURES = ("[...document.querySelectorAll('figure img')].map(i => { const r = i.getBoundingClientRect();"
           " return {tail: i.src.slice(-80), x: r.left + scrollX, y: r.top + scrollY, w: r.width, h: r.height,"
           " natural: i.naturalWidth}; })")
ROW_LABELS = "[...document.querySelectorAll('table.paper tr.measured th')].map(th => th.firstChild.textContent)"


def shown_at(chart, images):
    """Where the page shows a chart: the <img> whose data ends like the chart's PNG."""
    return next(i for i in images if chart.uri.endswith(i["tail"]))


def dark_pixels(screenshot, box):
    return int((np.asarray(screenshot.crop(tuple(round(v) for v in box))).sum(axis=2) < 3 * 110).sum())


def colour_near(screenshot, x, y, hex_colour, reach=2, tolerance=40):
    """Whether the model's colour is on screen within ``reach`` pixels of (x, y): the page may place the image at a
    fractional offset, which blends a small marker's edge pixels."""
    expected = np.array([int(hex_colour[i:i + 2], 16) for i in (1, 3, 5)])
    around = np.asarray(screenshot.crop((round(x) - reach, round(y) - reach, round(x) + reach + 1,
                                         round(y) + reach + 1))).astype(int)
    return bool((np.abs(around - expected).max(axis=2) <= tolerance).any())


def test_two_crowded_runs_read_at_a_glance(tmp_path, crowded_runs, browser, chromium_page):
    """The report over two runs of all-zero tiny models, as displayed: every scatter label drawn clear of the
    others, every zero bar marked in its model's colour, short row labels, and text at a readable size."""
    page = write_report(crowded_runs, tmp_path / "out")
    visit = chromium_page.visit(browser, page, tmp_path / "profile", ready=READY, full_page=True,
                                expressions={"images": FIGURES, "rows": ROW_LABELS})
    assert visit.errors == [] and visit.requests == []
    (tmp_path / "page.png").write_bytes(visit.screenshot)
    screenshot = Image.open(io.BytesIO(visit.screenshot)).convert("RGB")
    data = gather(crowded_runs)
    scatter, bars = figures.tradeoff_scatter(data), figures.accuracy_bars(data)
    assert all(len(label) <= 24 and " @ " in label and "__" not in label for label in visit.evaluations["rows"])
    for name, chart in (("scatter", scatter), ("bars", bars)):
        shown = shown_at(chart, visit.evaluations["images"])
        scale = shown["w"] / shown["natural"]
        screenshot.crop((round(shown["x"]), round(shown["y"]), round(shown["x"] + shown["w"]),
                         round(shown["y"] + shown["h"]))).save(tmp_path / f"{name}.png")
        assert scale > 0.99  # displayed at its own size: 8-point text stays 11 pixels tall
        boxes = [(shown["x"] + b.x0 * scale, shown["y"] + b.y0 * scale, shown["x"] + b.x1 * scale,
                  shown["y"] + b.y1 * scale) for b in chart.texts]
        assert all(x0 >= shown["x"] and x1 <= shown["x"] + shown["w"] and y1 <= shown["y"] + shown["h"]
                   for x0, _, x1, y1 in boxes)
        assert all(dark_pixels(screenshot, box) >= 10 for box in boxes)  # each text is there to read, not covered
    placed = [(b.x0, b.y0, b.x1, b.y1) for b in scatter.point_labels]
    assert len(placed) == 5
    assert not any(a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]
                   for a, b in itertools.combinations(placed, 2))
    shown = shown_at(bars, visit.evaluations["images"])
    for mark in bars.marks:  # a zero bar draws nothing; its marker, in the model's colour, must be on screen
        assert colour_near(screenshot, shown["x"] + mark.x, shown["y"] + mark.y, mark.colour), mark


def test_pass_at_curve_renders_with_every_point_in_its_colour(tmp_path, repeated_run, browser, chromium_page):
    """The pass@k curve of a run with repeated samples, as displayed: shown at its own size, each text legible, and
    every (model, k) point's marker on screen in its model's colour."""
    page = write_report([repeated_run], tmp_path / "out")
    visit = chromium_page.visit(browser, page, tmp_path / "profile", ready=READY, full_page=True, expressions={
        "images": FIGURES,
        "agreement_rows": "document.querySelectorAll('.agreement tbody tr').length",
        "nav": "[...document.querySelectorAll('nav a')].some(a => a.getAttribute('href') === '#repeated')",
        "heads": "[...document.querySelectorAll('#s-list .out-head strong')].map(s => s.textContent)",
    })
    assert visit.errors == [] and visit.requests == []
    assert visit.evaluations["agreement_rows"] == 2 and visit.evaluations["nav"] is True
    heads = visit.evaluations["heads"]  # 5 AIME items: a's 4 samples, b's 2 and c's one each; 3 GSM8K items
    assert heads.count("a \u00b7 sample 4 of 4") == 5 and heads.count("b \u00b7 sample 1 of 2") == 5
    assert heads.count("c") == 5 and heads.count("a") == 3
    screenshot = Image.open(io.BytesIO(visit.screenshot)).convert("RGB")
    curve = figures.pass_at_curves(gather([repeated_run]))["aime24"]
    shown = shown_at(curve, visit.evaluations["images"])
    scale = shown["w"] / shown["natural"]
    assert scale > 0.99
    screenshot.crop((round(shown["x"]), round(shown["y"]), round(shown["x"] + shown["w"]),
                     round(shown["y"] + shown["h"]))).save(tmp_path / "pass_at.png")
    for box in curve.texts:
        assert dark_pixels(screenshot, (shown["x"] + box.x0, shown["y"] + box.y0, shown["x"] + box.x1,
                                        shown["y"] + box.y1)) >= 10, box
    assert len(curve.marks) == 4 + 2
    for mark in curve.marks:
        assert colour_near(screenshot, shown["x"] + mark.x, shown["y"] + mark.y, mark.colour), mark
