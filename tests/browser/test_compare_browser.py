"""The Compare page in the real thing: `streamlit run` with SmolLM2, driven by Chromium. Two targets stream side by
side at once and a Stop in one pane leaves the other writing; the blind vote reveals the targets and lands in the
leaderboard; a target on the OpenAI-compatible backend (our own server, `make serve`) answers greedy exactly as the
app's own engine does, and its pane continues in Chat, saved in the history; a llama.cpp target answers beside
transformers and is listed, with its size, among the loaded models.

The page's logic (votes stored, pairwise votes, approvals, memory checks) is tested in AppTest:
tests/pages/test_compare_page.py."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import expect

from tests.helpers import ARTIFACTS, ROOT, readme_screenshot, require_llama_cpp, settle, streamlit_app

QUESTION = "What is the capital of France?"
STORY = "Write a long story about a dragon who learns to cook."
WAITING = "waiting for the model..."


# ----- the apps ----------------------------------------------------------------------------------------------------

def app_env(tmp_path_factory: pytest.TempPathFactory, name: str, targets: list[dict[str, Any]] | None = None,
            model_dir: Path | None = None) -> dict[str, str]:
    """The app's environment: a database of its own, the targets file `targets` (None: the default targets), the
    picker's model `model_dir` (None: the embedded SmolLM2, by its empty path)."""
    folder = tmp_path_factory.mktemp(name)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "DEMO_DEVICE": "cpu",
           "DEMO_DATABASE_URL": f"sqlite:///{folder}/conversations.db"}
    for name_ in ("DEMO_COMPARE_TARGETS", "DEMO_MODEL", "DEMO_BACKEND", "DEMO_IMAGE_API_URL"):
        env.pop(name_, None)
    if model_dir is not None:
        env["DEMO_MODEL"] = str(model_dir)
    if targets is not None:
        path = folder / "targets.json"
        path.write_text(json.dumps({"targets": targets}), encoding="utf-8")
        env["DEMO_COMPARE_TARGETS"] = str(path)
    return env


@pytest.fixture(scope="module")
def compare_app(smollm2_dir, browser, tmp_path_factory):
    """The app as a new user finds it: SmolLM2 on transformers, the default targets."""
    with streamlit_app(app_env(tmp_path_factory, "compare-db", model_dir=smollm2_dir), "streamlit-compare.log") as url:
        yield url


@pytest.fixture(scope="module")
def compare_app_with_api(smollm2_dir, browser, tmp_path_factory):
    """Our OpenAI-compatible server on SmolLM2, and the app comparing its own engine (greedy) with that server."""
    from harness.local_http import free_port
    from harness.processes import server_process

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "app.frontends.api", "--model", str(smollm2_dir), "--port", str(port)]
    server_env = {**os.environ, "HF_HUB_OFFLINE": "1", "DEMO_DEVICE": "cpu"}
    greedy = {"temperature": 0, "max_new_tokens": 40}
    targets = [{"label": "Transformers in the app", "sampling": greedy},
               {"label": "Via the API", "model": {"backend": "openai", "api_base_url": f"{base}/v1"},
                "sampling": greedy}]
    with server_process(command, f"{base}/health", cwd=ROOT, env=server_env,
                        log=ARTIFACTS / "api-server-compare.log", start_timeout_s=180, lifetime_s=1200):
        env = app_env(tmp_path_factory, "compare-api-db", targets, model_dir=smollm2_dir)
        with streamlit_app(env, "streamlit-compare-api.log") as url:
            yield url


@pytest.fixture(scope="module")
def compare_app_with_llamacpp(smollm2_dir, browser, tmp_path_factory):
    """The app comparing the embedded SmolLM2 on transformers with its GGUF on llama.cpp (both by the empty model
    path: the embedded model; llama.cpp is the model picker's, the default on a CPU)."""
    require_llama_cpp()
    greedy = {"temperature": 0, "max_new_tokens": 30}
    targets = [{"label": "Transformers", "model": {"backend": "hf"}, "sampling": greedy},
               {"label": "llama.cpp", "model": {"backend": "llamacpp"}, "sampling": greedy}]
    with streamlit_app(app_env(tmp_path_factory, "compare-llamacpp-db", targets), "streamlit-compare-llamacpp.log") \
            as url:
        yield url


# ----- the page ----------------------------------------------------------------------------------------------------

