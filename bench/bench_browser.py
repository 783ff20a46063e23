"""The side by side as a user waits for it: a real browser, the app's defaults, from the click to each answer.

    python bench/bench_browser.py [--runs 3] [--busy 0] [--engine transformers]

Starts the app in a fresh process (bench_load.start_app; the model cache must exist), opens it in Debian's chromium,
warms it with one run, then --runs times clicks Generate on the first built-in question (3 paraphrases, the app's
defaults: 16 seeds in rounds of 4 then 12, 3 methods, 64 tokens, T = 1) and times from the click until the first
answer is on screen, the first verdict (after the first round), and the final one ("Done"), and the CPU seconds the
app's process and the browser's processes used meanwhile (here the browser renders on the cores that generate; on a
Space it runs on the user's machine). With --busy N, N other processes keep the cores busy meanwhile (a shared
machine). Prints each run and the medians. Goal (issue "The
verdict in seconds"): final verdict <= 25 s quiet; first answers <= 4 s.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time

import psutil
from bench_load import BUSY, start_app  # bench/ is on sys.path when run as a script
from playwright.sync_api import sync_playwright

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
WAIT_MS = 900_000


def one_run(page) -> tuple[float, float, float, str]:
    """(first answer, first verdict, final verdict) seconds after the click, and the final status."""
    start = time.perf_counter()
    page.locator("#run-compare").click()
    page.wait_for_function("document.querySelector('#responses-gcswr').innerText.includes('[1]')", timeout=WAIT_MS)
    first_answer = time.perf_counter() - start
    page.wait_for_function("document.querySelector('#verdict').innerText.includes('seeds')", timeout=WAIT_MS)
    first_verdict = time.perf_counter() - start
    page.wait_for_function("document.querySelector('#status').innerText.startsWith('Done')", timeout=WAIT_MS)
    final = time.perf_counter() - start
    return first_answer, first_verdict, final, page.locator("#status").inner_text()


def cpu_seconds(processes) -> float:
    """User + system CPU seconds of ``processes`` so far (those that have exited count nothing)."""
    total = 0.0
    for process in processes:
        try:
            times = process.cpu_times()
            total += times.user + times.system
        except psutil.NoSuchProcess:
            pass
    return total


def browser_processes() -> list:
    """This script's chromium processes (started by Playwright's driver, a child of this process)."""
    return [p for p in psutil.Process().children(recursive=True) if "chrom" in p.name().lower()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--busy", type=int, default=0, help="processes keeping the cores busy during the runs")
    parser.add_argument("--engine", default="transformers")
    args = parser.parse_args()
    server, url = start_app(engine=args.engine)
    hogs = []
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"], headless=True)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(url)
            page.locator("#paraphrases textarea").wait_for(timeout=WAIT_MS)
            one_run(page)  # warm: embedding models, kernels
            hogs = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(args.busy)]
            runs = []
            for index in range(args.runs):
                # clear the last run's answers so that "first answer" sees this run's
                page.goto(url)
                page.locator("#paraphrases textarea").wait_for(timeout=WAIT_MS)
                app, chromium = psutil.Process(server.pid), browser_processes()
                before = cpu_seconds([app]), cpu_seconds(chromium)
                runs.append(one_run(page))
                used = cpu_seconds([app]) - before[0], cpu_seconds(chromium) - before[1]
                print(f"  run {index + 1}: first answer {runs[-1][0]:.1f} s, first verdict {runs[-1][1]:.1f} s, "
                      f"final verdict {runs[-1][2]:.1f} s ({runs[-1][3]}); CPU: app {used[0]:.1f} s, browser "
                      f"{used[1]:.1f} s", flush=True)
            browser.close()
    finally:
        for hog in hogs:
            hog.kill()
        server.kill()
    busy = f", {args.busy} processes keeping the cores busy" if args.busy else ", quiet"
    medians = [statistics.median(run[i] for run in runs) for i in range(3)]
    print(f"side by side at the defaults ({args.engine}{busy}), median of {len(runs)}: first answer "
          f"{medians[0]:.1f} s, first verdict {medians[1]:.1f} s, final verdict {medians[2]:.1f} s")


if __name__ == "__main__":
    main()
