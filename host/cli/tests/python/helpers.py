"""A second module of the suite: imported by suite.py, packed by `wfhost build` beside it."""


def double(value):
    return value * 2