@contextmanager
def compare_page(browser, url: str, name: str) -> Iterator[Any]:
    """A new session on the Compare page once the picker's model is loaded; a screenshot in test-artifacts/ if the
    test fails on it."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        page.goto(f"{url}/compare")
        # The sidebar's "Loaded models" lists the picker's model once it is loaded (the targets share it).
        page.get_by_test_id("stSidebar").get_by_text("shared with every page").first.wait_for(timeout=180_000)
        yield page
    except BaseException:
        ARTIFACTS.mkdir(exist_ok=True)
        try:
            page.screenshot(path=str(ARTIFACTS / f"compare-{name}-failure.png"))
        except PlaywrightError:
            pass
        raise
    finally:
        page.close()


def panes(page) -> Any:
    """The panes, in the order shown: the bordered columns that hold chat messages (the columns inside a pane, its
    header and Stop, hold none)."""
    return page.get_by_test_id("stColumn").filter(has=page.get_by_test_id("stChatMessage"))


def header(pane) -> str:
    """The pane's title: "A", "A · label" or the label."""
    return pane.inner_text(timeout=10_000).strip().splitlines()[0].strip()


def answer_text(pane, begun: bool = False) -> str:
    """The answer in the pane's assistant bubble, without the captions under it ("" while none has come).
    `begun`: it has, so an empty read is a redraw caught in the middle; read again (for up to 10 s)."""
    deadline = time.monotonic() + 10
    while True:
        try:
            bubble = pane.get_by_test_id("stChatMessage").nth(1)
            content = bubble.get_by_test_id("stChatMessageContent")
            text = content.inner_text(timeout=5_000)
            for caption in content.get_by_test_id("stCaptionContainer").all_inner_texts():
                text = text.replace(caption, "")
        except PlaywrightError:  # redrawn between two looks
            text = ""
        text = text.strip()
        text = "" if text == WAITING else text
        if text or not begun or time.monotonic() > deadline:
            return text
        time.sleep(0.2)


def send(page, text: str) -> None:
    box = page.get_by_test_id("stChatInputTextArea")
    box.fill(text)
    box.press("Enter")


def wait_for_turn(page, count: int = 2, timeout_s: float = 240) -> None:
    """Until every pane shows its turn's caption and the page has settled after the turn."""
    expect(panes(page)).to_have_count(count, timeout=60_000)
    for index in range(count):
        panes(page).nth(index).get_by_text("Turn:").wait_for(timeout=timeout_s * 1000)
    page.get_by_test_id("stStatusWidget").wait_for(state="hidden", timeout=60_000)
    for index in range(count):
        settle(page, panes(page).nth(index))


def turn_caption(pane) -> str:
    return pane.get_by_test_id("stCaptionContainer").filter(has_text="Turn:").first.inner_text()


def answer_metrics(pane) -> str:
    """The metrics caption under the pane's answer."""
    caption = pane.get_by_test_id("stChatMessage").nth(1).get_by_test_id("stCaptionContainer").filter(
        has_text="tok/s").first
    caption.wait_for(timeout=30_000)
    return caption.inner_text()


def check_metrics(pane) -> None:
    metrics = answer_metrics(pane)
    assert re.search(r"\d+ tokens · TTFT \d+\.\d+ s · \d+\.\d tok/s", metrics), metrics


def target_section(page, position: int) -> Any:
    """The sidebar's expander of the `position`-th target ("1. label"), opened."""
    sidebar = page.get_by_test_id("stSidebar")
    summary = page.locator("summary").filter(has_text=re.compile(rf"(^|\W|_right|_down){position}\. \S"))
    section = sidebar.get_by_test_id("stExpander").filter(has=summary)
    expect(section).to_have_count(1)
    if not section.get_by_role("spinbutton", name="Max new tokens").is_visible():
        section.locator("summary").click()
        section.get_by_role("spinbutton", name="Max new tokens").wait_for(timeout=10_000)
    return section


def set_number(page, section, name: str, value: int) -> None:
    field = section.get_by_role("spinbutton", name=name)
    field.fill(str(value))
    field.press("Enter")
    expect(field).to_have_value(str(value))
    page.wait_for_timeout(800)  # the rerun that stores it
    page.get_by_test_id("stStatusWidget").wait_for(state="hidden", timeout=30_000)


def target_labels(page) -> list[str]:
    """The targets' labels, from their expanders' titles ("1. label") in the sidebar."""
    titles = page.get_by_test_id("stSidebar").locator("summary").all_inner_texts()
    found = [re.match(r"\d\. (.+)$", title.strip().splitlines()[-1].strip()) for title in titles]
    return [match.group(1) for match in found if match]


def vote(page, name: str) -> str:
    """Click a vote button; the notice that says what was stored."""
    page.get_by_role("button", name=name, exact=True).click()
    notice = page.get_by_test_id("stAlertContainer").filter(has_text="Vote stored")
    notice.wait_for(timeout=30_000)
    # The run after the click: the vote's buttons go, and the previous run's Leaderboard (drawn one place lower,
    # under them) with them; it stays on view, not yet marked stale, until the run ends.
    expect(page.get_by_test_id("stExpander").filter(has_text="Leaderboard")).to_have_count(1, timeout=30_000)
    settle(page, page.get_by_test_id("stMainBlockContainer"))
    return notice.inner_text()


