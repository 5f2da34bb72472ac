"""Quality parity: is the model as smart on this box as on that one, and is a difference real or noise.

- ``haystack``: the built-in needle in a haystack (exact-match retrieval at depths over context lengths);
- ``agreement``: greedy outputs of the same prompts, compared token by token between two runs;
- ``harness``: standard tasks through lm-evaluation-harness against the endpoint;
- ``stats``: paired statistics (McNemar's exact test, a paired bootstrap, items needed for a difference);
- ``parity``: two runs of the same tasks compared item by item, with a verdict;
- ``knob``: does a request parameter change the outputs more than sampling noise does;
- ``runner``: sends the items through the streaming client and stores every one of them.
"""
