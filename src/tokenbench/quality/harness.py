"""Standard tasks through lm-evaluation-harness (``pip install 'tokenbench[quality]'``), against the endpoint
with lm-eval's own OpenAI-compatible model classes (``local-completions``, ``local-chat-completions``).

tokenbench does not evaluate: lm-eval builds the prompts, filters the answers and scores them. tokenbench only
times each request (a thin subclass of lm-eval's model class notes the latency and the server's usage of every
call) and stores every item: its prompt, response, score and latency, so two runs compare item by item.

``tokenbench_arith`` ships with tokenbench (a task YAML and its data file), so this works offline; tasks whose
data lives on the Hugging Face hub need it reachable once (``datasets`` caches it).
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ..errors import EndpointError, TokenbenchError, UsageError
from .items import Item, Status, prompt_key

if TYPE_CHECKING:
    from .runner import QualityConfig

#: Tasks that ship with tokenbench: name -> YAML in quality/data.
SHIPPED = {"tokenbench_arith": "tokenbench_arith.yaml"}
INSTALL = "pip install 'tokenbench[quality]' (lm-eval[api])"
_manager: Any = None


def _lm_eval() -> Any:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # lm-eval's progress bars: tokenbench notes each task instead. tqdm reads this when it is first imported.
    os.environ.setdefault("TQDM_DISABLE", "1")
    try:
        import lm_eval
    except ImportError:
        raise UsageError(f"standard tasks need lm-evaluation-harness: {INSTALL} (built in without it: niah, "
                         "agreement)") from None
    return lm_eval


def _task_manager() -> Any:
    """lm-eval's index of its tasks (it reads some 14,000 YAML files: seconds, so once per process)."""
    global _manager
    if _manager is None:
        _lm_eval()
        for name in ("lm-eval", "lm_eval", "lm_eval.tasks", "lm_eval.api.task", "lm_eval.evaluator"):
            logging.getLogger(name).setLevel(logging.ERROR)
        from lm_eval.tasks import TaskManager

        _manager = TaskManager(verbosity="ERROR")
    return _manager


def check_tasks(names: list[str]) -> None:
    """Refuse, before anything runs, tasks that neither tokenbench nor lm-eval knows."""
    _lm_eval()
    others = [n for n in names if n not in SHIPPED]
    if not others:
        return
    known = set(_task_manager().all_tasks)
    for n in others:
        if n not in known:
            raise UsageError(f"unknown task '{n}': built in are niah, agreement and {', '.join(SHIPPED)}; "
                             "lm-eval lists its own with 'lm-eval ls tasks'")
    if _hub_reachable():
        return  # the data comes down when the task runs
    for n in others:  # no hub: a task whose data is not cached here would only fail after the server is up
        try:
            with _offline_mode():
                _task_manager().load([n])
        except Exception as e:  # datasets raises many kinds; only a missing download is this one's to say
            if _offline(e):
                raise UsageError(_no_hub(n)) from None
            raise


def _no_hub(task: str) -> str:
    return (f"task {task} needs its data from the Hugging Face hub, which cannot be reached from here: run it once "
            f"where the hub is reachable (the data is cached then), or use a task whose data is local "
            f"({', '.join(SHIPPED)})")


def shipped_config(name: str) -> dict[str, Any]:
    """A shipped task's YAML as lm-eval's task dict, its data file made absolute."""
    import yaml

    data = resources.files("tokenbench.quality").joinpath("data")
    cfg = yaml.safe_load(data.joinpath(SHIPPED[name]).read_text())
    files = cfg["dataset_kwargs"]["data_files"]
    cfg["dataset_kwargs"]["data_files"] = {split: str(Path(str(data.joinpath(f)))) for split, f in files.items()}
    return dict(cfg)


