"""The rollout lifecycle as four swappable stages: Generate, Filter, Control, Replay.

Each stage is a small callable over the dataclasses in ``autotelic.types``; none imports a
trainer or an algorithm, so a new stage (or a Ray-backed one) is a new piece, never a copy.
"""
