"""The side by side as a user waits for it: a real browser, the app's defaults, from the click to each answer, and
where the time went.

    python bench/bench_browser.py [--runs 3] [--busy 0] [--engine transformers] [--visitors 1] [--in-process]

Starts the app in a fresh process (bench_load.start_app, with ``GCS_TIMINGS=on`` so that it logs each stage's time;
the model cache must exist), opens it in Debian's chromium, warms it with one run, then --runs times clicks Generate
on the first built-in question (3 paraphrases, the app's defaults: 16 seeds in rounds of 4 then 12, 3 methods, 64
tokens, T = 1) and times from the click until the first answer is on screen, the first verdict (after the first
round), and the final one ("Done"), and the CPU seconds the app's process and the browser's processes used meanwhile
(here the browser renders on the cores that generate; on a Space it runs on the user's machine).

Each run's breakdown per round: the app's own stages from its log (the round's generation, each metric's scoring,
the degenerate-output check, building the page's update: tables, figures, the seed browser; the downloads), the
cores the app and the browser used while the round generated (two OpenMP threads on two cores wait for each other
at every parallel region, so a browser drawing on the same cores slows generation far beyond its share), the wait
for the handler's next half-second beat, and "to screen": from the moment the handler hands the update to Gradio to
the frame in which the browser shows it (Gradio's serialisation and transport and the browser's rendering, timed in
the page with a MutationObserver and requestAnimationFrame; the server and the browser share this machine's clock).
"browser busy" is the page's long tasks (Performance API: main-thread tasks over 50 ms) during the run; "scheduled in
the page", the animation frames and timers the page asked for per second of the run, by the Gradio asset that asked
(a status tracker's timer ticks while its output is pending, shown or hidden, once a second as the app serves it;
the page's loading tracker used to leave its loop running for the life of the tab: ``ui.server.page_assets``).

With --visitors 2, a second browser (another visitor) clicks Generate one second after the first: the first
visitor's first answers and both verdicts, the cores the app and both browsers used during the first visitor's run,
how soon the second visitor's status line says where it stands in the queue, and the cores its browser used while
it waited (Gradio's status trackers time every pending output). Before the runs, the share of a core the app's
process and each chromium process used while the page sat idle. With --busy N, N other processes keep the cores busy
meanwhile (a shared machine).

With --in-process, each run is paired with the same work in a process of its own, without a server or a browser
(the app's process and its children paused meanwhile, so that neither draws on the cores): the page's update path
(``ui.tabs.side_by_side.compare.compare_stream`` at the app's defaults, as ``bench/bench_streaming.py``'s "page") and
the library's rounds (``gcs.compare_rounds``, the first round streamed), alternating which goes first; it prints each
pair's ratios (the browser's final verdict against the page in-process, the browser's first verdict against the
library's first round, the page in-process against the library's rounds) and their medians: the issue's ratio goals
measured side by side, not from benches run minutes apart on a machine whose speed drifts. Goals (issue "The page at the
library's speed"): the page in-process <= 1.1x the library's rounds; the browser <= 1.15x the page in-process; the first
verdict <= 1.5x the library's first round; final verdict <= 25 s quiet; first answers <= 4 s (also
with a second visitor); the second visitor told its place in the queue within 1 s.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
from bench_load import BUSY, ROOT, start_app  # bench/ is on sys.path when run as a script
from playwright.sync_api import sync_playwright

sys.path.insert(0, str(ROOT))
from gcs.runtime.stage_timing import parse  # noqa: E402

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
WAIT_MS = 900_000

# In the page: when (wall clock, seconds) the first answer, each status line and each verdict were first painted,
# and the main thread's long tasks. A mutation is noted in the next animation frame: when the browser shows it.
RECORDER = """
window.__gcs = {events: [], busy: 0, status: null, verdict: null, first: false, pending: false, calls: {}};
// what schedules work in the page, by the Gradio asset that asked ("statustracker", "index", "PlotlyPlot", ...)
for (const name of ["requestAnimationFrame", "setTimeout", "setInterval"]) {
  const original = window[name].bind(window);
  window[name] = (...args) => {
    const caller = ((new Error().stack || "").split("\\n")[2] || "").match(/\\/assets\\/([A-Za-z]+)/);
    const key = `${name} ${caller ? caller[1] : "other"}`;
    window.__gcs.calls[key] = (window.__gcs.calls[key] || 0) + 1;
    return original(...args);
  };
}
new PerformanceObserver((list) => { for (const e of list.getEntries()) window.__gcs.busy += e.duration / 1000; })
  .observe({type: "longtask", buffered: true});
