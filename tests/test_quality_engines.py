"""Quality parity against the real embedded engines: needle in a haystack on Transformers serve and on llama.cpp's
llama-server, agreement between the two on the same weights, a knob check, a shipped lm-eval task, and
`quality compare` on real runs. Random weights fail every needle: that is honest, and what these tests check is
the machinery and the bookkeeping (cells, times, tokens against usage, pairing, verdicts)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import need_modules
from servers import Servers, Serving
from tokenbench.cli import main
from tokenbench.engines import tiny
from tokenbench.engines.launch import RunningEngine

pytestmark = pytest.mark.engine
need_modules("torch", "gguf")


# The shared servers (conftest.py): Transformers serve and llama-server of one slot, on the same tiny model.


@pytest.fixture
def model(serving: Servers) -> tiny.TinyModel:
    return serving.models.model("tiny")


@pytest.fixture
def transformers(transformers_tiny: Serving) -> RunningEngine:
    return transformers_tiny.server


@pytest.fixture
def llama(llama_tiny_1: Serving) -> RunningEngine:
    return llama_tiny_1.server


def _quality(engine: RunningEngine, model: tiny.TinyModel, label: str, out: Path, *args: str) -> dict[str, Any]:
    assert main(["quality", "--url", engine.base_url, "--model", engine.model, "--tokenizer", str(model.hf_dir), "--label", label,
                 "--json", str(out), *args]) == 0
    return dict(json.loads(out.read_text()))


def test_needle_in_a_haystack_on_transformers(transformers: RunningEngine, model: tiny.TinyModel,
                                              tmp_path: Path) -> None:
    needle_in_a_haystack(transformers, model, "transformers", tmp_path)


def test_needle_in_a_haystack_on_llama_server(llama: RunningEngine, model: tiny.TinyModel, tmp_path: Path) -> None:
    needle_in_a_haystack(llama, model, "llama", tmp_path)


def needle_in_a_haystack(engine: RunningEngine, model: tiny.TinyModel, which: str, tmp_path: Path) -> None:
    doc = _quality(engine, model, which, tmp_path / "n.json", "--tasks", "niah", "--contexts", "256,1k",
                   "--max-tokens", "8")
    cells = doc["items"]
    assert len(cells) == 6 and {(c["detail"]["context"], c["detail"]["depth"]) for c in cells} == \
        {(x, d) for x in (256, 1024) for d in (10, 50, 90)}
    for c in cells:
        assert c["status"] in ("pass", "fail") and c["latency_ms"] > 0
        assert c["expected"] and len(c["expected"]) == 7
        # the prompt tokens sent, as our tokenizer counts them with the template, match the server's usage
        assert c["detail"]["usage_check"] == "ok", c
        # the request fits its context: the prompt with the server's template, and the 8-token answer asked
        assert c["expected_prompt_tokens"] + 8 <= c["detail"]["context"], c
    assert doc["manifest"]["summary"]["niah"]["items"] == 6


def test_agreement_between_transformers_and_llama_server_on_the_same_weights(
        transformers: RunningEngine, llama: RunningEngine, model: tiny.TinyModel, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The same F32 weights through two engines: greedy outputs mostly identical token for token (measured: 15 of
    16 on /v1/completions); where they differ, it is late, where two logits were within rounding."""
    common = ["--tasks", "agreement", "--api", "completions", "--items", "8", "--max-tokens", "32"]
    _quality(transformers, model, "agree-tf", tmp_path / "a.json", *common)
    _quality(llama, model, "agree-llama", tmp_path / "b.json", *common)
    out = tmp_path / "cmp.json"
    assert main(["quality", "compare", "agree-tf", "agree-llama", "--json", str(out)]) == 0
    ag = json.loads(out.read_text())["tasks"][0]["agreement"]
    assert ag["n"] == 8 and ag["unit"] == "tokens"
    assert ag["identical"] >= 5, ag  # the same function: most outputs identical
    assert all(d >= 1 for d in ag["first_diff"])  # never from the first token on
    assert "agreement of outputs" in capsys.readouterr().out