def _model(cfg: QualityConfig, model: str) -> Any:
    """lm-eval's OpenAI-compatible model class for the API, noting each call's latency and usage."""
    from lm_eval.models.openai_completions import LocalChatCompletion, LocalCompletionsAPI

    base = LocalChatCompletion if cfg.api == "chat" else LocalCompletionsAPI

    class Timed(base):  # type: ignore[misc, valid-type]
        calls: dict[str, tuple[float, dict[str, Any]]]

        def model_call(self, messages: Any, *, generate: bool = True, gen_kwargs: dict[str, Any] | None = None,
                       **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            out = super().model_call(messages, generate=generate, gen_kwargs=gen_kwargs, **kwargs)
            ms = (time.perf_counter() - t0) * 1000
            usage = out.get("usage") if isinstance(out, dict) else None
            for m in messages if isinstance(messages, (list, tuple)) else [messages]:
                self.calls[str(getattr(m, "prompt", m))] = (ms, usage if isinstance(usage, dict) else {})
            return out

    path = "chat/completions" if cfg.api == "chat" else "completions"
    header = {"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else {}
    try:
        lm = Timed(base_url=f"{cfg.url}/{path}", model=model, tokenizer_backend=None, tokenized_requests=False,
                   num_concurrent=1, max_retries=1, timeout=int(cfg.timeout_s), seed=cfg.seed, header=header)
    except ImportError as e:  # lm-eval without its api extra
        raise UsageError(f"lm-eval's API models need more packages ({e}): {INSTALL}") from None
    lm.calls = {}
    return lm


def _offline(e: BaseException) -> bool:
    seen: BaseException | None = e
    while seen is not None:
        text = f"{type(seen).__name__} {seen}"
        if isinstance(seen, ConnectionError) or any(w in text for w in ("Hub", "OfflineMode", "offline", "resolve",
                                                                         "Max retries", "ConnectTimeout")):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _hub_reachable() -> bool:
    host = urlsplit(os.environ.get("HF_ENDPOINT") or "https://huggingface.co").hostname or "huggingface.co"
    try:
        socket.getaddrinfo(host, 443)
        return True
    except OSError:
        return False


@contextmanager
def _offline_when_unreachable(task: str) -> Iterator[None]:
    """Where the hub cannot even be resolved, Hugging Face's offline mode for this lm-eval task: cached data still
    loads, and missing data fails at once (not after five retries over 25 s)."""
    if task in SHIPPED or _hub_reachable():
        yield
        return
    with _offline_mode():
        yield


@contextmanager
def _git_hash_read_not_asked() -> Iterator[None]:
    """lm-eval records the working directory's git commit by running `git describe`, whose "fatal: not a git
    repository" reached the terminal wherever tokenbench ran outside a checkout. Its own fallback, which reads the
    commit from the .git folder without running git, stands in for it while a task runs."""
    from lm_eval import evaluator
    from lm_eval.loggers import utils

    before = evaluator.get_git_commit_hash
    evaluator.get_git_commit_hash = lambda: utils.get_commit_from_path(os.getcwd())
    try:
        yield
    finally:
        evaluator.get_git_commit_hash = before


@contextmanager
def _offline_mode() -> Iterator[None]:
    """Hugging Face's offline mode, its flags put back as they were after."""
    flags = [("huggingface_hub.constants", "HF_HUB_OFFLINE"), ("datasets.config", "HF_HUB_OFFLINE"),
             ("datasets.config", "HF_DATASETS_OFFLINE")]
    import importlib

    for m, _ in flags:
        importlib.import_module(m)  # so that its flags exist to be set
    before = [(sys.modules[m], a, getattr(sys.modules[m], a)) for m, a in flags if hasattr(sys.modules[m], a)]
    for mod, attr, _ in before:
        setattr(mod, attr, True)
    try:
        yield
    finally:
        for mod, attr, value in before:
            setattr(mod, attr, value)


def evaluate(task: str, cfg: QualityConfig, model: str, note: Any = None) -> list[Item]:
    """Run one lm-eval task (or group) against the endpoint; every item, scored by lm-eval's first metric."""
    _lm_eval()
    from lm_eval import simple_evaluate

    lm = _model(cfg, model)
    spec: Any = shipped_config(task) if task in SHIPPED else task
    if note:
        note(f"{task}: lm-evaluation-harness, {cfg.limit or 'all'} items, {cfg.api} API")
    try:
        with _offline_when_unreachable(task), _git_hash_read_not_asked():
            res = simple_evaluate(model=lm, tasks=[spec], limit=cfg.limit, log_samples=True,
                                  task_manager=_task_manager(), bootstrap_iters=0, random_seed=cfg.seed,
                                  numpy_random_seed=cfg.seed, torch_random_seed=cfg.seed,
                                  fewshot_random_seed=cfg.seed, apply_chat_template=cfg.api == "chat",
                                  verbosity="ERROR")
    except TokenbenchError:
        raise
    except Exception as e:  # lm-eval and datasets raise many kinds; each becomes one line
        if _offline(e):
            raise UsageError(_no_hub(task)) from None
        first = (str(e).strip().splitlines() or [""])[0][:200]
        raise EndpointError(f"task {task} failed in lm-evaluation-harness ({type(e).__name__}: {first}); check "
                            "the server, --api and --model") from None
    if not res:
        raise EndpointError(f"task {task}: lm-evaluation-harness returned no result")
    items = []
    for name, samples in (res.get("samples") or {}).items():
        metrics = [m["metric"] for m in (res["configs"][name].get("metric_list") or []) if isinstance(m, dict)]
        for s in samples:
            items.append(_item(name, s, metrics, lm.calls))
    return items


def _item(task: str, s: dict[str, Any], metrics: list[str], calls: dict[str, Any]) -> Item:
    args = s.get("arguments") or [[""]]
    first = args[0][0] if args and isinstance(args[0], (list, tuple)) else args[0]
    first = getattr(first, "prompt", first)  # a chat request's JsonChatStr holds its messages as JSON
    if isinstance(first, (list, tuple)) and len(first) == 1:  # ... and logged samples keep it as a 1-tuple
        first = first[0]
    prompt = str(first)
    resps = s.get("resps") or [[""]]
    response = resps[0][0] if resps and resps[0] and isinstance(resps[0][0], str) else str(resps[0] if resps else "")
    values = {m: s[m] for m in metrics if m in s and isinstance(s[m], (int, float, bool))}
    score = float(values[metrics[0]]) if metrics and metrics[0] in values else None
    ms, usage = calls.get(prompt, (None, {}))
    status: Status = "done" if score is None else "pass" if score == 1.0 else "fail" if score == 0.0 else "done"
    filtered = s.get("filtered_resps")
    return Item(task=task, idx=int(s.get("doc_id", 0)), key=f"doc{s.get('doc_id')}/{prompt_key(prompt)[:8]}",
                prompt=prompt, status=status, score=score, response=response, expected=str(s.get("target")),
                latency_ms=None if ms is None else round(ms, 3), prompt_tokens=usage.get("prompt_tokens"),
                output_tokens=usage.get("completion_tokens"),
                detail={"metrics": values, "filtered": filtered[0] if isinstance(filtered, list) and filtered else
                        filtered, "harness": "lm-evaluation-harness"})
