"""Does knowledge retrieval find the page that answers a question in a long document, does the model then answer,
and how fast is it? Side by side with what the app did before: reading the first 12,000 characters.

The document: the King James Bible, public domain (Debian's `bible-kjv` prints it: `apt-get install bible-kjv`),
set here as a PDF of about 900 pages, every verse's page recorded. The questions are written below in today's words,
not the book's, each with the verses that answer it and a pattern the answer must match. Measured, on SQLite and
(with --postgres) on PostgreSQL:

- recall@5: the share of questions for which one of the 5 passages found is on a page that answers it (full-text
  search: FTS5's BM25 on SQLite, ts_rank on PostgreSQL), against the share answered in the first 12,000
  characters;
- answer accuracy: the model (the embedded SmolLM2, or --model) answers each question from the passages found, as
  the Chat page asks it, or from the first 12,000 characters, with its sampling defaults and a fixed seed; right
  when its answer matches the pattern;
- ingestion: seconds per 100 pages (read, cut into passages, stored);
- query latency with the document in three collections (over 10,000 passages), searched together;
- with --embedding-model (a sentence-embedding model's folder): recall@5 and @1 of the search by words and meaning
  fused, the time to embed the passages, and that search's latency.

    .venv/bin/python -m bench.retrieval [--postgres] [--no-answers] [--model PATH] [--embedding-model PATH] [--runs 5]
"""

from __future__ import annotations

import argparse
import io
import math
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from app.agent.loop import TurnDone, run_turn
from app.clients.client_protocol import Client, GenerationParams
from app.config import DocumentSettings, KnowledgeSettings
from app.domain.conversation import Attachment, Conversation, Message
from app.knowledge.embeddings import Embedder, LocalEmbedder
from app.knowledge.ingest import add_file
from app.knowledge.passages import add_passages
from app.knowledge.retrieval import Retrieval
from app.storage import open_database
from app.storage.knowledge import KnowledgeStore
from app.tools.documents import read_document

OWNER = "bench"
LINES_PER_PAGE, LINE_CHARS = 64, 110
CHAPTER = re.compile(r"^(?P<book>[1-3]? ?[A-Z][A-Za-z ]+) (?P<chapter>\d+)$")
VERSE = re.compile(r"^\s+(?P<verse>\d+) (?P<text>.+)$")


@dataclass(frozen=True)
class Question:
    text: str
    verses: tuple[str, ...]  # "Book chapter:verse": any of them answers it
    answer: str  # a regular expression a right answer matches (case-insensitive)


