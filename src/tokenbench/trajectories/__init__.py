"""Recorded agent trajectories: typed loaders for the formats coding-agent sessions are recorded in, and the one
typed model (``model``) a replayer drives whatever the source. ``load.load_trajectories(path)`` reads any of them;
``detect_format`` / ``is_trajectory_file`` tell a trajectory file from an open-loop trace (trace.py).

Formats: ``weka`` (kv-cache-tester / AgentX Claude Code traces, ``weka``), ``mlcommons`` (MLPerf Agentic Inference
JSONL, ``mlcommons``), ``tracelab`` (TraceLab rounds, ``tracelab``), ``session-log`` (tokenbench's own record of
chat requests, ``session_log``). Each module's docstring documents its format, its sources and the readings it
takes where a file is ambiguous.
"""
