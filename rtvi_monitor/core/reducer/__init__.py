"""The parts of a session's reducer (rtvi_monitor/core/state.py's SessionState), one concern a module. Plain Python.

Each part is a small class that keeps its slice of the state, with __slots__: a
part is reached for every message, on a path that interleaves thousands of
sessions, and a slotted object is one less to reach.
"""