QUESTIONS = [
    Question("How many days and nights was Jonah inside the fish?", ("Jonah 1:17", "Matthew 12:40"), r"\bthree\b"),
    Question("What did Esau sell to his brother Jacob for some food?", ("Genesis 25:33", "Hebrews 12:16"),
             r"birthright"),
    Question("Who killed the giant Goliath with a sling and a stone?", ("1 Samuel 17:50",), r"\bDavid\b"),
    Question("How old was Methuselah when he died?", ("Genesis 5:27",), r"nine hundred|969"),
    Question("What did Lot's wife turn into when she looked back?", ("Genesis 19:26",), r"\bsalt\b"),
    Question("How many years did the Israelites wander in the wilderness?",
             ("Numbers 14:33", "Numbers 32:13", "Deuteronomy 2:7", "Deuteronomy 8:2", "Joshua 5:6"), r"forty|40"),
    Question("Which city's walls fell down when the priests blew their trumpets?", ("Joshua 6:20",), r"Jericho"),
    Question("Who betrayed Samson to the Philistines by cutting his hair?", ("Judges 16:18", "Judges 16:19"),
             r"Delilah"),
    Question("Into what den was Daniel thrown?", ("Daniel 6:16",), r"\blions?\b"),
    Question("Which chief tax collector climbed a sycamore tree to see Jesus?", ("Luke 19:2", "Luke 19:4"),
             r"Zacch?aeus"),
    Question("How many loaves of bread fed the five thousand?",
             ("Matthew 14:17", "Mark 6:38", "Luke 9:13", "John 6:9"), r"\bfive\b|\b5\b"),
    Question("How much money was Judas paid to betray Jesus?", ("Matthew 26:15", "Matthew 27:3"), r"thirty|30"),
    Question("Which disciple denied knowing Jesus three times before the cock crowed?",
             ("Matthew 26:75", "Mark 14:72", "Luke 22:61", "John 18:27"), r"\bPeter\b"),
    Question("What did the water of the river in Egypt turn into in the first plague?", ("Exodus 7:20",),
             r"\bblood\b"),
    Question("On which mountain did Moses receive the tables of the commandments?",
             ("Exodus 19:20", "Exodus 31:18", "Exodus 34:29"), r"Sinai"),
    Question("What did God create on the first day?", ("Genesis 1:3",), r"\blight\b"),
    Question("Who killed his brother Abel?", ("Genesis 4:8",), r"\bCain\b"),
    Question("What sign did God set in the clouds as a promise after the flood?", ("Genesis 9:13",),
             r"\bbow\b|rainbow"),
    Question("Who explained Pharaoh's dream about fat and lean cattle?", ("Genesis 41:25", "Genesis 41:26"),
             r"Joseph"),
    Question("Which queen came to prove Solomon with hard questions?", ("1 Kings 10:1", "2 Chronicles 9:1"),
             r"Sheba"),
    Question("Who went up to heaven in a whirlwind with a chariot of fire?", ("2 Kings 2:11",), r"Elijah"),
    Question("In which town was Jesus born?", ("Matthew 2:1", "Luke 2:4"), r"Bethlehem"),
    Question("Who baptized Jesus in the river Jordan?", ("Matthew 3:13", "Mark 1:9"), r"\bJohn\b"),
    Question("At the wedding in Cana, what did Jesus turn the water into?", ("John 2:9",), r"\bwine\b"),
    Question("Who had been dead in the grave for four days when Jesus raised him?", ("John 11:17", "John 11:39"),
             r"Lazarus"),
    Question("In which garden did Jesus pray on the night he was arrested?", ("Matthew 26:36", "Mark 14:32"),
             r"Gethsemane"),
    Question("Whom did Boaz take as his wife?", ("Ruth 4:13",), r"\bRuth\b"),
    Question("Who was the mother of Samuel, who prayed for a son at Shiloh?", ("1 Samuel 1:20",), r"Hannah"),
    Question("What was Paul's name before it was changed?", ("Acts 13:9",), r"\bSaul\b"),
    Question("Which prophet's donkey spoke to him on the road?", ("Numbers 22:28",), r"Balaam"),
]


@dataclass
class Book:
    """The document as a PDF, with the pages each verse is on and the page each character of its text starts on."""

    pdf: bytes
    pages: int
    verse_pages: dict[str, set[int]] = field(default_factory=dict)
    chars_before_page: list[int] = field(default_factory=list)  # [n]: characters on the pages before page n + 1


def kjv_lines() -> list[str]:
    if shutil.which("bible") is None:
        sys.exit("This benchmark reads the King James Bible from Debian's bible-kjv package: "
                 "apt-get install bible-kjv")
    printed = subprocess.run(["bible", "-l10000", "Gen1:1-Rev22:21"], capture_output=True, text=True, check=True)
    return printed.stdout.splitlines()


