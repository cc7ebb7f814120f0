"""A long document for the knowledge tests: a 300-page PDF of plausible filler with facts on known pages, and a
question for each, worded as a person would ask it rather than copied from the page."""

from __future__ import annotations

import io
import random

# Facts on known pages of the long PDF, and a question for each, in other words than the page's.
FACTS = {
    212: ("The keeper of the Ardmore lighthouse was paid eleven shillings a week in 1871.",
          "How much did the lighthouse keeper at Ardmore earn?"),
    37: ("Copper wire for the telegraph line was shipped from Swansea aboard the schooner Marigold.",
         "Which ship carried the telegraph wire?"),
    158: ("The orchard behind the abbey grew forty varieties of pear, the oldest planted by the monks in 1620.",
          "How many kinds of pears were in the abbey orchard?"),
    299: ("The bridge at Kellsford collapsed during the flood of March 1888 and was rebuilt in granite.",
          "What happened to the Kellsford bridge in the flood?"),
}
PAGES = 300


def filler(rng: random.Random, words: int) -> str:
    vocabulary = ("the of and a to in was for on with as by at from that this which were river town road "
                  "field market church house wall mill farm harbour street school winter summer people year "
                  "years parish council trade work boat cart stone timber grain wool cloth fair season").split()
    return " ".join(rng.choice(vocabulary) for _ in range(words)).capitalize() + "."


def long_pdf_bytes() -> bytes:
    """300 pages of plausible filler, with FACTS on their pages."""
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    rng = random.Random(7)
    out = io.BytesIO()
    pdf = canvas.Canvas(out, pagesize=A4)
    for page in range(1, PAGES + 1):
        text = pdf.beginText(50, 800)
        lines = [filler(rng, 12) for _ in range(30)]
        if page in FACTS:
            lines.insert(rng.randrange(len(lines)), FACTS[page][0])
        for line in lines:
            text.textLine(line)
        pdf.drawText(text)
        pdf.showPage()
    pdf.save()
    return out.getvalue()
