"""What a box draws while it serves, read where it is drawn: one module per source.

- ``base``: ``PowerSource`` (name, what it measures, ``read()``), a ``Reading``, ``Scope``, ``PowerError``;
- ``nvml``: NVIDIA GPUs (board energy counters, else power sampled), ``amd``: AMD GPUs and APUs (amdsmi, else the
  amdgpu hwmon sensors), ``rapl``: Intel and AMD CPUs (powercap energy counters), ``url``: a DCGM or node exporter
  page, ``command``: the user's own meter;
- ``choose``: ``auto`` (what this machine has: NVML, then amdgpu, then RAPL), ``all``, or one by name;
- ``interval``: readings over an interval -> mean watts and joules, marked partial where a source stopped, and a
  load's share above idle; ``sampler``: sources read in the background, and the ``PowerMeter`` a run asks at each
  level's start and end (``LocalMeter`` here, ``hostagent.client.AgentClient`` on the server host);
- ``report``: what ``tokenbench agent`` answers on ``/v1/power``, typed.

Each is imported by itself (this package imports none of them): the options of ``--power`` name
``choose.CHOICES`` without reading a Prometheus page's parser or starting asyncio.
"""
