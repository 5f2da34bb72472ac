"""The parts of the grammar several commands share: the argparse types of numbers, shares and currencies, and
the option groups (the endpoint and its embedded engine, --json, --db, --latest). ``parser.py`` builds the
commands from them, and ``quality.py`` its own."""
from __future__ import annotations

import argparse
from typing import Any

from ..apis import APIS, PATHS
from ..registry import LAUNCHERS, find
from ..money import CURRENCIES, DEFAULT_CURRENCY


def _number(kind: type, low: float, strict: bool, what: str) -> Any:
    def parse(text: str) -> Any:
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not {what}") from None
        if v != v or (v <= low if strict else v < low):
            raise argparse.ArgumentTypeError(f"'{text}' is not {what}")
        if abs(v) > 2**31:  # it is one: say the bound, not that it is not
            raise argparse.ArgumentTypeError(f"'{text}' is more than tokenbench takes ({2**31:,} at most)")
        return v
    parse.__name__ = what
    return parse


POSITIVE_INT = _number(int, 0, True, "a positive whole number")
NONNEG_INT = _number(int, 0, False, "a whole number, 0 or more")
POSITIVE = _number(float, 0, True, "a positive number")
NONNEG = _number(float, 0, False, "a number, 0 or more")
#: llama-server's --cache-ram as it takes it: MiB, 0 off, -1 no limit
CACHE_RAM = _number(int, -1, False, "a number of MiB, 0 (off) or -1 (no limit)")
#: Requests an embedded engine serves at once where no search sets it (``engines serve``, a cache-cliff search):
#: llama-server's slots, vLLM's sequences.
SERVE_PARALLEL = 4