def test_knob_check_on_llama_server(llama: RunningEngine, model: tiny.TinyModel,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    """The tiny model's chat template has no thinking switch: enable_thinking cannot matter; temperature does."""
    base = ["quality", "knob", "--url", llama.base_url, "--model", llama.model, "--tokenizer", str(model.hf_dir), "--items", "6",
            "--max-tokens", "16"]
    capsys.readouterr()
    assert main([*base, "--param", "chat_template_kwargs.enable_thinking=true,false"]) == 0
    assert "the knob has no measurable effect" in capsys.readouterr().out
    assert main([*base, "--param", "temperature=0,1.5"]) == 0
    assert "temperature has an effect" in capsys.readouterr().out
    # a baseline the server refuses (HTTP 400) leaves nothing to measure against: exit 5, not 0
    assert main([*base, "--param", 'temperature="abc",0']) == 5
    assert "the knob could not be measured" in capsys.readouterr().err


def test_shipped_lm_eval_task_on_transformers(transformers: RunningEngine, model: tiny.TinyModel,
                                              tmp_path: Path) -> None:
    pytest.importorskip("lm_eval")
    doc = _quality(transformers, model, "arith", tmp_path / "h.json", "--tasks", "tokenbench_arith", "--limit", "4")
    assert len(doc["items"]) == 4
    for it in doc["items"]:
        assert it["status"] in ("pass", "fail") and it["latency_ms"] > 0 and it["prompt_tokens"] > 0


class CorruptingProxy:
    """A proxy in front of a server that passes everything through, except that every second completion's text
    gets a character put before it: its first token differs (the user's measurement: a host that
    corrupts half its answers agreed 8/16, and `quality compare` printed only "same within noise")."""

    def __init__(self, upstream: str) -> None:
        from aiohttp import web

        self.upstream = upstream.removesuffix("/v1")
        self.completions = 0
        self.app = web.Application()
        self.app.router.add_route("*", "/{path:.*}", self.forward)

    @staticmethod
    def corrupt(text: str) -> str:
        return ("@" if text.startswith("#") else "#") + text

    def _corrupt_choice(self, choice: dict[str, Any]) -> bool:
        """Corrupts the choice's text, if it has any; whether it did."""
        for holder, key in ((choice, "text"), (choice.get("delta") or {}, "content"),
                            (choice.get("message") or {}, "content")):
            if isinstance(holder.get(key), str) and holder[key]:
                holder[key] = self.corrupt(holder[key])
                return True
        return False

    async def forward(self, request: Any) -> Any:
        import aiohttp
        from aiohttp import web

        body = await request.read()
        corrupt = False
        if request.method == "POST" and request.path.endswith("/completions"):
            self.completions += 1
            corrupt = self.completions % 2 == 0
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
        async with aiohttp.ClientSession() as http, \
                http.request(request.method, self.upstream + request.path_qs, data=body, headers=headers) as up:
            keep = {k: v for k, v in up.headers.items()
                    if k.lower() not in ("content-length", "transfer-encoding", "connection", "content-encoding")}
            if not up.headers.get("Content-Type", "").startswith("text/event-stream"):
                data = await up.read()
                if corrupt and up.status == 200:
                    doc = json.loads(data)
                    for choice in doc.get("choices", [])[:1]:
                        self._corrupt_choice(choice)
                    data = json.dumps(doc).encode()
                return web.Response(body=data, status=up.status, headers=keep)
            resp = web.StreamResponse(status=up.status, headers=keep)
            await resp.prepare(request)
            async for line in up.content:
                if corrupt and line.startswith(b"data: {"):
                    ev = json.loads(line[len(b"data: "):])
                    if ev.get("choices") and self._corrupt_choice(ev["choices"][0]):
                        corrupt = False  # the first text only
                        line = b"data: " + json.dumps(ev).encode() + b"\n"
                await resp.write(line)
            await resp.write_eof()
            return resp


def test_a_proxy_that_corrupts_every_second_answer_is_named_different(
        transformers: RunningEngine, model: tiny.TinyModel, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The user's measurement: the same server twice agrees on every output (the noise floor of greedy
    decoding); through a proxy that corrupts every second answer, half the outputs differ from the first token.
    The needle task ties (random weights fail every needle on both), and the verdict still names the proxy's
    host different, against the floor measured by the repeat, with a p-value; no verdict line says "same"."""
    from tokenbench.emitter import BackgroundEmitter

    common = ["--tasks", "niah,agreement", "--contexts", "256", "--api", "completions", "--items", "16",
              "--max-tokens", "8"]
    first = _quality(transformers, model, "direct", tmp_path / "1.json", *common)["run_id"]
    again = _quality(transformers, model, "direct", tmp_path / "2.json", *common)["run_id"]
    bg = BackgroundEmitter()
    bg.emitter = CorruptingProxy(transformers.base_url)  # type: ignore[assignment]
    with bg as proxy:
        assert main(["quality", "--url", proxy.url, "--model", transformers.model, "--tokenizer", str(model.hf_dir),
                     "--label", "proxy", "--json", str(tmp_path / "3.json"), *common]) == 0
    through = json.loads((tmp_path / "3.json").read_text())["run_id"]
    capsys.readouterr()
    out = tmp_path / "cmp.json"
    assert main(["quality", "compare", first, again, "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert next(t for t in doc["tasks"] if t["task"] == "agreement")["agreement"]["identical"] == 16  # the floor
    assert doc["verdict"]["same"] and "verdict: same within noise" in capsys.readouterr().out
    assert main(["quality", "compare", first, through, "--json", str(out)]) == 0
    text = capsys.readouterr().out
    doc = json.loads(out.read_text())
    by_task = {t["task"]: t for t in doc["tasks"]}
    ag = by_task["agreement"]
    assert (ag["agreement"]["n"], ag["agreement"]["identical"], ag["agreement"]["first_diff"]) == (16, 8, [0] * 8)
    assert by_task["niah"]["scores"]["verdict"] == "same within noise"  # every other task ties
    v = ag["agreement_verdict"]
    assert v["verdict"] == "different" and v["p_value"] < 0.01
    assert v["floor_runs"] == [first, again] and (v["floor_n"], v["floor_identical"]) == (16, 16)
    line = next(ln for ln in text.splitlines() if ln.startswith("verdict:"))
    assert not doc["verdict"]["same"] and "same" not in doc["verdict"]["text"]
    assert line.startswith("verdict: proxy differs from direct: agreement: 8 of 16 outputs identical") and \
        "same" not in line


def test_needles_the_server_refuses_make_a_run_failed_or_partial(llama: RunningEngine, model: tiny.TinyModel,
                                                                  tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """llama-server of 8,192 tokens refuses a 16K needle (HTTP 400): every item refused read "complete", exit 0.
    All refused: the run failed; some refused: partial; both exit 5 and say the server's reason."""
    base = ["quality", "--url", llama.base_url, "--model", llama.model, "--tokenizer", str(model.hf_dir),
            "--tasks", "niah", "--max-tokens", "4", "--db", str(tmp_path / "r.db")]
    for contexts, status, failed in (("16k", "failed", 3), ("256,16k", "partial", 3)):
        out = tmp_path / f"{status}.json"
        assert main([*base, "--contexts", contexts, "--json", str(out)]) == 5
        err = capsys.readouterr().err
        doc = json.loads(out.read_text())
        assert doc["status"] == status and f"the server failed {failed} of" in doc["error"], doc["error"]
        assert f"run {status}: the server failed {failed} of" in err and "http_400" in err, err
