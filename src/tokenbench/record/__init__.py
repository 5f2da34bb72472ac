"""``tokenbench record``: a recording proxy in front of a team's own server. Agents pointed at it (any that take
a base URL) work as usual; every request is forwarded unchanged and streamed back as it comes, and the chat
requests (OpenAI chat completions, Anthropic messages, OpenAI responses) are written, once answered, to a session
log (``trajectories.session_log``) that ``tokenbench sweep --trace`` replays on another box.

The modules, in the order a request meets them: ``proxy`` (forwarding, the clock, nothing parsed), ``exchange``
(what it hands on), ``writer`` (the log writer's own process), ``chat``, ``anthropic``, ``responses`` (each API's
bytes into the typed values of ``parsed``), ``sessions`` (which session, whose subagent), ``tokens`` (the
lengths-only log's token and hash ids), ``run`` (a recording from start to stop, and its summary).
"""

from .run import BackgroundRecording, RecordConfig, Recording, Summary, record

__all__ = ["BackgroundRecording", "RecordConfig", "Recording", "Summary", "record"]
