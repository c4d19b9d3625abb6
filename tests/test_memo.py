"""engine.language.memo.remembered: the one bounded memo rule of the engine (hand cases)."""
from engine.language.memo import remembered


def test_a_key_is_made_once_and_a_falsy_value_is_remembered():
    made = []
    memo: dict = {}

    def make(value):
        made.append(value)
        return value

    assert remembered(memo, "a", lambda: make(None), 10) is None
    assert remembered(memo, "a", lambda: make("other"), 10) is None      # a hit: make is not called
    assert remembered(memo, 0, lambda: make(0), 10) == 0
    assert remembered(memo, 0, lambda: make(1), 10) == 0
    assert made == [None, 0]


def test_the_memo_is_emptied_whole_once_past_its_limit():
    memo: dict = {}
    for key in range(3):                       # limit 2: three entries fit (cleared only when > 2)
        remembered(memo, key, lambda: key, 2)
    assert memo == {0: 0, 1: 1, 2: 2}
    assert remembered(memo, 9, lambda: "nine", 2) == "nine"
    assert memo == {9: "nine"}                 # emptied, then the new entry