def scroll_to_top(page) -> None:
    """The page's top in view (its main part scrolls, not the window)."""
    page.evaluate("for (const element of document.querySelectorAll('*')) if (element.scrollTop) element.scrollTop = 0")
    page.wait_for_timeout(300)


# ----- the tests ---------------------------------------------------------------------------------------------------

def test_two_targets_stream_at_once_and_stop_in_one_leaves_the_other(compare_app, browser):
    with compare_page(browser, compare_app, "stop") as page:
        labels = target_labels(page)
        # The picker's model, at its defaults and hot, named in the labels (the leaderboard counts by label)
        assert labels == [f"SmolLM2-135M-Instruct (hf) · its defaults (temperature {0.2:g})",
                          "SmolLM2-135M-Instruct (hf) · temperature 1"], labels
        for position, seed in ((1, 11), (2, 12)):  # long enough to stop one in the middle; seeded to repeat
            section = target_section(page, position)
            set_number(page, section, "Max new tokens", 300)
            set_number(page, section, "Seed", seed)
            section.locator("summary").click()  # closed again: the sidebar as a user leaves it
        assert page.get_by_test_id("stChatInputTextArea").is_enabled()
        send(page, STORY)
        expect(panes(page)).to_have_count(2, timeout=60_000)
        first, second = panes(page).nth(0), panes(page).nth(1)
        assert sorted([header(first), header(second)]) == ["A", "B"]  # blind: letters only
        expect(first.get_by_role("button", name="Stop")).to_be_visible()
        expect(second.get_by_role("button", name="Stop")).to_be_visible()

        # Both write at once: both well begun, and both longer a moment later.
        deadline = time.monotonic() + 120
        while True:
            assert time.monotonic() < deadline, (answer_text(first), answer_text(second))
            before = answer_text(first), answer_text(second)
            if min(len(before[0]), len(before[1])) < 80:
                time.sleep(0.3)
                continue
            time.sleep(1.2)
            after = answer_text(first), answer_text(second)
            if len(after[0]) > len(before[0]) and len(after[1]) > len(before[1]):
                break

        first.get_by_role("button", name="Stop").click()
        # The stopped answer is marked at once, with its figures, while the other pane goes on.
        expect(first.get_by_test_id("stCaptionContainer").filter(has_text="Stopped")).to_contain_text(
            "tok/s", timeout=15_000)
        # The stopped pane's Stop is off once the page is drawn again for the click (until then both panes show
        # what they had: seconds, on a loaded machine); the other's is still on.
        expect(first.get_by_role("button", name="Stop")).to_be_disabled(timeout=60_000)
        expect(second.get_by_role("button", name="Stop")).to_be_enabled()
        time.sleep(1)  # the stopped thread's last redraw
        stopped_text, going_text = answer_text(first, begun=True), answer_text(second, begun=True)
        deadline = time.monotonic() + 60
        while len(later := answer_text(second, begun=True)) <= len(going_text):
            assert time.monotonic() < deadline, "the other pane stopped writing too"
            time.sleep(0.3)
        assert later.startswith(going_text[:40]), (going_text, later)
        assert answer_text(first, begun=True) == stopped_text, "the stopped pane kept writing"

        wait_for_turn(page)
        assert "Stopped" in turn_caption(first), turn_caption(first)
        assert "Stopped" not in turn_caption(second), turn_caption(second)
        assert answer_text(first, begun=True) == stopped_text
        assert len(answer_text(second, begun=True)) > len(stopped_text)
        check_metrics(first)
        check_metrics(second)

        notice = vote(page, "A is better")
        assert notice.strip().splitlines()[-1].startswith("Vote stored: A better."), notice
        revealed = dict(re.findall(r"([AB]) was (.+?)(?:,|\.$)", notice.strip().splitlines()[-1]))
        assert sorted(revealed.values()) == sorted(labels), notice
        expect(page.get_by_role("button", name="A is better")).to_have_count(0)  # one vote per turn
        headers = [header(first), header(second)]
        assert sorted(headers) == [f"A · {revealed['A']}", f"B · {revealed['B']}"], headers
        expect(first.get_by_role("button", name="Continue in Chat")).to_be_visible()
        expect(second.get_by_role("button", name="Continue in Chat")).to_be_visible()

        scroll_to_top(page)
        readme_screenshot(page, "compare.png")

        board = page.get_by_test_id("stExpander").filter(has_text="Leaderboard")
        board.get_by_text("Leaderboard", exact=True).click()
        board.get_by_test_id("stDataFrame").wait_for(timeout=30_000)
        cells = board.locator('[role="gridcell"]')
        for label in labels:
            expect(cells.filter(has_text=re.compile(rf"^{re.escape(label)}$"))).to_have_count(1, timeout=15_000)
        with page.expect_download() as download:
            board.get_by_role("button", name="Leaderboard CSV").click()
        rows = list(csv.DictReader(io.StringIO(Path(download.value.path()).read_text(encoding="utf-8"))))
        games = {row["label"]: (row["games"], row["wins"], row["losses"]) for row in rows}
        assert games == {revealed["A"]: ("1", "1", "0"), revealed["B"]: ("1", "0", "1")}, rows


