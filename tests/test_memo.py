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


def test_remembered_for_hits_only_the_very_object_and_is_bounded():
    from engine.language.memo import remembered_for
    memo: dict = {}
    a, b = [1], [1]                            # equal, not the same object
    assert remembered_for(memo, a, lambda: "a", 10) == "a"
    assert remembered_for(memo, a, lambda: "again", 10) == "a"          # the same object: a hit
    assert remembered_for(memo, b, lambda: "b", 10) == "b"              # an equal one: made anew
    assert memo[id(a)] == (a, "a")                                      # kept beside its object
    # a key naming more than the object (what make reads besides it)
    assert remembered_for(memo, a, lambda: "tp2", 10, key=(id(a), 2)) == "tp2"
    assert remembered_for(memo, a, lambda: "tp4", 10, key=(id(a), 4)) == "tp4"
    # an entry under the key whose object is another (an id reused) is not a hit
    memo[id(b)] = (a, "stale")
    assert remembered_for(memo, b, lambda: "fresh", 10) == "fresh"
    # emptied whole past its limit, as remembered
    small: dict = {}
    objs = [object() for _ in range(4)]
    for o in objs[:3]:
        remembered_for(small, o, lambda: 0, 2)
    remembered_for(small, objs[3], lambda: 3, 2)
    assert small == {id(objs[3]): (objs[3], 3)}
