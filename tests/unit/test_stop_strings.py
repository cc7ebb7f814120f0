import itertools

from hypothesis import given
from hypothesis import strategies as st

from app.prompting.stop_strings import StopStringFilter


def _run(chunks, stops):
    flt = StopStringFilter(stops)
    shown = "".join(flt.feed(c) for c in chunks) + flt.flush()
    return shown, flt


def test_cuts_at_a_stop_string_split_over_chunks_without_showing_any_of_it():
    flt = StopStringFilter(["</answer>"])
    assert flt.feed("Paris</an") == "Paris"
    assert flt.feed("swer> trailing") == ""
    assert flt.stopped and flt.matched == "</answer>"
    assert flt.flush() == ""


def test_held_back_tail_is_released_when_it_is_not_a_stop_string():
    flt = StopStringFilter(["STOP"])
    assert flt.feed("a ST") == "a "
    assert flt.feed("ART") == "START"
    assert flt.feed(" ST") == " "
    assert flt.flush() == "ST"


def test_earliest_of_several_stop_strings_wins():
    shown, flt = _run(["x = 1\n\nEND y"], ["END", "\n\n"])
    assert shown == "x = 1" and flt.matched == "\n\n"


@given(text=st.text(alphabet="abST\nOP", max_size=60), cuts=st.lists(st.integers(0, 60), max_size=10),
       stops=st.lists(st.text(alphabet="abST\nOP", min_size=1, max_size=4), max_size=3))
def test_any_chunking_shows_exactly_the_text_before_the_first_stop(text, cuts, stops):
    points = sorted({min(c, len(text)) for c in cuts} | {0, len(text)})
    chunks = [text[a:b] for a, b in itertools.pairwise(points)]
    shown, _ = _run(chunks, stops)
    first = min((i for s in stops if (i := text.find(s)) != -1), default=len(text))
    assert shown == text[:first]
