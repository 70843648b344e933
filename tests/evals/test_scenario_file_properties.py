"""Whatever a caller said, an operator typed or an upstream named an agent, the scenario file is one that
Pipecat's own loader reads, and it reads back exactly those words: no text is YAML, a tag or a comment's end.
"""

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from pipecat.evals.scenario import EvalScenarioFile

from rtvi_monitor.evals import scenario as scenarios

# Text as people and bots send it: any character, YAML's own (: # ! & * | > ' " - ? { } [ ]) and control ones too.
words = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=80).filter(str.strip)
hostile = st.sampled_from(
    [
        "!include /etc/passwd",
        "*alias",
        "&anchor x",
        "key: value",
        "- item",
        "# comment",
        "'quoted",
        "null",
        "012",
        "yes",
    ]
)
said = st.one_of(words, hostile).map(str.strip).filter(bool)


def load(text: str):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "s.yaml"
        path.write_text(text)
        return list(EvalScenarioFile.load(path))


@settings(max_examples=60, deadline=None)
@given(user=said, contains=st.one_of(st.just(""), said), excludes=st.one_of(st.just(""), said), about=st.text())
def test_any_words_load_back_as_themselves(user, contains, excludes, about):
    turn = {
        "number": 1,
        "user": user,
        "include": True,
        "calls": [{"name": "lookup", "args": {"q": user}}],
        "within_ms": 3000,
        "contains": contains,
        "excludes": excludes,
    }
    (text,) = load(scenarios.document("name", [turn], about=about))
    (loaded,) = text.turns
    assert loaded.user == user
    call, reply = loaded.expect
    assert call.calls[0].args == {"q": user}
    assert (reply.text_contains or "") == contains and (reply.text_excludes or "") == excludes
    assert reply.within_ms == 3000


@given(st.text(max_size=200))
def test_a_name_is_always_a_plain_file_name(name):
    made = scenarios.slug(name)
    assert made and "/" not in made and ".." not in made and len(made) <= 80
