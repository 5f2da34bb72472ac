"""An endpoint opened for a run, and a run's life in the store: what sweep, depth and quality share.

``Endpoint.open`` discovers the server (its adapter holds the server's quirks), checks the model, picks the
tokenizer and builds the streaming client with the flags its adapter gives. ``RunLog`` creates the stored run
and closes it in every case: finished, or aborted by an error or an interrupt, with the run tied to the
exception so the CLI shows this run and no other.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import aiohttp

from . import __version__, machine
from .adapters.base import Adapter
from .client import Api, PreparedRequest, StreamClient
from .errors import EndpointError, RunInterrupted, TokenbenchError, UsageError
from .results import LevelOutcome, Manifest, RunResult, as_read, now_iso
from .reader import load_result
from .servers import ServerInfo, ServerTokenizer, check_model, discover
from .store import Store
from .records import RequestRecord
from .workload import LocalTokenizer, PromptBuilder, Tokenizer

if TYPE_CHECKING:
    from .quality.items import Item


async def pick_tokenizer(
    path: str | None, api_key: str | None, http: aiohttp.ClientSession, info: ServerInfo, model: str
) -> tuple[Tokenizer, LocalTokenizer | None]:
    """The served model's tokenizer: ``path`` if given, else the server's own endpoint, else a local one by the
    model's name. Also returns the local one, if any, for counting tokens."""
    if path:
        t = LocalTokenizer(path)
        return t, t
    if info.tokenize_path:
        st = ServerTokenizer(http, info, model, api_key)
        try:
            if await st.encode("hello world"):
                return st, None
        except (TokenbenchError, aiohttp.ClientError, KeyError, ValueError, asyncio.TimeoutError):
            pass
    try:
        t = LocalTokenizer(model)
        return t, t
    except (UsageError, ValueError, OSError):
        pass
    raise UsageError(
        f"no tokenizer for exact prompt lengths of '{model}': pass --tokenizer PATH "
        "(a tokenizer.json or a Hugging Face directory of the served model)"
    )


def stream_client(http: aiohttp.ClientSession, url: str, model: str, adapter: Adapter, **kw: Any) -> StreamClient:
    """A streaming client with the flags the server's adapter sets (one token per chunk, a fresh connection per
    stream, its stream_options): the one place they are passed. ``kw``: the API, key, timeouts, temperature, token counter."""
    return StreamClient(http=http, base_url=url, model=model, one_token_per_chunk=adapter.one_token_per_chunk,
                        fresh_connection=adapter.closes_after_stream, stream_options=dict(adapter.stream_options), **kw)


@dataclass(slots=True)
class Endpoint:
    """A discovered server, the model to request, its tokenizer, and what makes streaming clients for it."""

    http: aiohttp.ClientSession
    url: str
    api_key: str | None
    info: ServerInfo
    model: str
    tokenizer: Tokenizer
    counter: LocalTokenizer | None  # a local tokenizer to count output tokens with, if there is one

    @classmethod
    async def open(cls, http: aiohttp.ClientSession, url: str, api_key: str | None, model: str | None,
                   tokenizer: str | None, warn: Callable[[str], None] | None = None) -> Endpoint:
        """Discover ``url``, check ``model`` (or take the one it serves) and pick the tokenizer."""
        info = await discover(http, url, api_key, model=model)
        if info.models_error and warn is not None:
            warn(f"warning: {info.models_error}; measuring '{model}' as given by --model")
        chosen = check_model(info, model, url)
        tok, counter = await pick_tokenizer(tokenizer, api_key, http, info, chosen)
        return cls(http, url, api_key, info, chosen, tok, counter)

    @property
    def eos_token_id(self) -> int | None:
        eos = getattr(self.tokenizer, "eos_token_id", None)
        return eos if isinstance(eos, int) else None

    def client(self, api: Api = "completions", **kw: Any) -> StreamClient:
        """A streaming client for this endpoint, with the flags its adapter sets (one token per chunk, a fresh
        connection per stream); ``kw``: timeouts, temperature."""
        return stream_client(self.http, self.url, self.model, self.info.adapter, api=api, api_key=self.api_key,
                             counter=self.counter, **kw)

    def manifest(self, embedded: dict[str, Any] | None, label: str | None, command: str,
                 **fields: Any) -> Manifest:
        """The provenance every run carries (docs/results.md), then the run's own ``fields``, each a key ``Manifest``
        names (Manifest.written: a key it does not name is an error)."""
        return Manifest.written(
            endpoint=self.url,
            model=self.model,
            engine=self.info.engine,
            engine_version=self.info.engine_version or (embedded or {}).get("engine_version"),
            server=self.info.to_dict(),
            embedded=embedded,
            label=label,
            command=command,
            started=now_iso(),
            finished=None,
            tokenizer=self.tokenizer.description,
            **fields,
            machine=machine.snapshot(),
        )