def typeset(lines: list[str]) -> Book:
    """Each chapter under its heading, each verse wrapped at LINE_CHARS, LINES_PER_PAGE lines a page."""
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    buffer = io.BytesIO()
    pdf = canvas.Canvas(buffer, pagesize=A4, pageCompression=1)
    book = Book(b"", 0)
    page, row, chapter, chars = 1, 0, "", 0
    book.chars_before_page.append(0)

    def line(text: str, font: str = "Helvetica") -> None:
        nonlocal page, row, chars
        if row == LINES_PER_PAGE:
            pdf.showPage()
            page, row = page + 1, 0
            book.chars_before_page.append(chars)
        pdf.setFont(font, 7)
        pdf.drawString(36, 800 - row * 12, text)
        row += 1
        chars += len(text) + 1

    for raw in lines:
        if heading := CHAPTER.match(raw):
            chapter = f"{heading['book']} {heading['chapter']}"
            line(chapter, "Helvetica-Bold")
        elif verse := VERSE.match(raw):
            reference = f"{chapter}:{verse['verse']}"
            for wrapped in textwrap.wrap(f"{verse['verse']} {verse['text']}", LINE_CHARS):
                line(wrapped)
                book.verse_pages.setdefault(reference, set()).add(page)
    pdf.showPage()
    pdf.save()
    book.pdf, book.pages = buffer.getvalue(), page
    return book


def answering_pages(book: Book, question: Question) -> set[int]:
    missing = [verse for verse in question.verses if verse not in book.verse_pages]
    assert not missing, f"no such verse: {missing}"
    return set().union(*(book.verse_pages[verse] for verse in question.verses))


def page_of(location: str) -> int:
    found = re.fullmatch(r"page (\d+)", location)
    return int(found[1]) if found else 0


def pages_in_first(book: Book, characters: int) -> set[int]:
    return {number for number, before in enumerate(book.chars_before_page, 1) if before < characters}


@dataclass
class Run:
    """One database's figures."""

    name: str
    ingest_s: float = 0.0
    passages: int = 0
    found_at_5: int = 0
    found_at_1: int = 0
    latency_one_ms: list[float] = field(default_factory=list)
    latency_all_ms: list[float] = field(default_factory=list)
    all_passages: int = 0
    right: int = 0
    not_found: list[str] = field(default_factory=list)
    misses: list[str] = field(default_factory=list)
    # With --embedding-model: the same search by words and by meaning, fused (app/knowledge/retrieval.py)
    hybrid_at_5: int = 0
    hybrid_at_1: int = 0
    embed_s: float = 0.0  # giving the one copy's passages their vectors
    latency_hybrid_ms: list[float] = field(default_factory=list)


@contextmanager
def database(postgres: bool) -> Iterator[str]:
    if postgres:
        from tests.database import postgres_server

        with postgres_server() as url:
            yield url
    else:
        with tempfile.TemporaryDirectory() as folder:
            yield f"sqlite:///{Path(folder) / 'knowledge.db'}"


