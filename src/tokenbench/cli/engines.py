"""``tokenbench engines``: which embedded engines are built, building them, and serving one on its own."""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING

from rich.console import Console

from ..console import print_hanging, print_table
from ..layout import table_layout
from ..errors import EngineError, UsageError
from ..registry import LAUNCHERS
from .common import check_output, emit_json, notifier
from .options import SERVE_PARALLEL
from .grammar.engines import SERVE_CTX

if TYPE_CHECKING:
    from ..engines.status import EngineStatus

#: What ``engines`` does with the engines named after it (none: says which are ready).
ACTIONS = ("build", "serve")


#: The least context llama-server gives a slot: a smaller -c is raised to it (a banner said '10 tokens each' of
#: a server that gave 256).
LLAMA_MIN_CTX = 256
#: The tokens of one block of the embedded vLLM's KV cache (its CPU build's, as its /metrics cache_config_info says).
VLLM_BLOCK = 128


def _print_states(console: Console, states: list[EngineStatus]) -> None:
    """The engines' table; where a path would wrap in it (cut mid-name at 80 columns, so it could not be copied),
    the paths go under the table instead, each whole on a line of its own."""
    header = ["Engine", "State", "Where", "What it needs"]
    rows = [[s.name, "ready" if s.ready else "not yet", s.where, s.needs] for s in states]
    layout = table_layout(header, rows, console.width)
    if layout is None or layout.widths[2] >= max(len(s.where) for s in states):
        print_table(console, header, rows)
        return
    paths = [s for s in states if s.where.startswith("/")]
    print_table(console, header, [[*r[:2], "path below" if s in paths else r[2], r[3]] for r, s in zip(rows, states)])
    for s in paths:
        console.print(f"{s.name}: {s.where}", markup=False, highlight=False, soft_wrap=True)


def cmd_engines(a: argparse.Namespace, console: Console, err: Console) -> int:
    from ..engines import status

    # "engines vllm" names an engine; "engines build vllm" an action, then engines (a positional with choices would
    # take the engine for a misspelt action)
    action, given = (a.names[0], a.names[1:]) if a.names[:1] and a.names[0] in ACTIONS else (None, a.names)
    if action == "serve":
        if a.json:
            raise UsageError("engines serve writes no JSON: drop --json")
        return _serve(given, a, console, err)
    serving = _serve_options(a)
    if serving:
        raise UsageError(f"{serving[0]} is for 'engines serve' (e.g. tokenbench engines serve llama-server "
                         f"{serving[0]} ...): without serve nothing is started")
    check_output(a.json, "--json")
    names = list(status.NAMES) if not given or given == ["all"] else given
    bad = [n for n in names if n not in status.NAMES and not status.known(n)]
    if bad:
        raise UsageError(f"unknown engine {bad[0]!r}: use {', '.join(status.NAMES)} or all")
    if action == "build":
        note = notifier(err)
        for n in names:
            status.build(n, note)  # returns at once for an engine that is ready
    states = [status.status(n) for n in names]
    _print_states(console, states)
    if a.json:
        emit_json(a.json, [{"engine": s.name, "ready": s.ready, "where": s.where, "needs": s.needs} for s in states])
    return 0


def _serve_options(a: argparse.Namespace) -> list[str]:
    """The serve group's options given other than as their defaults: a listing or a build would ignore them."""
    given = {"--model-size": a.model_size != "tiny", "--quant": a.quant is not None,
             "--parallel": a.parallel != SERVE_PARALLEL, "--ctx": a.ctx != SERVE_CTX, "--port": a.port != 0,
             "--cache-ram": a.cache_ram is not None, "--kv-blocks": a.kv_blocks is not None}
    return [name for name, on in given.items() if on]


