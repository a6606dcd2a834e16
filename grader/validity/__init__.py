"""The generated validity suite (issue 24, items 5 and 7): semantics-preserving rewrites of every
script exercise's reference fix, each of which must pass, and property-breaking mutations of it,
each of which must fail with a reason naming the property.

- ``source``: AST helpers the rewrites and mutations share (finding a script's model, loop and
  checkpoint, adding an import, a fresh name).
- ``rewrites/``: the rewrite library, one small unit per rewrite (``Rewrite``: a name, why it
  preserves semantics, ``applies(tree)``, ``apply(tree)``).
- ``mutations/``: the mutation library, each naming the property it breaks.
- ``config``: ``tests/validity/<slug>.toml``, the expected verdicts, written before grading.
- ``suite``: the cases of an exercise and their verdicts (``grader.variants``' agreement rule).
- ``run``: grading the cases and the stored run result; ``table``: docs/validity.md from it.
"""