def test_closing_a_tab_mid_answer_stops_its_targets_at_once(compare_app, browser):
    """A tab closed while two targets write: the model is idle again within seconds, as when a Chat tab closes (it
    went on writing both answers to their end, minutes on a CPU, for no one). A second tab watches the model's
    status, which counts the answers it writes for every tab."""
    with compare_page(browser, compare_app, "close-watcher") as watcher:
        status = watcher.get_by_test_id("stCaptionContainer").filter(has_text="The model is").first
        expect(status).to_contain_text("idle", timeout=30_000)
        with compare_page(browser, compare_app, "close") as page:
            for position in (1, 2):
                section = target_section(page, position)
                set_number(page, section, "Max new tokens", 2000)
                set_number(page, section, "Seed", 20 + position)
            send(page, STORY)
            expect(status).to_contain_text("writing 2 answers", timeout=120_000)
            time.sleep(2)  # well under way
        closed = time.monotonic()  # compare_page closed the tab
        expect(status).to_contain_text("idle", timeout=60_000)
        after_close = time.monotonic() - closed
        print(f"generation went on {after_close:.1f} s after the tab closed")
        # Without the fix both 2,000-token answers run to their end (minutes); the status redraws every 3 s and a
        # loaded machine notices the closed tab late, so the limit leaves room for both.
        assert after_close < 30, after_close


def test_a_target_on_the_api_backend_against_make_serve(compare_app_with_api, browser):
    with compare_page(browser, compare_app_with_api, "api") as page:
        assert target_labels(page) == ["Transformers in the app", "Via the API"]
        send(page, QUESTION)
        wait_for_turn(page)
        first, second = panes(page).nth(0), panes(page).nth(1)
        for pane in (first, second):
            check_metrics(pane)
            assert "Stopped" not in turn_caption(pane)
        answers = [answer_text(first, begun=True), answer_text(second, begun=True)]
        assert all(answers), answers
        # Greedy on the same model and settings: the app's engine and the server's write the same words.
        assert answers[0] == answers[1], answers

        notice = vote(page, "Tie")
        assert "Vote stored: a tie." in notice, notice
        api = panes(page).filter(has_text="· Via the API")
        expect(api).to_have_count(1)
        expect(api.get_by_text(re.compile(r"^openai · first model at http://127\.0\.0\.1:\d+/v1"))).to_be_visible()
        api_answer = answer_text(api, begun=True)
        api.get_by_role("button", name="Continue in Chat").click()

        page.wait_for_url(lambda url: "compare" not in url, timeout=30_000)
        bubbles = page.get_by_test_id("stChatMessage")
        expect(bubbles).to_have_count(2, timeout=60_000)
        expect(bubbles.nth(0)).to_contain_text(QUESTION)
        expect(bubbles.nth(1)).to_contain_text(api_answer)
        # The model picker took the target's model: the OpenAI-compatible API at our server...
        expect(page.get_by_test_id("stCaptionContainer").filter(
            has_text=re.compile(r"^OpenAI-compatible API · .* · http://127\.0\.0\.1:\d+/v1$"))).to_be_visible(
            timeout=60_000)
        # ...and the history in the sidebar lists the conversation, titled by its first message.
        sidebar = page.get_by_test_id("stSidebar")
        expect(sidebar.get_by_role("button", name=QUESTION)).to_be_visible(timeout=30_000)


@pytest.mark.llamacpp
def test_a_llama_cpp_target(compare_app_with_llamacpp, browser):
    with compare_page(browser, compare_app_with_llamacpp, "llamacpp") as page:
        assert target_labels(page) == ["Transformers", "llama.cpp"]
        send(page, QUESTION)
        wait_for_turn(page)
        for index in range(2):
            pane = panes(page).nth(index)
            check_metrics(pane)
            assert answer_text(pane, begun=True), pane.inner_text()
        # llama.cpp is the model picker's engine (the default here); the pool holds the transformers one beside it,
        # and the sidebar lists it with its size.
        sidebar = page.get_by_test_id("stSidebar")
        expect(sidebar.get_by_text("shared with every page")).to_have_count(1)
        loaded = sidebar.get_by_test_id("stCaptionContainer").filter(has_text="· hf ·")
        expect(loaded).to_have_count(1, timeout=30_000)
        assert re.search(r"· hf · ≈ \d+(\.\d)? [kMG]B RAM", loaded.inner_text()), loaded.inner_text()
