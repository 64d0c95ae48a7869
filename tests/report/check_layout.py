"""The HTML report of a real run as headless Chromium lays it out (tests/report/CMakeLists.txt).

Usage: check_layout.py --optmem CLI WORKLOAD.py
Runs the workload under `optmem run --mode trace`, renders its HTML report (short names, and
--full-names for the longest lines), and in Chromium at each of WIDTHS x HEIGHT:
- layout_probe.js measures the page: no element's content is wider than its box or reaches
  past the page (stacks, names and tables wrap inside the page; a picture wider than the window
  scrolls in its own box), no horizontal scrolling, the SVG legends' texts are drawn at least
  MIN_FONT px high (a picture scaled down draws them smaller), inside their picture and clear
  of each other,
  the breakdown bar's segments lie inside the bar;
- a screenshot of the first screen shows the breakdown bar: each class with at least
  MIN_SHARE of the peak has its colour on at least MIN_PIXELS pixels (more than its legend
  swatch has);
- the same checks fail on sabotaged copies of the page (stacks that cannot wrap, a picture
  that does not scroll in its box on an 800 px window, legend text too large or scaled too
  small, a bar segment too wide), so that a broken layout cannot pass them."""
import argparse
import html
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

from PIL import Image

from checks import expect, run_main

HERE = os.path.dirname(os.path.abspath(__file__))
WIDTH, HEIGHT = 1300, 900
WIDTHS = (800, 1300, 1920)  # a narrow window, the screenshot's, a wide screen
MIN_FONT = 10
MIN_SHARE = 0.03
MIN_PIXELS = 300
COLOURS = {"parameters": "#4e79a7", "gradients": "#f28e2b", "optimizer_state": "#e15759",
           "activations": "#76b7b2", "temporaries": "#59a14f", "other": "#bab0ac"}


def chromium(tmp, page, *how, width=WIDTH):
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    expect(exe, "chromium is not installed (tools/setup.sh installs it)")
    profile = tempfile.mkdtemp(dir=tmp)
    proc = subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                           "--no-first-run", "--disable-background-networking",
                           "--disable-component-update", "--disable-sync",
                           "--hide-scrollbars", "--force-device-scale-factor=1",
                           "--user-data-dir=" + profile,
                           "--window-size=%d,%d" % (width, HEIGHT)] + list(how) +
                          ["file://" + page], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          timeout=120)
    expect(proc.returncode == 0, "chromium exit %d: %s" % (proc.returncode,
                                                          proc.stderr.decode()[-2000:]))
    return proc.stdout.decode()


def measure(tmp, page, sabotage="", width=WIDTH):
    """The probe's findings on a copy of page, with sabotage added to its style."""
    with open(page) as f:
        text = f.read()
    with open(os.path.join(HERE, "layout_probe.js")) as f:
        probe = f.read()
    expect("</style>" in text and "</body>" in text, "the page has no <style> or </body>")
    text = text.replace("</style>", sabotage + "</style>", 1)
    text = text.replace("</body>", "<script>" + probe + "</script></body>", 1)
    copy = os.path.join(tmp, "probed.html")
    with open(copy, "w") as f:
        f.write(text)
    dom = chromium(tmp, copy, "--dump-dom", width=width)
    found = re.findall(r'<pre id="layout-report">([^<]*)</pre>', dom)
    expect(found, "the probe wrote nothing (did its script run?)")
    return json.loads(html.unescape(found[-1]))


def problems(found):
    """Each layout problem, one line each, by kind."""
    out = {"overflow": [], "legend": [], "bar": []}
    for o in found["overflow"]:
        out["overflow"].append("%s overflows: %s" % (o["el"], json.dumps(o)[:300]))
    page = found["page"]
    if page["scrollWidth"] > page["clientWidth"] + 1:
        out["overflow"].append("the page scrolls sideways: %d px of content in %d" %
                               (page["scrollWidth"], page["clientWidth"]))
    for boxes in found["legends"]:
        for i, a in enumerate(boxes):
            left, top, right, bottom = a["svg"]
            if a["font"] < MIN_FONT:
                out["legend"].append("legend %r: %.1f px text" % (a["text"], a["font"]))
            if a["left"] < left - 0.5 or a["right"] > right + 0.5 or a["top"] < top - 0.5 \
                    or a["bottom"] > bottom + 0.5:
                out["legend"].append("legend %r: outside its picture" % a["text"])
            for b in boxes[i + 1:]:
                if a["left"] < b["right"] and b["left"] < a["right"] and \
                        a["top"] < b["bottom"] and b["top"] < a["bottom"]:
                    out["legend"].append("legend %r overlaps %r" % (a["text"], b["text"]))
    for bar in found["bars"]:
        for s in bar["segments"]:
            if s["left"] < bar["left"] - 0.5 or s["right"] > bar["right"] + 0.5:
                out["bar"].append("bar segment %s outside the bar: %s" % (s["cls"], bar))
    return out