def _serve(names: list[str], a: argparse.Namespace, console: Console, err: Console) -> int:
    """One embedded engine on the embedded model, on its own until Ctrl-C: a server to point ``record``, an agent
    or any other client at, where there is none yet."""
    from ..engines import tiny
    from ..engines.embedded import Embedded, EmbeddedSpec
    from ..engines.launch import port_taken

    if len(names) != 1 or names[0] not in LAUNCHERS:
        raise UsageError(f"engines serve starts one engine: give one of {', '.join(LAUNCHERS)}")
    if a.port and port_taken(a.port):
        raise UsageError(f"port {a.port} of 127.0.0.1 is taken: give another --port, or 0 for any free one")
    name = names[0]
    if a.cache_ram is not None and name != "llama-server":
        raise UsageError(f"--cache-ram is llama-server's host prompt cache; {name} has none")
    if a.kv_blocks is not None and name != "vllm":
        raise UsageError(f"--kv-blocks is vLLM's KV cache pool; {name} has other limits (--parallel, --ctx)")
    if a.kv_blocks is not None and a.kv_blocks * VLLM_BLOCK < a.ctx:  # vLLM refuses to start, in a long log
        raise UsageError(f"--kv-blocks {a.kv_blocks} holds {a.kv_blocks * VLLM_BLOCK:,} tokens, less than one "
                         f"request's --ctx {a.ctx:,}: give at least {-(-a.ctx // VLLM_BLOCK)} blocks, or a smaller "
                         "--ctx")
    trained = tiny.CONFIG["max_position_embeddings"]
    if a.ctx > trained:  # llama-server gave each slot the model's own and the banner said what was asked
        raise UsageError(f"--ctx {a.ctx:,}: the embedded model was trained for {trained:,} tokens of context, and "
                         f"the engine gives no more: give at most {trained:,}")
    if name == "llama-server" and a.ctx < LLAMA_MIN_CTX:  # it raises a smaller one, and the banner said the asked
        raise UsageError(f"--ctx {a.ctx}: llama-server gives a slot at least {LLAMA_MIN_CTX} tokens of context: "
                         f"give {LLAMA_MIN_CTX} or more")
    flags: tuple[str, ...] = ()
    host: tuple[str, ...] = ()  # what the flags give the engine, said before it serves
    if a.cache_ram is not None:
        flags = ("--cache-ram", str(a.cache_ram))
        host = (f"its host prompt cache {'off' if a.cache_ram == 0 else f'{a.cache_ram:,} MiB'} (--cache-ram)",)
    if a.kv_blocks is not None:
        flags = ("--num-gpu-blocks-override", str(a.kv_blocks))
        host = (f"its KV cache pool {a.kv_blocks} blocks of {VLLM_BLOCK} tokens, {a.kv_blocks * VLLM_BLOCK:,} tokens "
                "(--kv-blocks)",)
    engine = Embedded.start(EmbeddedSpec(name, a.model_size, a.quant, flags), notifier(err), parallel=a.parallel,
                            ctx=a.ctx, port=a.port)
    try:
        url = engine.engine.base_url
        # the URLs each on a line of their own, whole, to be copied
        for line in (*host, f"serving {engine.engine.model} with {name}, {_at_once(name, a.parallel, a.ctx)}:"):
            print_hanging(console, line)
        for line in (f"  --url {url}", f"  record --upstream {url.removesuffix('/v1')}", "Ctrl-C stops"):
            console.print(line, markup=False, highlight=False, soft_wrap=True)
        console.file.flush()
        while engine.alive():
            time.sleep(0.5)
        raise EngineError(f"the {name} engine exited by itself (code {engine.engine.proc.returncode}); its log: "
                          f"{engine.engine.log_path}\n{engine.engine.log_tail()}")
    except KeyboardInterrupt:  # Ctrl-C (or SIGTERM) is how serving ends: exit 0, as record's
        pass
    finally:
        engine.stop()
    console.print(f"stopped the {name} engine", markup=False, highlight=False)
    return 0


def _at_once(engine: str, parallel: int, ctx: int) -> str:
    """What --parallel and --ctx mean to the engine: llama-server's slots and vLLM's sequences limit the requests
    served at once; Transformers serve sizes its KV cache by them and admits every request; llama-cpp-python's
    server takes one at a time whatever is asked."""
    if engine == "transformers":
        return f"a KV cache of {parallel} x {ctx:,} tokens (it admits every request; the cache bounds how many run)"
    if engine == "llama-cpp-python":
        return f"one request at a time, {ctx:,} tokens of context"
    return f"{parallel} at a time, {ctx:,} tokens each"