#: What an interrupted run of each kind keeps, for the one line that says so.
IN_PROGRESS = {"sweep": "its finished requests",  # the level in progress too: its finished requests, marked
               "depth": "its finished depths",  # and the repetitions of the depth in progress, marked
               "quality": "its finished items"}  # the items in flight are not


@dataclass(slots=True)
class RunLog:
    """A run in the store: created once, closed once, whatever happens between."""

    store: Store
    run_id: str
    kind: str
    label: str | None
    manifest: Manifest = field(default_factory=Manifest)
    opened: bool = False

    def create(self, manifest: Manifest) -> None:
        """Store the run, its manifest as the JSON the store keeps (the store's boundary takes plain JSON)."""
        self.manifest = manifest
        manifest.started = manifest.started or now_iso()
        self.store.create_run(self.run_id, self.kind, self.label, manifest.started, __version__, manifest.to_dict())
        self.opened = True

    def finish(self, status: str, error: str | None = None) -> None:
        self.manifest.finished = finished = now_iso()
        self.store.update_manifest(self.run_id, self.manifest.to_dict())
        self.store.finish_run(self.run_id, status, finished, error)

    def close(self, status: str, error: str | None, outcomes: list[LevelOutcome], items: list[Item] | None = None
              ) -> RunResult:
        """Finish the run and return it as the store now holds it, so its JSON is written from the result in hand
        and equals what every reader loads back (``load_result``): the store keeps a run's provenance beside its
        manifest, and a reader sees it last among the manifest's keys."""
        self.finish(status, error)
        return RunResult(self.run_id, as_read(self.manifest.to_dict(), "measured", self.label), outcomes, status,
                         error, kind=self.kind, items=items or [])

    def abort(self, e: BaseException, done: bool) -> RunInterrupted | None:
        """Close the run ``e`` ends, if it was created: interrupted by the user, else partial (``done``: some of it
        finished) or failed; and tie the run to ``e`` for the CLI. A ``TokenbenchError`` carries it (its typed
        ``run_id`` and ``result``); an interrupt (KeyboardInterrupt, or asyncio's cancellation of the run on
        SIGINT) is answered with a ``RunInterrupted`` carrying it, which the runner raises in its place:

            except BaseException as e:
                if (stop := log.abort(e, done)) is not None:
                    raise stop from None
                raise

        A bug carries the run id in a note on its traceback. None: raise ``e`` itself."""
        if not self.opened:
            return None
        interrupt = isinstance(e, (KeyboardInterrupt, asyncio.CancelledError))
        if interrupt:
            status, error = "interrupted", "interrupted (Ctrl-C, SIGTERM or SIGHUP)"
        else:
            status = "partial" if done else "failed"
            error = str(e) if isinstance(e, TokenbenchError) else f"crashed: {type(e).__name__}: {e}"[:500]
        self.finish(status, error)
        if interrupt:
            # one line within 80 columns: the line before it said the run's status and where it was saved
            result = self.result()
            kept = "had finished nothing" if result is not None and not (result.outcomes or result.items) else \
                f"keeps {IN_PROGRESS.get(self.kind, 'what it finished')}"
            stop = RunInterrupted(f"interrupted: run {self.run_id} {kept}")
            stop.run_id, stop.result = self.run_id, result
            return stop
        if isinstance(e, TokenbenchError):
            e.run_id, e.result = self.run_id, self.result()
        elif isinstance(e, Exception):
            e.add_note(f"run {self.run_id} was closed as {status}")
        return None

    def result(self) -> RunResult | None:
        """The run as stored, read back as every reader reads it; None when the store cannot give it back (the
        error that ended the run may be the store's own): the error then goes on without it, never replaced."""
        try:
            return load_result(self.store, self.run_id)
        except Exception:
            return None


async def preflight(client: StreamClient, builder: PromptBuilder, fields: dict[str, Any]) -> RequestRecord:
    """A 2-token check request with ``fields``: the run's own kind of request, with a short output."""
    text, n = await builder.exact("preflight: ", 8, random.Random())
    rec = RequestRecord(index=-1, phase="warmup")
    await client.send(PreparedRequest(text, 2, n, fields), rec)
    if rec.error_kind is None:
        return rec
    if rec.http_status is not None and 400 <= rec.http_status < 500:
        raise EndpointError(
            f"the server refused the request (HTTP {rec.http_status}: {rec.error}); "
            "check --model and --api, or drop fields with --extra-body"
        )
    raise EndpointError(f"the first request failed ({rec.error_kind}: {rec.error}); check the server's log")
