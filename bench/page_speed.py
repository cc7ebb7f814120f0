"""How fast the Chat page draws a long conversation, in Chromium, as a user sees it (issue 40).

The app as `make run` serves it (`streamlit run app/frontends/streamlit/web.py`) on the embedded model, with a
throwaway SQLite database. For each conversation size (1, 50 and 300 turns by default) a fresh page imports a
conversation export (format version 2: plain text with a little markdown, no pictures or tools), sends one short
message, and reloads. Each figure is taken in the browser, by its own clock, in the first animation frame that
shows what is waited for (a bubble of the previous run that Streamlit keeps on view, marked stale, does not count):

- import and render: the file given to the history's "Import a conversation" uploader (its `change` event) until
  the last imported message is on the page;
- send drawn: Enter pressed in the chat input until the new message's own bubble shows its text;
- page tok/s: the answer's tokens (its metrics line's count) over the time from its first text on the page to its
  metrics line ("tok/s") on the page; model tok/s: the speed that metrics line states (the engine's own);
- reload: from the navigation's start until the first chat message is on the page, and until the last one (the
  new answer, with its metrics line) is.

Answers are greedy (temperature 0) and short (`--max-tokens`). Each figure is the median of `--repeats` runs,
printed with the issue's targets and PASS/FAIL.

    .venv/bin/python -m bench.page_speed [--turns 1,50,300] [--repeats 1] [--max-tokens 48] [--quick] [--strict]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu"]
QUESTION = "Write two sentences about a lighthouse keeper. (message {run})"
MESSAGE = '[data-testid="stChatMessage"]'

# ----- the conversation: deterministic, plain text with a little markdown ----------------------------------------

TOPICS = ["tides", "bread", "violins", "glaciers", "bicycles", "honey bees", "lighthouses", "maps", "tea", "comets",
          "bridges", "origami", "owls", "sourdough", "trains", "coral reefs", "clocks", "kites", "volcanoes", "ink"]
ADJECTIVES = ["patient", "curious", "old", "quiet", "surprising", "careful", "bright", "simple"]


def user_text(turn: int) -> str:
    topic = TOPICS[turn % len(TOPICS)]
    text = f"Tell me something about {topic}, please. Keep it short; this is question {turn}."
    if turn % 4 == 0:
        text += f" Also, is **{topic}** a good subject for a school talk?"
    return text


def answer_text(turn: int, turns: int) -> str:
    topic = TOPICS[turn % len(TOPICS)]
    adjective = ADJECTIVES[turn % len(ADJECTIVES)]
    parts = []
    if turn % 3 == 0:
        parts.append(f"### About {topic}")
    parts.append(f"{topic.capitalize()} are a **{adjective}** subject, and people have written about them for "
                 f"centuries. A short note in a file might be called `{topic.replace(' ', '_')}_{turn}.txt`.")
    parts.append(f"- one thing to know about {topic}\n- another thing, less known\n- a third, for turn {turn}")
    if turn % 2:
        parts.append("Most of this fits on a postcard, which is a good test of any explanation.")
    parts.append(f"That was turn {turn} of {turns}.")
    return "\n\n".join(parts)


def conversation_file(turns: int) -> dict[str, Any]:
    """An export (app/storage/transfer.py, format version 2) of `turns` question-and-answer pairs."""
    messages: list[dict[str, Any]] = []
    for turn in range(1, turns + 1):
        messages.append({"role": "user", "content": user_text(turn)})
        messages.append({"role": "assistant", "content": answer_text(turn, turns)})
    return {"format": "composite-demo-conversation", "version": 2, "title": f"Page speed, {turns} turns",
            "page": "chat", "settings": {}, "created_at": "2025-01-06T09:00:00+00:00",
            "updated_at": "2025-01-06T09:00:00+00:00", "messages": messages}


# ----- in the page: a watcher that notes, by the page's clock, the first frame that shows each awaited thing -------

# Installed in every document of the page (add_init_script), so that a reload is watched from its first frame.
# sessionStorage (kept across a reload of the tab) holds what the next document is to wait for.
WATCHER = r"""
(() => {
  const marks = window.__benchMarks = {};
  let watches = [];
  const drawn = (el) => {
    if (!el || el.closest('[data-stale="true"]')) return false;
    const box = el.getBoundingClientRect();
    return box.width > 0 && box.height > 0;
  };
  // A message's text and captions (its metrics line), not the labels of its action buttons.
  const body = (el) => Array.from(el.querySelectorAll(
    '[data-testid="stMarkdownContainer"], [data-testid="stCaptionContainer"]'))
    .filter((m) => !m.closest('button')).map((m) => m.textContent).join('\n').trim();
  const checks = {
    // any chat message with text
    any: () => Array.from(document.querySelectorAll('[data-testid="stChatMessage"]'))
      .some((m) => drawn(m) && body(m).length > 0),
    // the last chat message holds `text`
    last: (w) => {
      const all = document.querySelectorAll('[data-testid="stChatMessage"]');
      const m = all[all.length - 1];
      return drawn(m) && body(m).includes(w.text);
    },
    // a chat message holds `text` (the question just sent)
    sent: (w) => Array.from(document.querySelectorAll('[data-testid="stChatMessage"]'))
      .some((m) => drawn(m) && body(m).includes(w.text)),
    // the message after the one holding `text` (its answer) shows streamed text, or `done` (its metrics line)
    answer: (w) => {
      const all = Array.from(document.querySelectorAll('[data-testid="stChatMessage"]'));
      const at = all.findIndex((m) => body(m).includes(w.text));
      const m = at >= 0 ? all[at + 1] : undefined;
      if (!drawn(m)) return false;
      const text = body(m);
      if (w.done) return text.includes(w.done);
      return text.length > 0 && !text.includes('waiting for the model');
    },
  };
  const tick = () => {
    const now = performance.now();
    watches = watches.filter((w) => {
      if (!checks[w.kind](w)) return true;
      marks[w.name] = now;
      return false;
    });
    if (watches.length) requestAnimationFrame(tick);
  };
  window.__benchWatch = (list) => {
    const idle = watches.length === 0;
    watches.push(...list);
    if (idle) requestAnimationFrame(tick);
  };
  // The moments a measurement starts: a file given to an uploader, Enter in the chat input.
  document.addEventListener('change', (e) => {
    if (e.target instanceof HTMLInputElement && e.target.type === 'file') marks.fileGiven = performance.now();
  }, true);
  document.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && e.target.closest && e.target.closest('[data-testid="stChatInput"]'))
      marks.enter = performance.now();
  }, true);
  const next = sessionStorage.getItem('benchOnLoad');
  if (next) {
    sessionStorage.removeItem('benchOnLoad');
    window.__benchWatch(JSON.parse(next));
  }
})();
"""


def mark(page: Any, name: str, timeout_s: float) -> float:
    """The page-clock time (ms) of mark `name`, once it is set."""
    # Polled from here: the app's Content-Security-Policy forbids the eval that page.wait_for_function needs.
    deadline = time.monotonic() + timeout_s
    while True:
        value = page.evaluate("(name) => (window.__benchMarks || {})[name] ?? null", name)
        if value is not None:
            return float(value)
        if time.monotonic() > deadline:
            raise TimeoutError(f"the page did not show {name!r} within {timeout_s:g} s")
        page.wait_for_timeout(50)


def watch(page: Any, *watches: dict[str, Any]) -> None:
    page.evaluate("(list) => window.__benchWatch(list)", list(watches))


# ----- driving the page --------------------------------------------------------------------------------------------

def model_loaded(page: Any, timeout_s: float = 300) -> None:
    """The caption under the title names the model once it is loaded (tests/helpers.py, model_loaded)."""
    page.get_by_test_id("stCaptionContainer").filter(has_text="SmolLM2", visible=True).first.wait_for(
        timeout=timeout_s * 1000)


def quiet(page: Any, timeout_s: float = 120) -> None:
    """Until the script has stopped running (Streamlit's running indicator gone) and stayed so for 0.5 s."""
    page.wait_for_timeout(300)
    page.get_by_test_id("stStatusWidget").wait_for(state="hidden", timeout=timeout_s * 1000)
    page.wait_for_timeout(500)
    page.get_by_test_id("stStatusWidget").wait_for(state="hidden", timeout=timeout_s * 1000)


def greedy_and_short(page: Any, max_tokens: int) -> None:
    """Temperature 0 and at most `max_tokens` new tokens, in the sidebar's Generation settings."""
    section = page.get_by_test_id("stSidebar").get_by_test_id("stExpander").filter(
        has_text="Generation settings").first
    tokens = section.get_by_role("spinbutton", name="Max new tokens")
    if not tokens.is_visible():
        section.get_by_text("Generation settings").first.click()
        tokens.wait_for(timeout=10_000)
    section.get_by_role("slider").first.focus()
    page.keyboard.press("Home")  # temperature 0: greedy
    quiet(page)
    tokens.fill(str(max_tokens))
    tokens.press("Enter")
    quiet(page)


def open_chat(browser: Any, url: str, max_tokens: int) -> Any:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.add_init_script(WATCHER)
    page.goto(url)
    model_loaded(page)
    greedy_and_short(page, max_tokens)
    return page


def figure(pattern: str, metrics: str) -> str:
    found = re.search(pattern, metrics)
    if found is None:
        raise ValueError(f"no {pattern!r} in the metrics line {metrics!r}")
    return found.group(1)


@dataclass
class Figures:
    import_s: float
    send_s: float
    page_tps: float
    model_tps: float
    reload_first_s: float
    reload_full_s: float


def measure(browser: Any, url: str, turns: int, run: int, max_tokens: int, folder: Path) -> Figures:
    path = folder / f"conversation-{turns}.json"
    path.write_text(json.dumps(conversation_file(turns), indent=1))
    last_imported = f"That was turn {turns} of {turns}."
    page = open_chat(browser, url, max_tokens)
    try:
        # Import and render.
        sidebar = page.get_by_test_id("stSidebar")
        sidebar.get_by_text("Import a conversation", exact=True).click()
        uploader = sidebar.locator('input[type="file"]')
        uploader.wait_for(state="attached", timeout=10_000)
        watch(page, {"name": "imported", "kind": "last", "text": last_imported})
        uploader.set_input_files(str(path))
        import_s = (mark(page, "imported", 300) - mark(page, "fileGiven", 10)) / 1000
        quiet(page)

        # Send: the new message's bubble, then its answer streaming, then the answer's metrics line.
        question = QUESTION.format(run=run)
        watch(page, {"name": "sent", "kind": "sent", "text": question},
              {"name": "firstText", "kind": "answer", "text": question},
              {"name": "answered", "kind": "answer", "text": question, "done": "tok/s"})
        box = page.get_by_test_id("stChatInputTextArea")
        box.fill(question)
        box.press("Enter")
        enter = mark(page, "enter", 10)
        send_s = (mark(page, "sent", 300) - enter) / 1000
        first_text = mark(page, "firstText", 600)
        answered = mark(page, "answered", 600)
        answer = page.locator(MESSAGE).last
        metrics = answer.get_by_text("tok/s").first.inner_text()
        tokens = int(figure(r"(\d+) tokens", metrics))
        model_tps = float(figure(r"([\d.]+) tok/s", metrics))
        page_tps = (tokens - 1) / ((answered - first_text) / 1000) if answered > first_text else math.nan
        quiet(page)

        # Reload: the first message on the page, and the last (the new answer with its metrics line).
        page.evaluate("(next) => sessionStorage.setItem('benchOnLoad', JSON.stringify(next))",
                      [{"name": "firstShown", "kind": "any"}, {"name": "allShown", "kind": "last", "text": "tok/s"}])
        page.reload()
        reload_first_s = mark(page, "firstShown", 300) / 1000  # the page's clock starts with the navigation
        reload_full_s = mark(page, "allShown", 300) / 1000
        return Figures(import_s, send_s, page_tps, model_tps, reload_first_s, reload_full_s)
    finally:
        page.close()


def warm_up(browser: Any, url: str, max_tokens: int) -> None:
    """One answer before any figure: the model's first generation, and the page's first run, cost extra."""
    page = open_chat(browser, url, max_tokens)
    try:
        box = page.get_by_test_id("stChatInputTextArea")
        box.fill("Hello!")
        box.press("Enter")
        page.locator(MESSAGE).nth(1).get_by_text("tok/s").first.wait_for(timeout=600_000)
        quiet(page)
    finally:
        page.close()


# ----- the report --------------------------------------------------------------------------------------------------

COLUMNS = [("turns", 6), ("import+render s", 16), ("send drawn s", 13), ("page tok/s", 11), ("model tok/s", 12),
           ("page/model", 11), ("reload first s", 15), ("reload full s", 14)]


def table(results: dict[int, Figures]) -> str:
    lines = ["".join(f"{name:>{width}}" for name, width in COLUMNS)]
    for turns, f in results.items():
        ratio = f.page_tps / f.model_tps if f.model_tps else math.nan
        cells = [f"{turns}", f"{f.import_s:.2f}", f"{f.send_s:.2f}", f"{f.page_tps:.1f}", f"{f.model_tps:.1f}",
                 f"{ratio:.2f}", f"{f.reload_first_s:.2f}", f"{f.reload_full_s:.2f}"]
        lines.append("".join(f"{cell:>{width}}" for cell, (_, width) in zip(cells, COLUMNS, strict=True)))
    return "\n".join(lines)


def verdicts(results: dict[int, Figures]) -> list[tuple[str, str, str]]:
    """(target, measured, PASS / FAIL / n/a) for each of the issue's targets."""
    rows = []

    def at_most(label: str, turns: int, figure: str, limit: float) -> None:
        if turns not in results:
            rows.append((label, f"{turns} turns not measured", "n/a"))
            return
        value = getattr(results[turns], figure)
        rows.append((label, f"{value:.2f} s", "PASS" if value <= limit else "FAIL"))

    at_most("send drawn <= 0.3 s at 50 turns", 50, "send_s", 0.3)
    at_most("send drawn <= 0.5 s at 300 turns", 300, "send_s", 0.5)
    at_most("reload drawn <= 2 s at 300 turns", 300, "reload_full_s", 2.0)
    at_most("import shown <= 3 s at 300 turns", 300, "import_s", 3.0)
    # The model itself decodes more slowly after a long prompt (attention over thousands of tokens), so what the page
    # adds is its streaming speed over the model's own: that share must not fall as the conversation grows.
    label = "page/model tok/s at 300 turns >= 0.9x at 1 turn"
    if 1 in results and 300 in results:
        ratio = (results[300].page_tps / results[300].model_tps) / (results[1].page_tps / results[1].model_tps)
        rows.append((label, f"{ratio:.2f}x", "PASS" if ratio >= 0.9 else "FAIL"))
    else:
        rows.append((label, "1 and 300 turns not both measured", "n/a"))
    return rows


def median_figures(runs: list[Figures]) -> Figures:
    return Figures(*(statistics.median(getattr(r, name) for r in runs) for name in Figures.__dataclass_fields__))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", default="1,50,300", help="conversation sizes in turns, comma-separated")
    parser.add_argument("--repeats", type=int, default=1, help="runs per size; the median is shown")
    parser.add_argument("--max-tokens", type=int, default=48, help="the answers' max new tokens")
    parser.add_argument("--quick", action="store_true", help="1 and 5 turns, once: a check that it all works")
    parser.add_argument("--strict", action="store_true", help="exit 1 if a target is missed")
    args = parser.parse_args(argv)
    sizes = [1, 5] if args.quick else [int(n) for n in args.turns.split(",") if n.strip()]
    if not Path(CHROMIUM).exists():
        print(f"{CHROMIUM} is missing: apt-get install chromium", file=sys.stderr)
        return 2

    from playwright.sync_api import sync_playwright

    from app.clients.embedded_model import ensure_embedded_model
    from harness.local_http import free_port
    from harness.processes import server_process

    model = ensure_embedded_model()
    folder = Path(tempfile.mkdtemp(prefix="page-speed-"))
    env = {**os.environ, "DEMO_MODEL": str(model), "HF_HUB_OFFLINE": "1",
           "DEMO_DATABASE_URL": f"sqlite:///{folder / 'conversations.db'}"}
    env.pop("DEMO_IMAGE_API_URL", None)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "streamlit", "run", "app/frontends/streamlit/web.py", "--server.address",
               "127.0.0.1", "--server.port", str(port), "--server.headless", "true"]
    results: dict[int, Figures] = {}
    with server_process(command, f"{url}/_stcore/health", cwd=ROOT, env=env, log=folder / "streamlit.log",
                        start_timeout_s=120), sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            warm_up(browser, url, args.max_tokens)
            run = 0
            for turns in sizes:
                runs = []
                for _ in range(max(1, args.repeats)):
                    run += 1
                    runs.append(measure(browser, url, turns, run, args.max_tokens, folder))
                results[turns] = median_figures(runs)
                print(table({turns: results[turns]}).splitlines()[1], flush=True)  # as it goes: a row a size
        finally:
            browser.close()

    print()
    print(f"Chat page in Chromium, median of {max(1, args.repeats)} run(s), answers of at most {args.max_tokens} "
          "tokens, greedy")
    print(table(results))
    print()
    rows = verdicts(results)
    width = max(len(label) for label, _, _ in rows)
    for label, value, verdict in rows:
        print(f"{label:<{width}}  {value:>34}  {verdict}")
    missed = any(verdict == "FAIL" for _, _, verdict in rows)
    return 1 if args.strict and missed and not args.quick else 0


if __name__ == "__main__":
    sys.exit(main())