def LABEL(text: str) -> str:
    """A run's label: at least one character that is not a space (an empty one named nothing, and --save '' stored
    nothing without a word)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("a label needs at least one character that is not a space")
    return text


def WARMUP(text: str) -> int | str:
    """A warm-up count, or ``auto``."""
    return "auto" if text.strip().lower() == "auto" else int(NONNEG_INT(text))


#: Said in the help of every option that takes a duration (slo.DURATION_RULE).
UNIT = "(a duration takes its unit: ms, s, m or h)"
#: How a command's argument names a stored run (Store.resolve).
RUN_REF = "id, id prefix, label or last (the newest run)"


def SHARE(text: str) -> float:
    v = NONNEG(text)
    if v > 1:
        raise argparse.ArgumentTypeError(f"'{text}' is not a share from 0 to 1")
    return float(v)


def LATENCY(text: str) -> str:
    """An SLO's latency limit as written (2s, 50ms: with its unit, slo.DURATION_RULE), refused here when it is not
    one, and kept as written for the headings that quote it."""
    from ..slo import parse_duration_ms  # read with the SLO checks (asyncio's among them): not for every --help

    try:
        ok = parse_duration_ms(text) > 0
    except ValueError as e:
        if "has no unit" in str(e):
            raise argparse.ArgumentTypeError(str(e)) from None
        ok = False
    if not ok:
        raise argparse.ArgumentTypeError(f"'{text}' is not a latency: write e.g. 2s or 50ms (above 0, with its unit)")
    return text


def CURRENCY(text: str) -> str:
    code = text.strip().upper()
    if code not in CURRENCIES:
        raise argparse.ArgumentTypeError(f"'{text}' is not an ISO 4217 currency code: write one such as USD, EUR, "
                                         "GBP, JPY, CNY or INR")
    return code


def add_latest(p: argparse.ArgumentParser) -> None:
    p.add_argument("--latest", action="store_true",
                   help="a label several runs share means the newest of them (default: refuse, listing them)")


def add_json(p: argparse.ArgumentParser, what: str = "the table") -> None:
    p.add_argument("--json", help=f"also write {what} to this JSON file, numbers unformatted; - for stdout "
                   "(the table then goes to stderr)")


def add_db(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", help="results database (default: $TOKENBENCH_DB or the user data dir)")


def engine_name(value: str) -> str:
    """An embedded engine's launcher name from any of its engine's names (the registry's); an unknown name as
    given, for argparse's choices to refuse."""
    eng = find(value)
    return eng.launcher if eng is not None and eng.launcher else value


def add_endpoint(g: argparse._ActionsContainer, engine: str, api: str | None = None, api_help: str = "",
                 apis: tuple[str, ...] = APIS) -> None:
    """The endpoint every measuring command talks to (sweep, depth, quality), one set of flags with one help
    each (SHARED_HELP): its URL or the embedded ``engine``, the model, the key, the tokenizer, and for the
    commands that send requests of several kinds the ``api`` they send by default, among ``apis``."""
    g.add_argument("--url", help="OpenAI-compatible base URL (…/v1); omitted: start the embedded engine")
    g.add_argument("--model")
    if api is not None:
        names = {"messages": " (Anthropic's Messages API)", "responses": " (OpenAI's Responses API)"}
        paths = [f"/v1/{PATHS[a]}{names.get(a, '')}" for a in apis]
        g.add_argument("--api", choices=list(apis), default=api,
                       help=f"{', '.join(paths[:-1])} or {paths[-1]} (default {api}: {api_help})")
    g.add_argument("--api-key")
    g.add_argument("--tokenizer")
    add_embedded(g, engine)


def add_embedded(g: argparse._ActionsContainer, default: str) -> None:
    g.add_argument("--engine", type=engine_name, default=default, choices=LAUNCHERS, metavar="ENGINE",
                   help=f"embedded engine when no --url: {', '.join(LAUNCHERS)} (default {default}); vllm and "
                        "llama-server are made on first use (minutes; see docs/engines.md)")
    g.add_argument("--model-size", choices=["tiny", "small", "small-utf8"], default="tiny",
                   help="embedded model: tiny (0.9M parameters, default), small (140M), or small-utf8 (140M, "
                        "its tokens often pieces of a multi-byte character, as real models' on CJK or emoji)")
    g.add_argument("--quant", help="llama engines: a llama-quantize type for the embedded GGUF, e.g. Q8_0")


def add_load(s: argparse.ArgumentParser, search: bool) -> None:
    """The load options: a sweep's levels, or a capacity search's range (``search``), and what both share."""
    g = s.add_argument_group("search" if search else "load")
    if search:
        g.add_argument("--slo", required=True,
                       help="the objectives every level must meet, e.g. ttft_p99=2s,agent_tps=30: ttft/tpot/itl/e2e "
                            "with _p50/_p90/_p95/_p99, agent_tps (tok/s each, at least), agent_tps_p90 (tok/s that 90%% of "
                            "requests read at, each its own, at least; in goodput too), errors (share, e.g. 1%%), "
                            "session_p90 (agent sessions); every latency with its unit: ms, s, m or h")
        g.add_argument("--concurrency", metavar="LOW:HIGH",
                       help="search the agents (closed loop) in this range (default 1:16)")
        g.add_argument("--rate", metavar="LOW:HIGH",
                       help="search the requests/s (open loop) in this range instead, e.g. 0.5:20")
        g.add_argument("--resolution", type=POSITIVE, default=0.1,
                       help="stop when the first failing level is within this share of the last passing one "
                            "(concurrency: or the next whole agent)")
        g.add_argument("--budget", help="spend at most this long searching, e.g. 20m (default: no limit) " + UNIT)
    else:
        g.add_argument("--concurrency", help="closed-loop levels, e.g. 1,4,8,16,32 (default 1; the embedded "
                       "engine's 1,2,4,8)")
        g.add_argument("--rate", help="open-loop levels in requests/s, e.g. 0.5,1,2 (instead of --concurrency)")
    g.add_argument("--arrival", choices=["poisson", "constant"], default="poisson")
    g.add_argument("--phase", choices=["together", "staggered"], default="together",
                   help="closed loop: release the streams' first requests together (default, as vllm bench serve "
                        "does), or staggered: each at a random offset within a warm-up request's time, as agents "
                        "arrive; each level reports the waves its requests fell into")
    g.add_argument("--max-concurrency", type=POSITIVE_INT, help="open loop: cap on requests in flight")
    g.add_argument("--requests", type=POSITIVE_INT, help="measured requests per level (default 32"
                   + (")" if search else "; the embedded engine's 16)"))
    if not search:
        g.add_argument("--duration", help="measure each level for this long, e.g. 60s; with --requests, the level "
                       "ends at whichever comes first " + UNIT)
        g.add_argument("--grace", help="with --duration: requests still in flight this long after a level's end "
                       "are cancelled and counted as cut by its end (errors.level_end), no failure of the server and "
                       "in no latency (default 30s, as AIPerf's --benchmark-grace-period; 0s cancels them at the "
                       "end, inf waits for every one) "
                       + UNIT)
    g.add_argument("--warmup", type=WARMUP,
                   help="uncounted full-length requests per level (default: one per slot); auto: rounds of them "
                        "until TTFT settles (a round's median within a fifth of the last's, at most 6 rounds)")
    if not search:
        g.add_argument("--repetitions", type=POSITIVE_INT, default=1, help="repeat each level; report median and CV")
    g.add_argument("--timeout", default="600s", help="per-request timeout (default 600s) " + UNIT)
    g.add_argument("--stall-timeout", default="60s", help="fail a request after this long without a byte " + UNIT)
    if not search:
        g.add_argument("--slo", help="e.g. ttft_p99=2s,tpot=50ms: goodput and pass/fail per level; every latency with its unit: "
                       "ms, s, m or h; goodput counts the requests within every latency limit and, with "
                       "agent_tps_p90=20, each read at that rate or faster; a level that misses one is a result, not a failure "
                       "(the exit stays 0: a script reads each level's slo_met in --json)")
    g.add_argument("--max-error-rate", type=SHARE, default=0.1,
                   help="a level with a larger share of failed requests is failed, and the run exits 5 "
                        "(default 0.1)")
    g.add_argument("--workers", default="auto",
                   help="load-generating processes, each with its own event loop; auto (default): where a second "
                        "worker could help (2 streams and 2 cores for the client or more), the cost of one send "
                        "is measured here (a wave to a sink on the loopback), then the fewest workers "
                        "whose share of a wave of re-sends (every stream of the busiest level at once) keeps its "
                        "p90 send queue under 1 ms, at least one per 64 streams, at most one per core; a count "
                        "given is held to the busiest level's streams and one per core (with --ray, one per CPU "
                        "of the cluster's nodes), and the run says so")
    g.add_argument("--ray", metavar="ADDRESS",
                   help="place the workers on a Ray cluster (its address, or auto on a node of it): one per node "
                        "unless --workers says how many; needs pip install 'tokenbench[ray]'")


def add_output(s: argparse.ArgumentParser) -> None:
    """Where the run goes and how it is shown, and the clean-bench guard."""
    g = s.add_argument_group("output")
    g.add_argument("--label", type=LABEL, help="host label (default: this hostname, or embedded-ENGINE)")
    g.add_argument("--price-per-hour", type=POSITIVE, help="box price for cost per million output tokens")
    g.add_argument("--currency", default=DEFAULT_CURRENCY, type=CURRENCY)
    g.add_argument("--json", help="write the run to this JSON file (its keys: docs/results.md); - for stdout")
    g.add_argument("--format", choices=["table", "markdown"], default="table")
    g.add_argument("--quiet", action="store_true", help="no progress bars")
    g = s.add_argument_group("clean bench")
    g.add_argument("--guard", choices=["strict", "warn", "off"], default="warn",
                   help="strict: refuse to start, and stop before a level, on a dirty bench; warn: record it; "
                        "off: do not check")
    g.add_argument("--guard-config", help="guard thresholds TOML (default: packaged, then the user config dir)")
    g.add_argument("--no-metrics", action="store_true", help="do not sample the server's /metrics")
    g.add_argument("--metrics-interval", default="5s",
                   help="sample /metrics this often (default 5s, " + UNIT[1:-1] + "; each sample costs the server a page: on 2 CPU "
                        "cores one vLLM /metrics GET stalled every stream for 70-145 ms)")
    add_db(s)