def check_page(tmp, page, what, width):
    found = measure(tmp, page, width=width)
    what = "%s at %d px" % (what, width)
    expect(found["legends"], "%s: no SVG legend measured" % what)
    expect(found["bars"], "%s: no breakdown bar measured" % what)
    bad = [line for lines in problems(found).values() for line in lines]
    expect(not bad, "%s: %d layout problems:\n%s" % (what, len(bad), "\n".join(bad[:20])))
    print("ok %s: no overflow, %d legend texts clear, %d bar segments inside" %
          (what, sum(len(b) for b in found["legends"]),
           sum(len(b["segments"]) for b in found["bars"])))


def check_screenshot(tmp, page, classes, peak, width):
    shot = os.path.join(tmp, "shot.png")
    chromium(tmp, page, "--screenshot=" + shot, width=width)
    img = Image.open(shot).convert("RGB")
    expect(img.size == (width, HEIGHT), "the screenshot is %s, not %dx%d" %
           (img.size, width, HEIGHT))
    counts = {}
    for count, rgb in img.getcolors(width * HEIGHT):
        counts["#%02x%02x%02x" % rgb] = count
    shown = 0
    for key, c in classes.items():
        if c["at_peak_bytes"] < MIN_SHARE * peak:
            continue
        n = counts.get(COLOURS[key], 0)
        expect(n >= MIN_PIXELS, "the first screen shows %s (%.1f %% of the peak) on %d pixels "
               "of %s, fewer than %d" % (key, 100.0 * c["at_peak_bytes"] / peak, n,
                                         COLOURS[key], MIN_PIXELS))
        shown += 1
    expect(shown >= 2, "fewer than two classes large enough to look for")
    print("ok screenshot: %d classes of the breakdown visible in the first %dx%d screen" %
          (shown, width, HEIGHT))


def check_sabotage(tmp, page):
    """Broken layouts must be caught, each by its own check."""
    cases = [
        ("overflow", "ol.stack li,b.site,td{white-space:nowrap}", WIDTH),
        # the pictures no longer scrolling in their own box, on a narrow window
        ("overflow", ".fig{overflow-x:visible}", 800),
        ("legend", "g.legend text{font-size:24px}", WIDTH),
        # a picture scaled down to fit: its legend drawn too small
        ("legend", ".fig svg{width:400px;height:auto}", WIDTH),
        ("bar", ".bdbar span{flex-shrink:0;min-width:400px}", WIDTH),
    ]
    for kind, css, width in cases:
        found = problems(measure(tmp, page, css, width=width))
        expect(found[kind], "the %s check passed a sabotaged page (%s)" % (kind, css))
        print("ok sabotage caught by the %s check: %s" % (kind, found[kind][0][:120]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--optmem", required=True)
    ap.add_argument("workload")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "r.json")
        proc = subprocess.run([args.optmem, "run", "--mode", "trace", "-o", report, "--",
                               sys.executable, args.workload, "--steps", "6", "--threads", "1"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=240)
        expect(proc.returncode == 0, "workload: exit %d: %s" % (proc.returncode,
                                                               proc.stderr.decode()[-2000:]))
        pages = {}
        for what, extra in (("short names", []), ("full names", ["--full-names"])):
            pages[what] = os.path.join(tmp, "report%d.html" % len(pages))
            subprocess.run([args.optmem, "report", report, "--format", "html", "-o",
                            pages[what]] + extra, check=True, timeout=120)
        summary = json.loads(subprocess.run([args.optmem, "report", report, "--format", "json"],
                                            stdout=subprocess.PIPE, check=True,
                                            timeout=120).stdout)
        bd = summary["processes"][0]["breakdown"]
        expect(bd["found"], "the run has no breakdown: %s" % bd)
        for what, page in pages.items():
            for width in WIDTHS:
                check_page(tmp, page, what, width)
        for width in WIDTHS:
            check_screenshot(tmp, pages["short names"], bd["classes"], bd["peak_bytes"], width)
        check_sabotage(tmp, pages["full names"])


if __name__ == "__main__":
    run_main(main)
