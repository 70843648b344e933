"""How a session's derived state travels: bounded lists that know what changed, and patches applied.

The reducer (rtvi_monitor/core/state.py) keeps its lists as `Tail`s and sends, after each batch, what
changed (`SessionState.take_changes`); whoever keeps a copy of the state (a browser's page model,
static/js/model.js; a test) applies each patch with `apply_changes`, in order, and holds the state.
Plain Python: no I/O, no Django.
"""

from collections.abc import Callable
from typing import Any


class Tail:
    """A list that keeps its newest items and knows what changed since it was last read.

    Items are appended, and the newest ones changed in place; the oldest are
    dropped past `limit` items (or past `budget` characters, by `size`). Each
    item has a position that never changes (`dropped` + its index), so
    `patch()` can say exactly what changed: "from position `at` the items
    are now these, and the first kept is at `base`". Applying patches to a
    copy of the list, in order, gives the list: the browser keeps its model
    of a session this way, with no rules of its own.
    """

    __slots__ = ("budget", "dirty", "dropped", "items", "limit", "size", "sizes", "used")

    def __init__(self, limit: int, budget: int = 0, size: Callable[[Any], int] | None = None):
        self.items: list = []
        self.limit = limit
        self.budget = budget  # 0: no byte budget
        self.size = size
        self.sizes: list[int] = []
        self.used = 0
        self.dropped = 0  # items dropped from the front so far
        self.dirty: int | None = None  # lowest index changed since the last patch

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self):
        return iter(self.items)

    def __getitem__(self, index):
        return self.items[index]

    def append(self, item) -> None:
        self.items.append(item)
        index = len(self.items) - 1
        self.dirty = index if self.dirty is None else min(self.dirty, index)
        drop = max(0, len(self.items) - self.limit)
        if self.budget:
            n = self.size(item)
            self.sizes.append(n)
            self.used += n
            used = self.used - sum(self.sizes[:drop])
            while used > self.budget and drop < len(self.items) - 1:  # the newest always stays
                used -= self.sizes[drop]
                drop += 1
        if drop:
            self._drop(drop)

    def _drop(self, n: int) -> None:
        if self.budget:
            self.used -= sum(self.sizes[:n])
            del self.sizes[:n]
        del self.items[:n]
        self.dropped += n
        self.dirty = max(0, self.dirty - n) if self.dirty is not None else None

    def touch(self, index: int) -> None:
        """The item at `index` (negative counts from the end) changed."""
        if index < 0:
            index += len(self.items)
        if self.budget and 0 <= index < len(self.sizes):
            n = self.size(self.items[index])
            self.used += n - self.sizes[index]
            self.sizes[index] = n
        self.dirty = index if self.dirty is None else min(self.dirty, index)

    def touch_position(self, position: int) -> None:
        """The item at this position changed (ignored when it was dropped already)."""
        index = position - self.dropped
        if 0 <= index < len(self.items):
            self.touch(index)

    def next_position(self) -> int:
        return self.dropped + len(self.items)

    def patch(self, dump: Callable[[Any], Any]) -> dict | None:
        """What changed since the last patch, or None; `dump` turns an item into JSON."""
        if self.dirty is None:
            return None
        index, self.dirty = self.dirty, None
        return {"at": self.dropped + index, "items": [dump(x) for x in self.items[index:]], "base": self.dropped}


def public(item: dict) -> dict:
    return {k: v for k, v in item.items() if not k.startswith("_")}


def same(item):
    return item


def put(target: dict, path: tuple, value) -> None:
    for key in path[:-1]:
        target = target.setdefault(key, {})
    target[path[-1]] = value


def apply_changes(state: dict, bases: dict, changes: dict) -> None:
    """Apply one take_changes() patch to a copy of to_dict() in place (with its bases()).

    The reference for static/js/model.js, which does the same in the browser;
    the tests check both against the reducer.
    """
    state.update(changes.get("head", {}))
    for key in ("function_calls", "client_messages"):
        if key in changes:
            state[key] = changes[key]

    def walk(patches: dict, target: dict, base: dict) -> None:
        for key, patch in patches.items():
            if isinstance(patch.get("at"), int) and isinstance(patch.get("items"), list):
                items = target.setdefault(key, [])
                start = base.get(key, 0)
                # Keep what precedes the change, drop what the server dropped, then the new tail.
                del items[patch["at"] - start :]
                del items[: patch["base"] - start]
                items.extend(patch["items"])
                base[key] = patch["base"]
            else:
                walk(patch, target.setdefault(key, {}), base.setdefault(key, {}))

    walk(changes.get("tails", {}), state, bases)