// one look per frame, reading textContent (innerText would force a layout at every mutation: the page's own cost)
const look = () => {
  const g = window.__gcs, now = Date.now() / 1000, text = (id) => (document.querySelector(id) || {}).textContent;
  g.pending = false;
  if (!g.first && (text("#responses-gcswr") || "").includes("[1]")) {
    g.first = true; g.events.push(["first answer", "", now]);
  }
  for (const [name, id] of [["status", "#status"], ["verdict", "#verdict"]]) {
    const shown = (text(id) || "").trim();
    if (shown && shown !== g[name]) { g[name] = shown; g.events.push([name, shown.slice(0, 120), now]); }
  }
};
const soon = () => { if (!window.__gcs.pending) { window.__gcs.pending = true; requestAnimationFrame(look); } };
document.addEventListener("DOMContentLoaded",
  () => new MutationObserver(soon).observe(document.body, {subtree: true, childList: true, characterData: true}));
"""


def open_page(browser, url: str):
    page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
    page.add_init_script(RECORDER)
    page.goto(url)
    page.locator("#paraphrases textarea").wait_for(timeout=WAIT_MS)
    return page


def click(page) -> float:
    """Click Generate; the wall-clock time of the click (the page's count of scheduled work starts there)."""
    page.evaluate("window.__gcs.calls = {}")
    at = time.time()
    page.locator("#run-compare").click()
    return at


def wait_done(page) -> None:
    # polled twice a second on textContent: Playwright's default polls every animation frame, and innerText lays the
    # page out each time (the bench's own 60 layouts a second, on the cores that generate); the times it reports are
    # the recorder's, taken in the frame that paints each update
    page.wait_for_function("document.querySelector('#status').textContent.trim().startsWith('Done')",
                           polling=500, timeout=WAIT_MS)


def shown(page, clicked: float) -> dict:
    """What the page showed after the click: {"first answer": s, "first verdict": s, "final": s (its "Done"), "rounds":
    {round: s} (each round's "N seeds scored" status), "queue": s (a status line naming the queue), "busy": s of long
    tasks}, in seconds after ``clicked``."""
    record = page.evaluate("window.__gcs")
    found, rounds = {"busy": record["busy"]}, {}
    for what, text, at in record["events"]:
        after = at - clicked
        if what == "first answer":
            found.setdefault("first answer", after)
        elif what == "verdict" and "seeds" in text:
            found.setdefault("first verdict", after)
        elif what == "status" and text.startswith("Round ") and "scored" in text:
            rounds.setdefault(int(text.split()[1].rstrip(":")), after)
        elif what == "status" and text.startswith("Done"):
            found["final"] = after
        elif what == "status" and "queue" in text.lower():
            found.setdefault("queue", after)
    found["rounds"], found["calls"] = rounds, record["calls"]
    return found


def page_work(found: dict, top: int = 4) -> str:
    """The callbacks the page scheduled during a run, per second of it, by kind and asset (the most first)."""
    busiest = sorted(found["calls"].items(), key=lambda item: -item[1])[:top]
    return ", ".join(f"{key} {count / found['final']:.0f}/s" for key, count in busiest) if "final" in found else "-"


def breakdown(log: Path, clicked: float, seen: dict, cpu: list) -> list[str]:
    """One line per round: the app's stages (from its timing log lines written after ``clicked``), the cores the app
    and the browser used while the round generated (from ``cpu``: (time, app's CPU seconds, browser's)), and the time
    from handing the round's update to Gradio until the browser showed it (the last round: its "Done")."""
    records = [r for r in map(parse, log.read_text(errors="replace").splitlines()) if r and r["end"] >= clicked]
    handed, meanwhile = {}, {}
    for round_, record in by_round(records):
        if record["stage"] == "update handed over":
            handed[(round_, record["what"])] = record["end"]
        elif record["stage"] == "generate" and "seconds" in record:
            meanwhile[round_] = cores_used(cpu, record["end"] - record["seconds"], record["end"])
    stages, lines = stage_seconds(records), []
    for number, parts in sorted(stages.items()):
        last = number == max(stages)
        on_screen = seen.get("final") if last else seen["rounds"].get(number)
        given = handed.get((number, "done" if last else "verdict"))
        screen = f"; to screen {clicked + on_screen - given:.2f}" if None not in (on_screen, given) else ""
        cores = meanwhile.get(number)
        used = f" (meanwhile the app {cores[0]:.2f} cores, the browser {cores[1]:.2f})" if cores else ""
        lines.append(f"    round {number}: " + timings(parts) + screen + " s" + used)
    return lines


def by_round(records: list[dict]):
    """(round, record) for the timing log's ``records`` in order: a metric's score carries no round of its own, it
    belongs to the last round generated."""
    round_ = 0
    for record in records:
        round_ = record.get("round", round_)
        yield round_, record


def stage_seconds(records: list[dict]) -> dict[int, dict[str, float]]:
    """{round: {stage (a score with its metric): seconds}} from the timing log's ``records``."""
    stages: dict[int, dict[str, float]] = {}
    for round_, record in by_round(records):
        if record["stage"] != "update handed over" and "seconds" in record:
            name = f"{record['stage']} {record['metric']}" if "metric" in record else record["stage"]
            stages.setdefault(round_, {})[name] = stages.get(round_, {}).get(name, 0.0) + record["seconds"]
    return stages


def timings(parts: dict[str, float]) -> str:
    return ", ".join(f"{name} {seconds:.2f}" for name, seconds in parts.items())


def cores_used(cpu: list, start: float, end: float) -> tuple[float, float] | None:
    """The app's and the browser's cores used from ``start`` to ``end`` (CPU seconds over wall seconds), from the
    samples in ``cpu`` nearest inside that span; None where fewer than two fall in it."""
    inside = [sample for sample in cpu if start <= sample[0] <= end]
    if len(inside) < 2:
        return None
    (first, app, browser), (last, app_end, browser_end) = inside[0], inside[-1]
    return (app_end - app) / (last - first), (browser_end - browser) / (last - first)


def sampled(app, every: float = 0.25):
    """(samples, stop): a thread appends (time, app's CPU seconds, the browser's) to samples every ``every`` s until
    stop is set."""
    samples, stop = [], threading.Event()

    def sample():
        while not stop.is_set():
            samples.append((time.time(), cpu_seconds([app]), cpu_seconds(browser_processes())))
            stop.wait(every)

    threading.Thread(target=sample, daemon=True, name="bench-cpu").start()
    return samples, stop


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


def process_kind(process) -> str:
    """A chromium process's kind from its command line: renderer, gpu-process, utility, ... or browser."""
    try:
        kinds = [a.removeprefix("--type=") for a in process.cmdline() if a.startswith("--type=")]
    except psutil.NoSuchProcess:
        return "gone"
    return kinds[0] if kinds else "browser"


def cpu_by_kind(processes) -> dict[str, float]:
    """``cpu_seconds`` of ``processes`` per kind (``process_kind``)."""
    kinds: dict[str, list] = {}
    for process in processes:
        kinds.setdefault(process_kind(process), []).append(process)
    return {kind: cpu_seconds(group) for kind, group in kinds.items()}


def browser_processes() -> list:
    """This script's chromium processes (started by Playwright's driver, a child of this process)."""
    return [p for p in psutil.Process().children(recursive=True) if "chrom" in p.name().lower()]


def process_tree(root: psutil.Process) -> list:
    """``root`` and every process it started, as they are now."""
    try:
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def idle_share(app: psutil.Process, seconds: float = 5.0) -> dict[str, float]:
    """The share of a core the app's process ("app") and each kind of chromium process used over ``seconds`` while the
    page sat idle (a page that asks for nothing costs headless chromium almost nothing; a timer loop left running
    shows here, and so would a server polling for work)."""
    chromium = browser_processes()
    before, app_before, start = cpu_by_kind(chromium), cpu_seconds([app]), time.perf_counter()
    time.sleep(seconds)
    spent = {kind: used - before.get(kind, 0.0) for kind, used in cpu_by_kind(chromium).items()}
    spent["app"] = cpu_seconds([app]) - app_before
    return {kind: used / (time.perf_counter() - start) for kind, used in spent.items()}


def one_visitor(page, server, url: str, log: Path) -> dict:
    page.goto(url)  # clears the last run's answers, so that "first answer" sees this run's
    page.locator("#paraphrases textarea").wait_for(timeout=WAIT_MS)
    app, chromium = psutil.Process(server.pid), browser_processes()
    before = cpu_seconds([app]), cpu_seconds(chromium), cpu_by_kind(chromium)
    samples, stop = sampled(app)
    clicked = click(page)
    wait_done(page)
    stop.set()
    seen = shown(page, clicked)
    seen["cpu"] = cpu_seconds([app]) - before[0], cpu_seconds(chromium) - before[1]
    seen["browser cpu"] = {kind: spent - before[2].get(kind, 0.0) for kind, spent in cpu_by_kind(chromium).items()}
    seen["breakdown"] = breakdown(log, clicked, seen, samples)
    seen["status"] = page.locator("#status").inner_text()
    return seen


def two_visitors(pages, server, url: str, second_browser: psutil.Process) -> tuple[dict, dict]:
    """What each of two visitors saw (``shown``), the second clicking one second after the first; the first's also
    has "meanwhile": the app's and the browsers' cores from its click to its final verdict; the second's "waiting":
    the cores its browser (``second_browser`` and the processes it started) used while its run waited."""
    for page in pages:
        page.goto(url)
        page.locator("#paraphrases textarea").wait_for(timeout=WAIT_MS)
    samples, stop = sampled(psutil.Process(server.pid))
    first_click = click(pages[0])
    time.sleep(max(0.0, first_click + 1.0 - time.time()))
    second_click, waited_from = click(pages[1]), cpu_seconds(process_tree(second_browser))
    wait_done(pages[0])  # (its tree again: a renderer may have started since)
    waited = (cpu_seconds(process_tree(second_browser)) - waited_from) / (time.time() - second_click)
    wait_done(pages[1])
    stop.set()
    first, second = shown(pages[0], first_click), shown(pages[1], second_click)
    first["meanwhile"] = cores_used(samples, first_click, first_click + first.get("final", float("inf")))
    second["waiting"] = waited
    return first, second


IN_PROCESS_WORKER = "--in-process-worker"


def in_process_worker(engine: str) -> None:
    """This process, started by ``InProcess``: the page's update path and the library's rounds at the app's defaults,
    one run of each (in the order a line read from stdin names) per line; one JSON line per run on stdout. Warms
    both first (embedding models, kernels), as the browser's first run warms the app."""
    os.environ["GCS_ENGINE"] = engine
    import bench_streaming  # here only: it loads the app's ui package (gradio) and reads GCS_ENGINE

    import gcs

    prompts, model = list(gcs.load_groups("general")[0].prompts), gcs.load_model()
    size = {"tokens": 64, "seeds": bench_streaming.page_compare.DEFAULT_SEEDS}
    work = {"page": lambda: bench_streaming.page_run(prompts, **size),
            "rounds": lambda: bench_streaming.library_rounds(prompts, **size, model=model, engine=engine,
                                                             rounds=list(gcs.stats.sequential.DEFAULT_ROUNDS))[:2]}
    logged = StageRecords()
    for run in work.values():
        run()
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        timed = {}
        for name in json.loads(line):
            logged.records.clear()
            timed[name], timed[f"{name} first"] = work[name]()
            if name == "page":  # its stages, as the app logs them
                timed["page stages"] = stage_seconds(logged.records)
        print(json.dumps(timed), flush=True)


class StageRecords(logging.Handler):
    """``records``: the ``gcs.timing`` records logged in this process from now on (that logger set to DEBUG),
    parsed."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records: list[dict] = []
        timing = logging.getLogger("gcs.timing")
        timing.setLevel(logging.DEBUG)
        timing.addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        parsed = parse(record.getMessage())
        if parsed is not None:
            self.records.append(parsed)


class InProcess:
    """The side by side's work without a server or a browser, in a process of its own started (and warmed) before the
    app, so that the two never run at once: ``run(order, paused=[...])`` pauses those processes, runs the page's
    update path and the library's rounds in ``order``, resumes them, and returns {"page": s, "page first": s (its
    first verdict), "page stages": ``stage_seconds`` of the page's run, "rounds": s, "rounds first": s (the library's
    first round)}."""

    def __init__(self, engine: str):
        self.process = subprocess.Popen([sys.executable, __file__, IN_PROCESS_WORKER, engine], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True)
        if not json.loads(self.process.stdout.readline() or "{}").get("ready"):
            raise RuntimeError("the in-process worker did not start: see its output above")

    def run(self, order: list[str], paused: list[psutil.Process]) -> dict[str, float]:
        for process in paused:
            process.suspend()
        try:
            self.process.stdin.write(json.dumps(order) + "\n")
            self.process.stdin.flush()
            return json.loads(self.process.stdout.readline())
        finally:
            for process in paused:
                process.resume()

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait()


def paired_ratios(seen: dict, alone: dict) -> dict[str, float]:
    """The issue's ratios from one browser run (``shown``) and its paired in-process run (``InProcess.run``)."""
    return {"browser / page in-process": seen.get("final", float("nan")) / alone["page"],
            "browser's first verdict / library's first round": seen.get("first verdict", float("nan"))
            / alone["rounds first"],
            "page in-process / library's rounds": alone["page"] / alone["rounds"]}