def measure(name: str, url: str, book: Book, runs: int, client: Client | None, params: GenerationParams,
            embedder: Embedder | None = None) -> Run:
    run = Run(name)
    engine = open_database(url)
    store = KnowledgeStore(engine)
    settings = KnowledgeSettings.from_env()
    try:
        collections = [store.create_collection(OWNER, f"Bible {copy}") for copy in (1, 2, 3)]
        started = time.perf_counter()
        document = add_file(store, OWNER, collections[0].id, "kjv.pdf", book.pdf, settings)
        run.ingest_s = time.perf_counter() - started
        run.passages = document.passages
        for collection in collections[1:]:
            add_file(store, OWNER, collection.id, "kjv.pdf", book.pdf, settings)
        run.all_passages = sum(c.passages for c in store.collections(OWNER))
        one, every = [collections[0].id], [collection.id for collection in collections]
        for question in QUESTIONS:
            hits = store.search(OWNER, one, question.text, 5)
            pages = answering_pages(book, question)
            found = any(page_of(hit.location) in pages for hit in hits)
            run.found_at_5 += found
            if not found:
                run.not_found.append(f"{question.text} (pages {sorted(pages)}) → found on "
                                     f"{[hit.location for hit in hits]}")
            run.found_at_1 += bool(hits) and page_of(hits[0].location) in pages
        for _ in range(runs):
            for question in QUESTIONS:
                run.latency_one_ms.append(timed_ms(lambda q=question.text: store.search(OWNER, one, q, 5)))
                run.latency_all_ms.append(timed_ms(lambda q=question.text: store.search(OWNER, every, q, 5)))
        if embedder is not None:
            retrieval = Retrieval(store, lambda: embedder)
            started = time.perf_counter()
            retrieval.embed_missing(OWNER, one)
            run.embed_s = time.perf_counter() - started
            for question in QUESTIONS:
                hits = retrieval.search(OWNER, one, question.text, 5)
                pages = answering_pages(book, question)
                run.hybrid_at_5 += any(page_of(hit.location) in pages for hit in hits)
                run.hybrid_at_1 += bool(hits) and page_of(hits[0].location) in pages
            for _ in range(runs):
                for question in QUESTIONS:
                    run.latency_hybrid_ms.append(timed_ms(lambda q=question.text: retrieval.search(OWNER, one, q, 5)))
        if client is not None:
            for question in QUESTIONS:
                conversation = Conversation()
                conversation.add(Message("user", question.text, attachments=[Attachment(
                    kind="document", name="kjv.pdf", collection=collections[0].id, document_id=document.id)]))
                add_passages(conversation, lambda ids, documents, query, limit: store.search(
                    OWNER, ids, query, limit, documents))
                reply = answer(client, conversation, params)
                right = re.search(question.answer, reply, re.IGNORECASE) is not None
                run.right += right
                if not right:
                    run.misses.append(f"{question.text} → {reply[:90]!r}")
    finally:
        engine.dispose()
    return run


