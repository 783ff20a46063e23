"""End to end in a real browser: headless Chromium (Debian's package) driven by Playwright.

Needs Debian's chromium (the README's test command installs it). Screenshots go to a temporary
folder; ``GCS_UPDATE_SCREENSHOTS=1 python -m pytest tests/test_browser.py`` writes them to docs/images/
for the README instead (look at them before committing).
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from urllib.parse import quote, urlsplit

import pytest
from playwright.sync_api import expect, sync_playwright

import gcs
from conftest import first_recycled_win
from gcs.runtime.quoting import quoted

ROOT = Path(__file__).resolve().parent.parent
UPDATING_SCREENSHOTS = os.environ.get("GCS_UPDATE_SCREENSHOTS") == "1"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
TIMEOUT_MS = 900_000  # generous: a busy machine is slow, not broken


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory) -> Path:
    return ROOT / "docs" / "images" if UPDATING_SCREENSHOTS else tmp_path_factory.mktemp("shots")


@pytest.fixture(scope="module")
def page(app_url):
    if not Path(CHROMIUM).exists():
        pytest.fail("the browser test needs Debian's chromium package: apt-get install -y chromium")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"], headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        # every action (a click, a fill, and what it waits for after) waits as long as a busy machine needs: a click
        # once timed out at Playwright's default 30 s while the page was busy beside a full test run
        page.set_default_timeout(TIMEOUT_MS)
        page.goto(app_url)
        yield page
        browser.close()


def screenshot(page, path: Path) -> None:
    """A full-page screenshot with no leftover toast (an earlier test's error must not appear in the README)."""
    for button in page.locator(".toast-close").all():
        button.click()
    expect(page.locator(".toast-close")).to_have_count(0, timeout=TIMEOUT_MS)
    page.screenshot(path=str(path), full_page=True)


def record_texts(page, selector: str) -> None:
    """From now on keep every text ``selector`` shows (a MutationObserver): a passing state is seen, however brief.
    The whole page is observed and the element looked up by its id at each change: Gradio may put a new element in
    the old one's place (an observer of the old one then sees nothing more: a fresh clone's suite once waited 15
    minutes for a "Working…" that the page had shown)."""
    page.locator(selector).evaluate("""element => {
        window.seenTexts = window.seenTexts || {};
        const id = element.id, seen = window.seenTexts[id] = [element.textContent];
        new MutationObserver(() => {
            const text = document.getElementById(id)?.textContent ?? "";
            if (text !== seen[seen.length - 1]) seen.push(text);
        }).observe(document.body, {subtree: true, childList: true, characterData: true});
    }""")


def record_answers(page) -> None:
    """From now on keep every change of GCSwR's answers in the side by side, with what the status said then
    (``window.answersSeen``, [status, answers] pairs): answers that stream show while the status says "generating"."""
    page.locator("#responses-gcswr").evaluate("""element => {
        const status = document.querySelector('#status');
        window.answersSeen = [];
        new MutationObserver(() => window.answersSeen.push([status.innerText, element.innerText]))
            .observe(element, {subtree: true, childList: true, characterData: true});
    }""")


def texts_seen(page, selector: str) -> list[str]:
    return page.locator(selector).evaluate("element => window.seenTexts[element.id]")


def headers(page, table: str) -> list[str]:
    return [text.strip() for text in page.locator(f"{table} thead th").all_inner_texts()]


def bounds(page, selector: str) -> dict:
    found = page.locator(selector).bounding_box()
    assert found is not None, f"{selector} is not on the page"
    return found


# counts the animation frames Gradio's status trackers ask for (by the asset on the caller's stack)
COUNT_TRACKER_FRAMES = """
window.trackerFrames = 0;
const requestFrame = window.requestAnimationFrame.bind(window);
window.requestAnimationFrame = (callback) => {
  if ((new Error().stack || "").includes("/assets/statustracker-")) window.trackerFrames += 1;
  return requestFrame(callback);
};
"""
# true once a whole second went by without a tracker frame (polled once a second)
TRACKERS_STILL = """() => {
  const now = performance.now(), last = window.lastLook;
  window.lastLook = {now, frames: window.trackerFrames};
  return last !== undefined && now - last.now >= 1000 && window.trackerFrames === last.frames;
}"""


# counts the canvases Gradio's HighlightedText bundle creates (it draws a colour on one to read it as rgba)
COUNT_COLOUR_CANVASES = """
window.colourCanvases = 0;
const createElement = document.createElement.bind(document);
document.createElement = (name, ...rest) => {
  if (String(name).toLowerCase() === "canvas" && (new Error().stack || "").includes("/assets/BUNDLE")) {
    window.colourCanvases += 1;
  }
  return createElement(name, ...rest);
};
"""


@pytest.mark.slow
def test_an_idle_page_asks_for_no_animation_frames(page, app_url):
    """Once the page has loaded and nothing is pending, no status tracker times anything: Gradio's loading tracker
    used to leave its timer asking for a frame 60 times a second for the life of the tab (``ui.server.page_assets``)."""
    idle = page.context.browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        idle.add_init_script(COUNT_TRACKER_FRAMES)
        idle.goto(app_url)
        # the page load's own events (the link, the coupling explorer's first plot) end; their outputs were pending
        idle.get_by_role("tab", name="Coupling explorer").click()
        expect(idle.locator("#coupling-status")).to_contain_text("Done: 11 points", timeout=TIMEOUT_MS)
        assert idle.evaluate("window.trackerFrames") > 0  # the count sees the trackers' frames while they time
        idle.wait_for_function(TRACKERS_STILL, polling=1000, timeout=TIMEOUT_MS)
    finally:
        idle.close()


@pytest.mark.slow
def test_a_page_waiting_in_the_queue_ticks_its_timers_once_a_second(page, app_url):
    """A visitor whose run waits behind another's sees each pending output's timer go on, one tick a second: Gradio's
    tracker redraws it in every animation frame, about 0.16 of a core in that tab for the whole wait
    (``ui.server.page_assets``). The count is of frames in the page's own time, so a slow machine only lowers it."""
    names = {d["api_name"]: len(d["outputs"]) for d in page.request.get(app_url + "config").json()["dependencies"]}
    pending_at_most = names["say_working_in_lane"] + names["compare_stream"]  # the outputs a run leaves pending
    running, waiting = (page.context.browser.new_page(viewport={"width": 1400, "height": 1000}) for _ in range(2))
    try:
        waiting.add_init_script(COUNT_TRACKER_FRAMES)
        for visitor in (running, waiting):
            visitor.set_default_timeout(TIMEOUT_MS)
            visitor.goto(app_url)
            visitor.locator("#paraphrases textarea").wait_for(timeout=TIMEOUT_MS)
        running.locator("#run-compare").click()
        expect(running.locator("#status")).to_contain_text("Round 1", timeout=TIMEOUT_MS)
        waiting.locator("#run-compare").click()
        expect(waiting.locator("#status")).to_contain_text("Waiting in the queue", timeout=TIMEOUT_MS)
        timer = waiting.get_by_text(re.compile(r"queue: 1/1 \| [\d.]+s")).first
        expect(timer).to_be_visible(timeout=TIMEOUT_MS)
        shown, (start, counted) = timer.text_content(), waiting.evaluate("[performance.now(), window.trackerFrames]")
        # a window of at least 3 s of the page's own time to count frames in, in which the timer moves on
        waiting.wait_for_function("start => performance.now() - start >= 3000", arg=start, polling=500,
                                  timeout=TIMEOUT_MS)
        expect(timer).not_to_have_text(shown, timeout=TIMEOUT_MS)
        end, frames = waiting.evaluate("[performance.now(), window.trackerFrames]")
        expect(waiting.locator("#status")).to_contain_text("Waiting in the queue")  # it waited all along
        seconds, frames = (end - start) / 1000, frames - counted
        # at most one frame a second per pending output (2x for the window's edges); Gradio's: 60 each
        assert 0 < frames <= 2 * pending_at_most * seconds, (frames, seconds, pending_at_most)
    finally:
        running.close()
        waiting.close()


@pytest.mark.slow
def test_side_by_side_streams_responses_and_plots(page, app_url, screenshots):
    """The side by side at the defaults but the seeds: 8 (two rounds, 4 then 4), or 16 where the screenshot is taken
    (the library's tests cover what the defaults give; this one, what the page shows)."""
    from ui.server import page_assets

    [bundle] = page_assets.highlighted_text_colours()
    page.add_init_script(COUNT_COLOUR_CANVASES.replace("BUNDLE", bundle))  # from this load on
    page.goto(app_url if UPDATING_SCREENSHOTS else app_url + "?seeds=8")
    if not UPDATING_SCREENSHOTS:
        expect(page.locator("#compare-seeds input[type=number]")).to_have_value("8", timeout=TIMEOUT_MS)
    # before any run the scores table already says what its columns are (no stray "1 2 3" header)
    expect(page.locator("#scores thead")).to_contain_text("method", timeout=TIMEOUT_MS)
    assert headers(page, "#scores")[:2] == ["method", "E5"], headers(page, "#scores")
    box = page.locator("#paraphrases textarea")
    # an example fills the box; its answer from the server comes after the page shows it, and must not overwrite
    # what is typed next (seen on a busy machine: the run answered the example instead)
    with page.expect_response(lambda response: "/run/predict" in response.url, timeout=TIMEOUT_MS):
        page.get_by_text("What is DNA? Can you explain", exact=False).first.click()
    expect(box).to_have_value(re.compile(r"^What is DNA\?\nCan you explain what DNA is\?"), timeout=TIMEOUT_MS)
    sky = "Why is the sky blue?\nWhat makes the sky look blue?\nExplain the blue colour of the sky."
    box.fill(sky)
    expect(box).to_have_value(sky)
    record_answers(page)  # the answers must show before the run ends
    joined = []  # the events the run puts in Gradio's queue, by function name

    def note_join(request):
        if urlsplit(request.url).path.endswith("/queue/join"):
            joined.append(request.post_data_json["fn_index"])

    page.on("request", note_join)
    page.locator("#run-compare").click()
    for method in ("is", "gcs", "gcswr"):  # responses arrive in every column, then the heatmaps
        expect(page.locator(f"#responses-{method}")).to_contain_text("[3]", timeout=TIMEOUT_MS)
        expect(page.locator(f"#heatmap-{method} .js-plotly-plot")).to_be_visible(timeout=TIMEOUT_MS)
    expect(page.locator("#status")).to_contain_text("Done", timeout=TIMEOUT_MS)
    page.remove_listener("request", note_join)
    names = {d["id"]: d["api_name"] for d in page.request.get(app_url + "config").json()["dependencies"]}
    # the run's own two events and nothing else: a round's update carries its seed's view, and no event of the
    # seed browser draws those heatmaps and responses a second time while the next round generates
    run = [re.sub(r"_\d+$", "", names[index]) for index in joined]  # (Gradio numbers a second endpoint's name)
    assert run == ["say_working_in_lane", "compare_stream"], run
    seen = page.evaluate("window.answersSeen")
    early = [answers for status, answers in seen if "[3]" in answers and "Round 1: generating" in status]
    assert early, f"no answer was on screen while the first round generated: {seen[:3]}"
    # each colour of the page's colour maps drawn on a canvas once (as it is and half-transparent), not at every
    # streamed beat of every response column (Gradio's bundle: 20 a column at each, ``ui.server.page_assets``)
    components = page.request.get(app_url + "config").json()["components"]
    colours = {colour for component in components if component["type"] == "highlightedtext"
               for colour in (component["props"].get("color_map") or {}).values()}
    assert 0 < page.evaluate("window.colourCanvases") <= 2 * len(colours), (len(colours), len(seen))
    scores = page.locator("#scores")
    expect(scores).to_contain_text("GCSwR")
    expect(scores).to_contain_text("E5")
    expect(scores).to_contain_text("aligned")
    # many seeds, paired, in rounds: the verdict counts seeds, says what is beyond noise, and why the run stopped
    verdict = page.locator("#verdict")
    expect(verdict).to_contain_text(re.compile(r"over (4|8|16) seeds"))
    expect(verdict).to_contain_text(re.compile("within noise|beyond noise"))
    expect(verdict).to_contain_text("aligned-agreement")  # the mechanism's footprint beside E5
    expect(verdict).to_contain_text(re.compile(r"Stopped: (every comparison decided after|the maximum of) \d+ seeds"))
    expect(page.locator("#status")).to_contain_text(re.compile(r"Done: .*\d+ seeds"))
    expect(page.locator("#paired-plot .js-plotly-plot")).to_be_visible()
    # words wrap whole: gradio's own style breaks them anywhere
    word_break = page.locator("#responses-gcswr .textfield").evaluate("e => getComputedStyle(e).wordBreak")
    assert word_break == "normal"
    tops = [bounds(page, f"#responses-{method}")["y"] for method in ("is", "gcs", "gcswr")]
    assert max(tops) - min(tops) <= 3, tops  # the three response boxes start level
    for method in ("is", "gcs", "gcswr"):  # line breaks only between the three answers (two each), none inside one
        expect(page.locator(f"#responses-{method} .line-break")).to_have_count(6)
    screenshot(page, screenshots / "screenshot-compare.png")


@pytest.mark.slow
def test_the_seed_browser_shows_another_seed(page):
    page.locator("#seed-shown").click()
    page.get_by_role("option", name="2", exact=True).click()
    expect(page.locator("#heatmap-gcswr")).to_contain_text("seed 2", timeout=TIMEOUT_MS)
    page.get_by_label("words present in every response").check()
    expect(page.locator("#responses-gcswr")).to_contain_text("[3]", timeout=TIMEOUT_MS)


@pytest.mark.slow
def test_bad_input_is_a_toast_and_earlier_results_stay(page):
    expect(page.locator("#status")).to_contain_text("Done", timeout=TIMEOUT_MS)
    record_texts(page, "#status")
    page.locator("#paraphrases textarea").fill("Only one question?")
    page.locator("#run-compare").click()
    expect(page.get_by_text("enter 2 to 8 paraphrases").first).to_be_visible(timeout=TIMEOUT_MS)
    expect(page.locator("#status")).to_contain_text("Failed", timeout=TIMEOUT_MS)
    assert any("Working…" in text for text in texts_seen(page, "#status"))  # not the last run's "Done." meanwhile
    expect(page.locator("#heatmap-gcswr .js-plotly-plot")).to_be_visible()  # the last run is still on screen
    expect(page.locator("#verdict")).to_contain_text("seeds")


POWERS_OF_TEN = re.compile(r"^(0\.0*1|10*|10[⁻⁰¹²³⁴⁵⁶⁷⁸⁹]+)$")


@pytest.mark.slow
def test_step_through_tab(page):
    page.get_by_role("tab", name="Inside the sampler").click()
    record_texts(page, "#trace-status")
    page.locator("#trace-start").click()
    expect(page.locator("#trace-status")).to_contain_text("Token 1 of", timeout=TIMEOUT_MS)
    assert any("Working…" in text for text in texts_seen(page, "#trace-status"))
    expect(page.locator("#trace-race-1 .js-plotly-plot")).to_be_visible(timeout=TIMEOUT_MS)
    for position in (2, 3, 4, 5, 6):
        page.locator("#trace-step").click()
        expect(page.locator("#trace-status")).to_contain_text(f"Token {position} of", timeout=TIMEOUT_MS)
    page.locator("#trace-back").click()
    expect(page.locator("#trace-status")).to_contain_text("Token 5 of", timeout=TIMEOUT_MS)
    expect(page.locator("#trace-explanation")).to_contain_text("keeps its clocks")
    expect(page.locator("#trace-table")).to_contain_text("arrival")
    # the race sits beside the controls: with the Step button on screen, both races fit on that screen too
    step, first, second = bounds(page, "#trace-step"), bounds(page, "#trace-race-1"), bounds(page, "#trace-race-2")
    screen = page.viewport_size["height"]
    assert abs(first["y"] - step["y"]) < 100 and second["y"] + second["height"] - step["y"] < screen, (step, second)
    # the log axis reads 0.1, 1, 10, 100 (powers of ten only), the same on both paraphrases' panels
    ticks = [page.locator(f"#trace-race-{row} g.x2tick text").all_text_contents() for row in (1, 2)]
    assert ticks[0] == ticks[1] and len(ticks[0]) >= 2 and all(POWERS_OF_TEN.match(t) for t in ticks[0]), ticks
    probability_ticks = [page.locator(f"#trace-race-{row} g.xtick text").all_text_contents() for row in (1, 2)]
    assert probability_ticks[0] == probability_ticks[1], probability_ticks
    page.locator("#trace-force-choice input").click()  # branch: force another candidate at this step
    page.get_by_role("option").first.click()
    page.locator("#trace-force").click()
    expect(page.locator("#trace-explanation")).to_contain_text("was forced to emit", timeout=TIMEOUT_MS)
    expect(page.locator("#trace-status")).to_contain_text("Token 5 of", timeout=TIMEOUT_MS)


@pytest.mark.slow
def test_is_in_the_step_through_shows_no_clocks(page):
    page.locator("#trace-method input[value=is]").check()
    page.locator("#trace-start").click()
    expect(page.locator("#trace-race-caption")).to_contain_text("IS has no clocks", timeout=TIMEOUT_MS)
    expect(page.locator("#trace-status")).to_contain_text("Token 1 of", timeout=TIMEOUT_MS)
    assert headers(page, "#trace-table") == ["paraphrase", "token", "p", "won"], headers(page, "#trace-table")
    expect(page.locator("#trace-explanation")).to_contain_text("uniform u")
    assert page.locator("#trace-race-1 g.x2tick").count() == 0  # no arrival panel
    page.locator("#trace-method input[value=gcswr]").check()


@pytest.mark.slow
def test_hindsight_tab_takes_a_side_by_side_answer(page, screenshots):
    page.get_by_role("tab", name="Hindsight").click()
    page.get_by_role("button", name="Take the side-by-side run's first GCSwR answer").click()
    expect(page.locator("#hindsight-prompt :is(textarea, input)")).to_have_value("Why is the sky blue?",
                                                                                timeout=TIMEOUT_MS)
    expect(page.locator("#hindsight-status")).to_contain_text("with that run's temperature", timeout=TIMEOUT_MS)
    page.locator("#run-hindsight").click()
    expect(page.locator("#hindsight-status")).to_contain_text("Done", timeout=TIMEOUT_MS)
    expect(page.locator("#hindsight-answers")).to_contain_text("[paraphrase 2]")
    expect(page.locator("#hindsight-replay")).to_contain_text("Replay check ✓")  # the premise, shown
    page.locator("#counterfactual-at input").click()  # what if it had said something else at token 1?
    page.get_by_role("option").nth(1).click()
    page.locator("#counterfactual-replacement textarea").fill(" Light")
    record_texts(page, "#hindsight-status")  # "Done." now: the new run must not keep it while it works
    page.locator("#run-counterfactual").click()
    expect(page.locator("#counterfactual-answer")).to_contain_text("[had it said that]", timeout=TIMEOUT_MS)
    expect(page.locator("#hindsight-status")).to_contain_text("Done", timeout=TIMEOUT_MS)
    assert any("Working…" in text for text in texts_seen(page, "#hindsight-status"))
    screenshot(page, screenshots / "screenshot-hindsight.png")


@pytest.mark.slow
def test_an_undecided_run_takes_more_seeds(page, app_url):
    """4 seeds can claim nothing (an exact test's floor at 4 seeds is above each comparison's share): the run ends
    undecided at its maximum and offers "more seeds", which continues the same sequence (to 12 seeds, or 20)."""
    page.goto(app_url + "?tab=compare&seeds=4&max_new_tokens=8&methods=is,gcswr&q="
              + quote("Name a colour.\nSay one colour."))
    expect(page.locator("#paraphrases textarea")).to_have_value("Name a colour.\nSay one colour.", timeout=TIMEOUT_MS)
    expect(page.locator("#more-seeds")).to_be_hidden()
    page.locator("#run-compare").click()
    expect(page.locator("#status")).to_contain_text("Done: the maximum of 4 seeds reached", timeout=TIMEOUT_MS)
    expect(page.locator("#verdict")).to_contain_text("more seeds can continue the same sequence")
    page.locator("#more-seeds").click()
    expect(page.locator("#verdict")).to_contain_text(re.compile(r"over (12|20) seeds"), timeout=TIMEOUT_MS)
    expect(page.locator("#status")).to_contain_text("Done", timeout=TIMEOUT_MS)
    page.locator("#seed-shown").click()
    expect(page.get_by_role("option", name="11", exact=True)).to_be_visible()  # the browser holds the new seeds
    page.keyboard.press("Escape")
    page.goto(app_url)


@pytest.mark.slow
def test_links_reproduce_settings_and_bad_ones_are_named(page, app_url):
    page.goto(app_url + "?tab=trace&method=gcs&seed=7&q=" + quote("What is DNA?\nExplain DNA."))
    expect(page.get_by_role("tab", name="Inside the sampler", selected=True)).to_be_visible(timeout=TIMEOUT_MS)
    expect(page.locator("#trace-paraphrases :is(textarea, input)")).to_have_value("What is DNA?\nExplain DNA.",
                                                                      timeout=TIMEOUT_MS)
    expect(page.locator("#trace-method input[value=gcs]")).to_be_checked()
    page.locator("#share").click()
    expect(page.locator("#share-link :is(textarea, input)")).to_have_value(
        re.compile(r"\?tab=trace&q=What.*&method=gcs&seed=7"), timeout=TIMEOUT_MS)
    page.goto(app_url + "?tab=compare&seeds=many&temperature=0.5")
    expect(page.get_by_text("Ignored in the link: seeds 'many' must be a number").first).to_be_visible(
        timeout=TIMEOUT_MS)
    expect(page.locator("#paraphrases textarea")).to_be_visible()  # the page still works
    page.goto(app_url)


@pytest.mark.slow
def test_a_step_through_link_restores_its_step_and_runs_it(page, app_url, screenshots, embedded_model):
    """A shared link shows the step it was taken at, at once (no click), and a step where a recycled clock decides
    paraphrase 2's race says so. Which step that is depends on the machine's kernels (the tokens do), so it is
    found from the same trace computed here, with the model and dtype the app runs."""
    paraphrases = ["Why is the sky blue?", "What makes the sky look blue?"]
    seed, _, carried = first_recycled_win(lambda seed: gcs.trace(paraphrases, method="gcswr", seed=seed,
                                                                 max_new_tokens=24, model=embedded_model))
    step = carried.position + 1
    page.goto(app_url + f"?tab=trace&seed={seed}&step={step}&q=" + quote("\n".join(paraphrases)))
    expect(page.locator("#trace-status")).to_contain_text(f"Token {step} of ", timeout=TIMEOUT_MS)
    explanation = page.locator("#trace-explanation")
    expect(explanation).to_contain_text(f"Recycled clock: paraphrase 2's {carried.text!r} won with clock "
                                        f"E = {carried.clock:.3g}")
    expect(explanation).to_contain_text(f"the same clock that won paraphrase {carried.earlier_row + 1}'s race at "
                                        f"token {carried.earlier_position + 1}")
    expect(page.locator("#trace-race-2 .js-plotly-plot")).to_be_visible(timeout=TIMEOUT_MS)
    screenshot(page, screenshots / "screenshot-trace.png")  # before the link box shows this server's address
    page.locator("#share").click()
    expect(page.locator("#share-link :is(textarea, input)")).to_have_value(re.compile(rf"&step={step}$"),
                                                               timeout=TIMEOUT_MS)
    page.goto(app_url)


@pytest.mark.parametrize("query, shown", [
    ("tab=" + quote("<a href=https://evil.example/x>click</a>"), "<a href=https://evil.example/x>click</a>"),
    ("tab=compare&methods=" + quote("<img src=https://evil.example/t.png>"), "<img src=https://evil.example/t.png>"),
    ("tab=compare&methods=" + quote("<form action=https://evil.example><input name=pw placeholder=password>"
                                    "<button>Log in</button></form>"), "<form action=https://evil.example>"),
])
@pytest.mark.slow
def test_markup_in_a_link_shows_as_text(page, app_url, query, shown):
    """What a link says reaches the page as text: no live link, image or form from someone else's markup."""
    requested = []
    page.on("request", lambda request: requested.append(request.url))
    page.goto(app_url + "?" + query)
    expect(page.get_by_text("Ignored in the link").first).to_be_visible(timeout=TIMEOUT_MS)
    # as the toast quotes it: 40 characters as they read once escaped (a "<" counts as "&lt;"), the markup as text
    quoted_text = quoted(shown, 40)[1:].split("'…")[0].rstrip("'")
    assert quoted_text.startswith("<") and len(quoted_text) >= 20
    expect(page.get_by_text(quoted_text, exact=False).first).to_be_visible()
    assert page.locator("a[href*='evil.example'], img[src*='evil.example'], form[action*='evil.example']").count() == 0
    # the page's own address carries the markup in its query: what counts is a request *to* that host
    assert not [url for url in requested if urlsplit(url).hostname == "evil.example"]
    page.goto(app_url)


@pytest.mark.slow
def test_coupling_explorer_plots(page, screenshots):
    """The explorer plots on a click. The page load runs it too (the last test loaded a page): that run ends first,
    or its "Done" would be taken for the click's, and the click's run would still be going when the next test clicks
    Explore, a click the page drops while its last one is pending (seen on a loaded machine: the next test waited
    for an answer to a click never sent)."""
    page.get_by_role("tab", name="Coupling explorer").click()
    status = page.locator("#coupling-status")
    expect(status).to_contain_text("Done: 11 points", timeout=TIMEOUT_MS)  # the page load's run
    record_texts(page, "#coupling-status")
    page.locator("#run-coupling").click()  # as a user would
    page.wait_for_function("""() => {
        const seen = window.seenTexts["coupling-status"], working = seen.findLastIndex(t => t.includes("Working"));
        return working >= 0 && seen.slice(working + 1).some(t => t.includes("Done: 11 points"));
    }""", timeout=TIMEOUT_MS)  # this click's run: "Working…", then its own "Done" (never empty)
    expect(page.locator("#coupling-plot .js-plotly-plot")).to_be_visible(timeout=TIMEOUT_MS)
    expect(page.locator("#recycling-plot .js-plotly-plot")).to_be_visible(timeout=TIMEOUT_MS)
    expect(page.locator("#coupling-table thead")).to_contain_text("Monte Carlo (shared noise)")
    assert not [h for h in headers(page, "#coupling-table") if "_" in h], headers(page, "#coupling-table")
    screenshot(page, screenshots / "screenshot-coupling.png")


@pytest.mark.slow
def test_a_negative_seed_is_named_in_the_status_and_the_results_stay(page):
    """Gradio's number box refused a negative seed before the handler ran: the status stayed at "Working…", an "Error"
    badge covered the plot (which went blank), and "Copy a link" failed on every tab. A value Gradio still refuses (past
    the box's maximum) is said in the status too. After the explorer's run (the last test's)."""
    page.get_by_role("tab", name="Coupling explorer").click()
    status = page.locator("#coupling-status")
    expect(status).to_contain_text("Done: 11 points", timeout=TIMEOUT_MS)
    seed = page.locator("#coupling-seed input")
    seed.fill("-3")
    page.locator("#run-coupling").click()
    expect(status).to_contain_text("Failed: coupling seed must be a whole number from 0 to", timeout=TIMEOUT_MS)
    expect(status).to_contain_text("got -3")
    expect(page.locator("#coupling-plot .js-plotly-plot")).to_be_visible()  # the last run is still on screen
    page.locator("#share").click()  # the link of this tab's settings, the bad seed as typed
    expect(page.locator("#share-link :is(textarea, input)")).to_have_value(re.compile(r"\?tab=coupling.*&seed=-3"),
                                                                           timeout=TIMEOUT_MS)
    seed.fill("3000000000")  # past the box's maximum: Gradio refuses it before the handler; the status says so
    page.locator("#run-coupling").click()
    expect(page.get_by_text("is greater than maximum value 2147483648").first).to_be_visible(timeout=TIMEOUT_MS)
    expect(status).to_contain_text("Failed: a setting was refused", timeout=TIMEOUT_MS)
    seed.fill("0")


@pytest.mark.slow
def test_markup_in_an_error_shows_as_text(page):
    """Text typed by a user never becomes a link, form or image (it used to, in the error toast)."""
    page.get_by_role("tab", name="Coupling explorer").click()
    hostile = '<a id="evil-link" href="http://evil.example/x">click</a><form id="evil-form"></form>' \
              '<img id="evil-image" src="http://evil.example/x.png">, 0.5'
    page.get_by_label("p (weights; normalised for you)").fill(hostile)
    page.locator("#run-coupling").click()
    expect(page.get_by_text("p must be numbers").first).to_be_visible(timeout=TIMEOUT_MS)
    for element in ("a#evil-link", "form#evil-form", "img#evil-image"):
        assert page.locator(element).count() == 0, element
    expect(page.get_by_text('<a id="evil-link"').first).to_be_visible(timeout=TIMEOUT_MS)
    page.get_by_label("p (weights; normalised for you)").fill("0.5, 0.3, 0.15, 0.05")


@pytest.mark.slow
def test_sweep_tab_plots_curves(page, screenshots):
    page.get_by_role("tab", name="Consistency vs temperature").click()
    expect(page.locator("#sweep-table thead")).to_contain_text("mean consistency", timeout=TIMEOUT_MS)  # before a run
    page.locator("#sweep-seeds input[type=number]").fill("1")
    record_texts(page, "#sweep-status")
    page.locator("#run-sweep").click()
    expect(page.locator("#sweep-plot .js-plotly-plot")).to_be_visible(timeout=TIMEOUT_MS)
    expect(page.locator("#sweep-status")).to_contain_text("Done", timeout=TIMEOUT_MS)
    assert any("Working…" in text for text in texts_seen(page, "#sweep-status"))
    assert headers(page, "#sweep-table")[:3] == ["method", "temperature", "mean consistency"]
    screenshot(page, screenshots / "screenshot-sweep.png")


@pytest.mark.slow
def test_ab_tab_runs_both_arms_under_one_noise(page, app_url, screenshots):
    page.get_by_role("tab", name="A/B").click()
    expect(page.locator("#ab-effects thead")).to_contain_text("B − A", timeout=TIMEOUT_MS)  # before a run
    for slider, value in (("#ab-builtin", "1"), ("#ab-seeds", "2"), ("#ab-tokens", "8")):
        page.locator(f"{slider} input[type=number]").fill(value)
    record_texts(page, "#ab-status")
    page.locator("#run-ab").click()
    expect(page.locator("#ab-status")).to_contain_text("Done", timeout=TIMEOUT_MS)
    assert any("Working…" in text for text in texts_seen(page, "#ab-status"))
    expect(page.locator("#ab-verdict")).to_contain_text("with shared luck", timeout=TIMEOUT_MS)
    assert headers(page, "#ab-pairs")[:4] == ["prompt", "seed", "identical", "parts at token"]
    expect(page.locator("#ab-diff")).to_contain_text("[B]", timeout=TIMEOUT_MS)
    screenshot(page, screenshots / "screenshot-ab.png")
    page.locator("#ab-pair input").click()
    expect(page.get_by_role("option", name=re.compile(r"^prompt 1, seed \d"))).to_have_count(2)  # 1 prompt x 2 seeds
    page.keyboard.press("Escape")
    # the tab's link restores it: the settings typed here come back from the link alone
    page.locator("#ab-b-system textarea").fill("Be brief.")
    page.locator("#share").click()
    expect(page.locator("#share-link :is(textarea, input)")).to_have_value(re.compile(r"\?tab=ab&.*b_system=Be"),
                                                                           timeout=TIMEOUT_MS)
    shared = page.locator("#share-link :is(textarea, input)").input_value()
    page.goto(app_url)
    page.goto(shared)
    expect(page.get_by_role("tab", name="A/B", selected=True)).to_be_visible(timeout=TIMEOUT_MS)
    expect(page.locator("#ab-b-system textarea")).to_have_value("Be brief.", timeout=TIMEOUT_MS)
    expect(page.locator("#ab-seeds input[type=number]")).to_have_value("2")
    page.goto(app_url)


@pytest.mark.parametrize("hostile", ["[x](https://evil.example/a) ![](https://evil.example/t.png)",
                                     "<https://evil.example/auto> **b** `c` $$x$$"])
@pytest.mark.slow
def test_markdown_in_an_error_shows_as_text(page, app_url, hostile):
    """The status line is Markdown: Markdown quoted from user input in an error shows as typed there (it used to
    render: a live link, an image fetched from someone else's host, bold, code, math)."""
    requested = []
    page.on("request", lambda request: requested.append(request.url))
    # a fresh page, and its own load's run of the explorer done first: Gradio drops a click on Run while that run
    # is pending, and this test would then wait for a refusal that never comes
    page.goto(app_url)
    page.get_by_role("tab", name="Coupling explorer").click()
    status = page.locator("#coupling-status")
    expect(status).to_contain_text("Done: 11 points", timeout=TIMEOUT_MS)
    page.get_by_label("p (weights; normalised for you)").fill(hostile)
    page.locator("#run-coupling").click()
    # this run's own refusal (an earlier test's may still be showing), its input as typed
    expect(status).to_contain_text(f"p must be numbers separated by commas, got '{hostile}'", timeout=TIMEOUT_MS)
    # the status is rendered (its own "Failed:" in bold; on a loaded machine the text can show before the markup)
    expect(status.locator("strong")).to_have_count(1, timeout=TIMEOUT_MS)
    assert page.locator("a[href*='evil.example'], img[src*='evil.example']").count() == 0
    assert status.locator("a, img, code, .katex, em").count() == 0
    assert not [url for url in requested if urlsplit(url).hostname == "evil.example"]
    page.get_by_label("p (weights; normalised for you)").fill("0.5, 0.3, 0.15, 0.05")


@pytest.mark.slow
def test_a_number_typed_past_a_slider_s_range_is_named(page, app_url):
    """Gradio sets a typed 5 to the slider's maximum, 2, when the box loses focus; the page says so in a toast.

    On a fresh page: an earlier test's last event may still be closing its stream, and Gradio 6 can then drop the
    next event's messages (seen twice on a loaded machine: the toast never came; the app log showed the session's
    message queue deleted under a live stream, gradio/routes.py sse_stream)."""
    page.goto(app_url)
    page.get_by_role("tab", name="Side by side").click()
    box = page.locator("input[aria-label='number input for temperature']:visible").first
    box.fill("5")
    box.press("Tab")
    expect(page.get_by_text("temperature: 5 is outside this setting's range (0 to 2); 2 is used").first).to_be_visible(
        timeout=TIMEOUT_MS)
    expect(box).to_have_value("2")
    box.fill("1")
    box.press("Tab")
    expect(box).to_have_value("1")
