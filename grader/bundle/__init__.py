"""The candidate bundle (``build``) and the files it ships beside the exercises (``kit/``: the
launcher, the self-check, the README)."""