def timed_ms(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return (time.perf_counter() - started) * 1000


def answer(client: Client, conversation: Conversation, params: GenerationParams) -> str:
    reply = ""
    for event in run_turn(client, conversation, params):
        if isinstance(event, TurnDone):
            reply = event.message.content
    return reply


def first_characters_baseline(book: Book, client: Client | None, params: GenerationParams) -> tuple[int, int, int]:
    """What the app did before: the document's first DEMO_DOCUMENT_MAX_CHARS characters in the prompt. Returns (the
    characters read, the questions whose answer is in them, the questions the model answered right)."""
    extracted = read_document("kjv.pdf", book.pdf, DocumentSettings.from_env())
    covered = pages_in_first(book, len(extracted.text))
    inside = sum(bool(answering_pages(book, question) & covered) for question in QUESTIONS)
    right = 0
    if client is not None:
        for question in QUESTIONS:
            conversation = Conversation()
            conversation.add(Message("user", question.text, attachments=[Attachment(
                kind="document", name="kjv.pdf", text=extracted.text, note=extracted.cut)]))
            right += re.search(question.answer, answer(client, conversation, params), re.IGNORECASE) is not None
    return len(extracted.text), inside, right


def load_client(model: str) -> Client:
    from app.clients.hf.hf_client import HFClient
    from app.config import ModelSettings

    return HFClient(ModelSettings(model_path=model, device="cpu"))


def percentile(values: list[float], share: float) -> float:
    return sorted(values)[max(0, math.ceil(share * len(values)) - 1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--postgres", action="store_true", help="also on a throwaway PostgreSQL server (Debian's)")
    parser.add_argument("--no-answers", action="store_true", help="retrieval only: no model answers")
    parser.add_argument("--model", default="", help="model folder for the answers (default: the embedded SmolLM2)")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--runs", type=int, default=5, help="timed searches per question")
    parser.add_argument("--embedding-model", default="",
                        help="a sentence-embedding model's folder: also measure search by words and meaning, fused")
    args = parser.parse_args()
    embedder = LocalEmbedder(args.embedding_model) if args.embedding_model else None

    started = time.perf_counter()
    book = typeset(kjv_lines())
    print(f"King James Bible: {book.pages:,} pages, {len(book.pdf) / 2**20:.1f} MB PDF, {len(book.verse_pages):,} "
          f"verses, {len(QUESTIONS)} questions (typeset in {time.perf_counter() - started:.1f} s)", flush=True)
    client = None if args.no_answers else load_client(args.model)
    # The model's own sampling defaults (SmolLM2's card: temperature 0.2, repetition penalty 1.1), as the Chat uses
    # them, with a fixed seed: greedy decoding loops on this model.
    params = GenerationParams(**(client.generation_defaults.values if client else {}),
                              max_new_tokens=args.max_new_tokens, seed=0)
    if client is not None:
        print(f"answers: {client.describe()}, {client.generation_defaults.describe()}, seed 0, up to "
              f"{args.max_new_tokens} new tokens", flush=True)
    read, inside, baseline_right = first_characters_baseline(book, client, params)

    runs = []
    for name, postgres in [("SQLite", False)] + [("PostgreSQL", True)] * args.postgres:
        with database(postgres) as url:
            runs.append(measure(name, url, book, args.runs, client, params, embedder))
        print(f"{name}: measured", flush=True)

    count = len(QUESTIONS)
    width = 26
    print(f"\n{'':44s}" + "".join(f"{run.name:>{width}s}" for run in runs) + f"{'first 12,000 chars':>{width}s}")

    def row(label: str, cells: list[str], baseline: str = "") -> None:
        print(f"{label:44s}" + "".join(f"{cell:>{width}s}" for cell in cells) + f"{baseline:>{width}s}")

    row("answer within reach: recall@5", [f"{run.found_at_5}/{count} ({run.found_at_5 / count:.0%})" for run in runs],
        f"{inside}/{count} ({inside / count:.0%})")
    row("best passage on an answering page: recall@1",
        [f"{run.found_at_1}/{count} ({run.found_at_1 / count:.0%})" for run in runs])
    if client is not None:
        row("model's answer right", [f"{run.right}/{count} ({run.right / count:.0%})" for run in runs],
            f"{baseline_right}/{count} ({baseline_right / count:.0%})")
    row("ingestion, seconds per 100 pages", [f"{run.ingest_s / book.pages * 100:.2f} s" for run in runs])
    row("passages of the document", [f"{run.passages:,}" for run in runs], f"{read:,} chars read")
    row("search latency, one copy: median / p95",
        [f"{statistics.median(run.latency_one_ms):.1f} / {percentile(run.latency_one_ms, 0.95):.1f} ms"
         for run in runs])
    row(f"search latency, {runs[0].all_passages:,} passages: median / p95",
        [f"{statistics.median(run.latency_all_ms):.1f} / {percentile(run.latency_all_ms, 0.95):.1f} ms"
         for run in runs])
    if embedder is None:
        row("hybrid (embeddings) recall@5", ["no model: --embedding-model" for _ in runs])
    else:
        print(f"\nsearch by words and meaning, fused, with {embedder.name}:")
        row("hybrid recall@5", [f"{run.hybrid_at_5}/{count} ({run.hybrid_at_5 / count:.0%})" for run in runs])
        row("hybrid recall@1", [f"{run.hybrid_at_1}/{count} ({run.hybrid_at_1 / count:.0%})" for run in runs])
        row("embedding, seconds per 100 pages", [f"{run.embed_s / book.pages * 100:.2f} s" for run in runs])
        row("hybrid search latency, one copy: median / p95",
            [f"{statistics.median(run.latency_hybrid_ms):.1f} / {percentile(run.latency_hybrid_ms, 0.95):.1f} ms"
             for run in runs])
    for run in runs:
        for title, lines in (("not in the 5 passages found", run.not_found), ("wrong answers", run.misses)):
            if lines:
                print(f"\n{run.name}: {title}")
                print("\n".join(f"  {line}" for line in lines))


if __name__ == "__main__":
    main()