RATIO_GOALS = {"browser / page in-process": 1.15, "browser's first verdict / library's first round": 1.5,
               "page in-process / library's rounds": 1.1}


def seconds(found: dict, key: str) -> str:
    return f"{found[key]:.1f} s" if key in found else "never"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--busy", type=int, default=0, help="processes keeping the cores busy during the runs")
    parser.add_argument("--engine", default="transformers")
    parser.add_argument("--visitors", type=int, default=1, choices=(1, 2),
                        help="2: a second visitor clicks Generate one second after the first")
    parser.add_argument("--in-process", action="store_true",
                        help="pair each run with the same work without a server or a browser, and print the ratios")
    args = parser.parse_args()
    if args.in_process and args.visitors == 2:
        parser.error("--in-process pairs one visitor's runs; leave out --visitors 2")
    alone = InProcess(args.engine) if args.in_process else None  # warmed before the app starts: never both at once
    log = Path(tempfile.mkdtemp(prefix="gcs-bench-browser-")) / "app.log"
    server, url = start_app(engine=args.engine, log=log, GCS_TIMINGS="on")
    hogs, runs, ratios = [], [], []
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"], headless=True)
            pages = [open_page(browser, url)]
            if args.visitors == 2:  # another visitor: a browser of its own, whose processes are counted apart
                known = {process.pid for process in browser_processes()}
                pages.append(open_page(playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"],
                                                                  headless=True), url))
                started = [process for process in browser_processes() if process.pid not in known]
                second_browser = next(process for process in started if process.ppid() not in {p.pid for p in started})
            click(pages[0])
            wait_done(pages[0])  # warm: embedding models, kernels
            idle = idle_share(psutil.Process(server.pid))
            print("the page idle after a run, share of a core over 5 s: "
                  + ", ".join(f"{kind} {share:.3f}" for kind, share in sorted(idle.items())), flush=True)
            hogs = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(args.busy)]
            for index in range(args.runs):
                if args.visitors == 2:
                    first, second = two_visitors(pages, server, url, second_browser)
                    runs.append(first)
                    meanwhile = first["meanwhile"] or (float("nan"), float("nan"))
                    print(f"  run {index + 1}: first visitor: first answer {seconds(first, 'first answer')}, "
                          f"first verdict {seconds(first, 'first verdict')}, final verdict {seconds(first, 'final')} "
                          f"(meanwhile the app {meanwhile[0]:.2f} cores, both browsers {meanwhile[1]:.2f}); second "
                          f"visitor (clicked 1 s later): told its place in the queue after {seconds(second, 'queue')}, "
                          f"its browser {second['waiting']:.2f} cores while it waited, first answer "
                          f"{seconds(second, 'first answer')}, final verdict {seconds(second, 'final')}", flush=True)
                    continue
                order = ["page", "rounds"] if index % 2 else ["rounds", "page"]
                if alone is not None and index % 2:  # every other pair: the in-process work first
                    paired = alone.run(order, paused=process_tree(psutil.Process(server.pid)))
                seen = one_visitor(pages[0], server, url, log)
                if alone is not None and not index % 2:
                    paired = alone.run(order, paused=process_tree(psutil.Process(server.pid)))
                runs.append(seen)
                print(f"  run {index + 1}: first answer {seconds(seen, 'first answer')}, first verdict "
                      f"{seconds(seen, 'first verdict')}, final verdict {seconds(seen, 'final')} ({seen['status']}); "
                      f"CPU: app {seen['cpu'][0]:.1f} s, browser {seen['cpu'][1]:.1f} s ("
                      + ", ".join(f"{kind} {spent:.1f}" for kind, spent in sorted(seen["browser cpu"].items()))
                      + "); browser busy "
                      f"{seen['busy']:.1f} s; scheduled in the page: {page_work(seen)}", flush=True)
                print("\n".join(seen["breakdown"]), flush=True)
                if alone is not None:
                    ratios.append(paired_ratios(seen, paired))
                    for number, parts in sorted(paired["page stages"].items()):
                        print(f"    in-process round {number}: {timings(parts)} s", flush=True)
                    print(f"    paired, without a server or a browser: the page {paired['page']:.1f} s (its first "
                          f"verdict {paired['page first']:.1f} s), the library's rounds {paired['rounds']:.1f} s (its "
                          f"first round {paired['rounds first']:.1f} s); "
                          + ", ".join(f"{name} {ratio:.2f}x" for name, ratio in ratios[-1].items()), flush=True)
            browser.close()
    finally:
        for hog in hogs:
            hog.kill()
        server.kill()
        if alone is not None:
            alone.close()
    busy = f", {args.busy} processes keeping the cores busy" if args.busy else ", quiet"
    medians = {key: statistics.median(run.get(key, float("nan")) for run in runs)
               for key in ("first answer", "first verdict", "final")}
    print(f"side by side at the defaults ({args.engine}{busy}, {args.visitors} visitor(s)), median of {len(runs)}: "
          f"first answer {medians['first answer']:.1f} s, first verdict {medians['first verdict']:.1f} s, final "
          f"verdict {medians['final']:.1f} s")
    if ratios:
        print(f"paired ratios, median of {len(ratios)} (range): " + "; ".join(
            f"{name} {statistics.median(r[name] for r in ratios):.2f}x ({min(r[name] for r in ratios):.2f}-"
            f"{max(r[name] for r in ratios):.2f}x, goal <= {goal}x)" for name, goal in RATIO_GOALS.items()))


if __name__ == "__main__":
    if sys.argv[1:2] == [IN_PROCESS_WORKER]:
        in_process_worker(sys.argv[2])
    else:
        main()
