"""``tokenbench agent``, the read-only service a bench talks to on the server host (``server``), its client on the
bench machine (``client``), and the host's snapshot both read (``host``)."""
