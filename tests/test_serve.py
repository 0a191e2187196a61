"""``gguf-mtp serve`` on the shipped tiny model: a real server in a subprocess on 127.0.0.1, the real ``openai``
client, raw HTTP for the error cases, and every answer compared with ``gguf-mtp run`` / MTPSession."""

from __future__ import annotations

import http.client
import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gguf_mtp import convert
from gguf_mtp.runtime import MTPSession, patches
from gguf_mtp_cli.main import app, main

openai = pytest.importorskip("openai")
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

TINY = Path(__file__).resolve().parents[1] / "examples" / "tiny-qwen35-mtp"
PROMPTS = ["def fibonacci(n):\n", "import os\n\n\ndef list_files(path):\n", "class Stack:\n    def __init__(self):\n",
           "# parse the command line\nimport argparse\n"]
N = 48  # tokens per answer: enough for several draft steps, cheap on 2 cores
CTX = 1024  # per slot


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("serve")
    return convert(TINY, outfile=d / "tiny.gguf", progress=False).path


def _reap(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()


class Server:
    """``gguf-mtp serve`` in a subprocess on a free port (``--port 0``, read back from its start line)."""

    def __init__(self, model: Path, *args: str, api_key: str = "none", ready: bool = True,
                 cmd: list[str] | None = None) -> None:
        """``ready``: return once the model is loaded ("listening on"), else as soon as the port is open.
        ``cmd``: another program that serves (the library's ``serve``), its start lines as the command's."""
        cmd = cmd or [sys.executable, "-m", "gguf_mtp_cli.main", "serve", str(model), "--port", "0", "-t", "1", *args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # a test that fails before it stops its server leaves no server behind (at the latest when pytest exits)
        weakref.finalize(self, _reap, self.proc)
        self.log: list[str] = []
        self.port = 0
        deadline = time.monotonic() + 120
        assert self.proc.stderr is not None
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.log.append(line)
            m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
            if m and ("listening on" in line or not ready):
                self.port = int(m.group(1))
                break
        if not self.port:
            self.proc.kill()
            raise RuntimeError("server did not start:\n" + "".join(self.log) + self.proc.stderr.read())
        threading.Thread(target=self._drain, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.port}"
        self.client = openai.OpenAI(base_url=self.url + "/v1", api_key=api_key, max_retries=0, timeout=120)

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log.append(line)

    def http(self, method: str, path: str, body: bytes | str | dict | None = None,
             headers: dict[str, str] | None = None) -> tuple[int, dict | str]:
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        data = json.dumps(body).encode() if isinstance(body, dict) else body
        c.request(method, path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
        r = c.getresponse()
        raw = r.read().decode()
        c.close()
        try:
            return r.status, json.loads(raw)
        except ValueError:
            return r.status, raw

    def metrics(self) -> dict[str, float]:
        status, text = self.http("GET", "/metrics")
        assert status == 200 and isinstance(text, str)
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                k, v = line.rsplit(" ", 1)
                out[k.removeprefix("gguf_mtp_")] = float(v)
        return out

    def stop(self, sig: int = signal.SIGINT, timeout: float = 30) -> int:
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise


@pytest.fixture(scope="module")
def srv(model: Path):
    s = Server(model, "-np", "2", "-c", str(2 * CTX), "--spec-draft-n-max", "3", "--alias", "tiny")
    yield s
    rc = s.stop(signal.SIGINT)
    assert rc == 0, "".join(s.log)
    assert "Traceback" not in "".join(s.log), "".join(s.log)


@pytest.fixture(scope="module")
def plain(model: Path):
    s = Server(model, "--no-mtp", "-c", str(CTX), "--api-key", "sekrit", "--log-disable", api_key="sekrit")
    yield s
    s.stop(signal.SIGINT)


def _run_p(model: Path, prompt: str, *extra: str) -> tuple[str, dict]:
    """What ``gguf-mtp run -p`` prints, and its --stats-json."""
    r = CliRunner().invoke(app, ["run", str(model), "-p", prompt, "-n", str(N), "-c", str(CTX), "-t", "1", "--stats-json", "-",
                                 *extra])
    assert r.exit_code == 0, r.output
    out = r.stdout
    text, _, stats = out.rstrip("\n").rpartition("\n")  # the JSON is stdout's last line, after the answer's newline
    return text, json.loads(stats)


def test_health_and_models(srv: Server) -> None:
    assert srv.http("GET", "/health") == (200, {"status": "ok"})
    ids = [m.id for m in srv.client.models.list().data]
    assert ids == ["tiny"]


@pytest.mark.parametrize("mtp", [True, False], ids=["mtp", "no-mtp"])
def test_greedy_completion_equals_run(srv: Server, plain: Server, model: Path, mtp: bool) -> None:
    s = srv if mtp else plain
    for p in PROMPTS[:2]:
        want, stats = _run_p(model, p, *(["--spec-draft-n-max", "3"] if mtp else ["--no-mtp"]))  # as srv
        r = s.client.completions.create(model="tiny", prompt=p, max_tokens=N, temperature=0)
        assert r.choices[0].text == want
        assert r.usage.completion_tokens == stats["emitted"]
        t = r.model_extra["timings"]
        assert t["predicted_n"] == stats["emitted"]
        # the server's statistics are the engine's: the same drafts and acceptances as `run` on this prompt
        assert (t["draft_n"], t["draft_n_accepted"]) == (stats["drafted"], stats["accepted"])
        if mtp:
            assert t["draft_n"] > 0 and t["draft_n_accepted"] > 0
        else:
            assert t["draft_n"] == 0


def test_stream_concatenates_to_whole(srv: Server) -> None:
    msgs = [{"role": "user", "content": "Write a function that reverses a list."}]
    whole = srv.client.chat.completions.create(model="tiny", messages=msgs, max_tokens=N, temperature=0)
    chunks = list(srv.client.chat.completions.create(model="tiny", messages=msgs, max_tokens=N, temperature=0,
                                                     stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content and text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == whole.choices[0].finish_reason
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    # completions too, with a stop sequence cutting the stream exactly where it cuts the whole answer
    p = PROMPTS[0]
    full = srv.client.completions.create(model="tiny", prompt=p, max_tokens=N, temperature=0).choices[0].text
    stop = full[len(full) // 2: len(full) // 2 + 3]
    cut = srv.client.completions.create(model="tiny", prompt=p, max_tokens=N, temperature=0, stop=[stop])
    streamed = "".join(c.choices[0].text for c in srv.client.completions.create(
        model="tiny", prompt=p, max_tokens=N, temperature=0, stop=[stop], stream=True) if c.choices)
    assert cut.choices[0].text == streamed == full[: full.index(stop)]
    assert cut.choices[0].finish_reason == "stop"


def test_first_token_makes_an_event_even_when_its_text_is_held_back(srv: Server) -> None:
    """Time to first token must be visible: a first token whose text waits (here: it could begin a stop
    sequence) still makes an event, with empty text; the deltas still add up to the whole answer."""
    p = PROMPTS[1]
    full = srv.client.completions.create(model="tiny", prompt=p, max_tokens=N, temperature=0).choices[0].text
    stop = full + "\u2603"  # the whole answer is a prefix of it: nothing can be released before the end
    chunks = [c for c in srv.client.completions.create(model="tiny", prompt=p, max_tokens=N, temperature=0,
                                                        stop=[stop], stream=True) if c.choices]
    assert chunks[0].choices[0].text == "" and chunks[0].choices[0].finish_reason is None
    assert "".join(c.choices[0].text for c in chunks) == full and len(full) > 0


def test_seeded_sampling_is_reproducible(srv: Server, model: Path) -> None:
    p = PROMPTS[2]
    kw = dict(model="tiny", prompt=p, max_tokens=N, temperature=0.9, top_p=0.95, seed=7,
              extra_body={"top_k": 40})
    a = srv.client.completions.create(**kw).choices[0].text
    b = srv.client.completions.create(**kw).choices[0].text
    c = srv.client.completions.create(**(kw | {"seed": 8})).choices[0].text
    assert a == b
    assert a != c
    want, _ = _run_p(model, p, "--temp", "0.9", "--top-p", "0.95", "--top-k", "40", "--seed", "7")
    assert a == want


def test_parallel_clients_get_what_they_get_alone(srv: Server) -> None:
    reqs = [dict(prompt=p, temperature=0) for p in PROMPTS] + [dict(prompt=PROMPTS[1], temperature=0.8, seed=3)]

    def ask(r: dict) -> tuple[str, int, int]:
        c = srv.client.completions.create(model="tiny", max_tokens=N, **r)
        t = c.model_extra["timings"]  # the same drafts too: batched MTP feeds got each sequence's hidden rows
        return c.choices[0].text, t["draft_n"], t["draft_n_accepted"]

    alone = [ask(r) for r in reqs]
    before = srv.metrics()
    with ThreadPoolExecutor(len(reqs)) as ex:  # 5 clients on 2 slots: some wait in the queue
        together = list(ex.map(ask, reqs))
    assert [t for t, _, _ in together] == [t for t, _, _ in alone]
    # The drafts up to rounding: alone, a slot's head decodes have its own rows; together, both slots' share one
    # batch, which on some CPUs takes other kernels (a repacked Q8_0 head: gemm for groups of rows, gemv for the
    # rest) and can break a near-tie in the head's argmax the other way, and the steps after it part. Hidden rows
    # fed to the wrong sequence would take the acceptance down by far more.
    for (_, n_alone, acc_alone), (_, n_together, acc_together) in zip(alone, together):
        assert abs(n_together - n_alone) <= max(2, 0.15 * n_alone), (n_alone, n_together)
        assert abs(acc_together - acc_alone) <= max(2, 0.15 * acc_alone), (acc_alone, acc_together)
    after = srv.metrics()
    assert after["n_busy_slots_per_decode"] > before["n_busy_slots_per_decode"]  # both slots in one batch
    assert len(set(alone)) == len(alone)


def test_multi_turn_chat_reuses_the_cached_prompt(srv: Server, model: Path) -> None:
    msgs = [{"role": "system", "content": "You write Python."}, {"role": "user", "content": "Sort a list of numbers."}]
    r1 = srv.client.chat.completions.create(model="tiny", messages=msgs, max_tokens=N, temperature=0)
    msgs += [{"role": "assistant", "content": r1.choices[0].message.content},
             {"role": "user", "content": "Now in reverse order."}]
    r2 = srv.client.chat.completions.create(model="tiny", messages=msgs, max_tokens=N, temperature=0)
    t = r2.model_extra["timings"]
    assert t["cache_n"] >= r1.usage.prompt_tokens  # the first turn's prompt was not processed again
    assert t["prompt_n"] == r2.usage.prompt_tokens - t["cache_n"]
    with MTPSession(model, n_draft=3, n_ctx=CTX, n_threads=1) as s:  # the same two turns, in process
        a1 = s.chat(msgs[:2], max_tokens=N).text
        a2 = s.chat(msgs[:2] + [{"role": "assistant", "content": a1}, msgs[3]], max_tokens=N).text
    assert (r1.choices[0].message.content, r2.choices[0].message.content) == (a1, a2)


def test_metrics_match_the_responses(srv: Server) -> None:
    before = srv.metrics()
    rs = [srv.client.completions.create(model="tiny", prompt=p, max_tokens=N, temperature=0) for p in PROMPTS[:3]]
    after = srv.metrics()
    d = {k: after[k] - before.get(k, 0) for k in after}
    drafted = sum(r.model_extra["timings"]["draft_n"] for r in rs)
    accepted = sum(r.model_extra["timings"]["draft_n_accepted"] for r in rs)
    assert d["requests_total"] == 3
    assert d["tokens_predicted_total"] == sum(r.usage.completion_tokens for r in rs)
    assert d["spec_decode_num_draft_tokens_total"] == drafted > 0
    assert d["spec_decode_num_accepted_tokens_total"] == accepted > 0
    per_pos = [d[f'spec_decode_num_accepted_tokens_per_pos_total{{position="{i}"}}'] for i in range(3)]
    assert sum(per_pos) == accepted and per_pos[0] >= per_pos[1] >= per_pos[2]
    assert 0 < after["spec_decode_acceptance_ratio"] <= 1 and after["predicted_tokens_seconds"] > 0


def test_disconnect_stops_generation(srv: Server) -> None:
    n_log = len(srv.log)
    before = srv.metrics()
    # streaming: read a few events, then hang up
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
    c.request("POST", "/v1/completions", json.dumps({"prompt": PROMPTS[3], "max_tokens": 900, "temperature": 0.7,
                                                     "seed": 1, "stream": True}),
              {"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200
    for _ in range(3):
        assert r.readline().startswith(b"data: ")
        r.readline()
    c.sock.shutdown(socket.SHUT_RDWR)
    c.close()
    # not streaming: hang up while the answer is being generated
    s = socket.create_connection(("127.0.0.1", srv.port))
    body = json.dumps({"prompt": PROMPTS[2], "max_tokens": 900, "temperature": 0.7, "seed": 2}).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    time.sleep(0.5)
    s.close()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        m = srv.metrics()
        if m["requests_cancelled_total"] - before.get("requests_cancelled_total", 0) >= 2 \
                and m["requests_processing"] == 0:
            break
        time.sleep(0.2)
    assert m["requests_cancelled_total"] - before.get("requests_cancelled_total", 0) == 2
    assert m["requests_processing"] == 0
    assert m["tokens_predicted_total"] - before["tokens_predicted_total"] < 900  # both stopped early
    assert srv.http("GET", "/health")[0] == 200
    deadline = time.monotonic() + 10  # the request log says so, one line each
    while time.monotonic() < deadline and sum(" 499 | " in x for x in srv.log[n_log:]) < 2:
        time.sleep(0.05)
    assert sum("POST /v1/completions 499 | " in x for x in srv.log[n_log:]) == 2, srv.log[n_log:]


BAD = [  # (body, status, param or code)
    (b"{not json", 400, "invalid_json"),
    (b"[1, 2]", 400, "invalid_json"),
    (b"\xff\xfe", 400, "invalid_json"),
    ({"prompt": "x", "max_tokens": -5}, 400, "max_tokens"),
    ({"prompt": "x", "max_tokens": 10 ** 12}, 400, "max_tokens"),
    ({"prompt": "x", "max_tokens": "many"}, 400, "max_tokens"),
    ({"prompt": "x", "temperature": "hot"}, 400, "temperature"),
    ({"prompt": "x", "temperature": 7}, 400, "temperature"),
    ({"prompt": "x", "top_p": [1]}, 400, "top_p"),
    ({"prompt": "x", "seed": 1.5}, 400, "seed"),
    ({"prompt": "x", "stop": 3}, 400, "stop"),
    ({"prompt": "x", "stream": "yes"}, 400, "stream"),
    ({"prompt": "x", "n": 2}, 400, "n"),
    ({"prompt": "x", "ignore_eos": "yes"}, 400, "ignore_eos"),
    ({"prompt": "x", "presence_penalty": "lots"}, 400, "presence_penalty"),
    ({"prompt": 42}, 400, "prompt"),
    ({"prompt": [1, 2, 99999]}, 400, "prompt"),
    ({"max_tokens": 3}, 400, "prompt"),
    ({"prompt": "x " * 1200}, 400, "prompt"),  # longer than a slot's context
]


@pytest.mark.parametrize("body,status,what", BAD, ids=[f"{i}-{w}" for i, (_, _, w) in enumerate(BAD)])
def test_bad_completion_requests(srv: Server, body, status: int, what: str) -> None:
    code, r = srv.http("POST", "/v1/completions", body)
    assert code == status, r
    assert isinstance(r, dict) and set(r["error"]) >= {"message", "type", "param", "code"}, r
    assert what in (r["error"]["param"], r["error"]["code"]), r
    assert "Traceback" not in r["error"]["message"]


def test_bad_chat_requests_and_routes(srv: Server) -> None:
    cases = [
        ("POST", "/v1/chat/completions", {"messages": "hi"}, 400, "messages"),
        ("POST", "/v1/chat/completions", {}, 400, "messages"),
        ("POST", "/v1/chat/completions", {"messages": [{"role": "robot", "content": "x"}]}, 400, "messages[0].role"),
        ("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": 5}]}, 400, "messages[0].content"),
        ("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
         400, "messages[0].content[0]"),
        ("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "y " * 1200}]}, 400, "messages"),
        ("GET", "/v1/nothing", None, 404, "not_found"),
        ("GET", "/v1/completions", None, 405, "method_not_allowed"),
    ]
    for method, path, body, status, what in cases:
        code, r = srv.http(method, path, body)
        assert code == status, (path, body, r)
        assert what in (r["error"]["param"], r["error"]["code"]), r
    code, r = srv.http("POST", "/v1/completions", b"x", {"Content-Length": str(1 << 30)})
    assert code == 413 and r["error"]["code"] == "request_too_large"
    with pytest.raises(openai.BadRequestError):  # 400, as OpenAI and llama-server answer (a 422 raised another)
        srv.client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], temperature=7)
    with pytest.raises(openai.BadRequestError):
        srv.client.completions.create(model="tiny", prompt="z " * 1200)
    # still serving after all of that
    r2 = srv.client.completions.create(model="tiny", prompt=PROMPTS[0], max_tokens=4, temperature=0)
    assert r2.usage.completion_tokens == 4
    assert srv.metrics()["requests_rejected_total"] >= len(BAD) + len(cases)


def test_api_key(plain: Server) -> None:
    assert plain.http("GET", "/health")[0] == 200  # open, for load balancers
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        code, r = plain.http("POST", "/v1/completions", {"prompt": "x", "max_tokens": 1}, headers)
        assert code == 401 and r["error"]["code"] == "invalid_api_key"
    assert plain.http("GET", "/v1/models", None, {"Authorization": "Bearer sekrit"})[0] == 200
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=plain.url + "/v1", api_key="wrong", max_retries=0).models.list()


def test_sigterm_cancels_in_flight_and_exits_cleanly(model: Path) -> None:
    s = Server(model, "-c", str(CTX))
    got: list[bytes] = []

    def stream() -> None:
        c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
        c.request("POST", "/v1/completions", json.dumps({"prompt": PROMPTS[0], "max_tokens": 900,
                                                         "temperature": 0.7, "stream": True}),
                  {"Content-Type": "application/json"})
        r = c.getresponse()
        while line := r.readline():
            got.append(line)

    t = threading.Thread(target=stream)
    t.start()
    deadline = time.monotonic() + 30
    while len(got) < 6 and time.monotonic() < deadline:
        time.sleep(0.05)
    t0 = time.monotonic()
    rc = s.stop(signal.SIGTERM)
    t.join(10)
    assert rc == 0, "".join(s.log)
    assert time.monotonic() - t0 < 10  # the stream was cancelled, not waited for
    log = "".join(s.log)
    assert "Traceback" not in log and "stopped" in log, log
    assert not t.is_alive()
    events = [x.strip() for x in got if x.strip()]
    assert events[-1] == b"data: [DONE]"
    assert json.loads(events[-2][6:])["error"]["code"] == "shutting_down"


def test_cli_errors(model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    try:
        assert main(["serve", str(model), "--port", str(busy.getsockname()[1])]) == 2
        assert "cannot listen on 127.0.0.1" in capsys.readouterr().err
    finally:
        busy.close()
    assert main(["serve", str(model.parent / "missing.gguf"), "--port", "0"]) == 2
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: ") and "missing.gguf" in last
    bad = model.parent / "bad.jinja"
    bad.write_text("{% for m in messages %}{{ m.content }")
    assert main(["serve", str(model), "--port", "0", "--chat-template-file", str(bad)]) == 2
    assert "bad.jinja" in capsys.readouterr().err
    # a session option llama.cpp would abort on is refused before the port opens: one line, no start-up lines
    assert main(["serve", str(model), "--port", "0", "-b", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --batch-size 2") and err.count("\n") == 1, err


def test_text_stream_stops_and_utf8() -> None:
    from gguf_mtp.server.text import TextStream

    t = TextStream(["END", "\n\n"])
    parts = [t.push(b) for b in (b"hel", b"lo E", b"N", b"x \xc3", b"\xa9 E", b"ND more")]
    assert parts == ["hel", "lo ", "", "ENx ", "é ", ""]  # "E", "EN", " E" and a split "é" wait
    assert t.stopped and t.finish() == "" and "".join(parts) == "hello ENx é "
    t = TextStream(["</s>"])
    out = "".join(t.push(b) for b in (b"a<", b"/", b"b")) + t.finish()
    assert out == "a</b" and not t.stopped


# -- a drop-in for llama-server (issue 27) ------------------------------------------------------------------------

def test_any_model_name_is_served_and_answers_name_ours(srv: Server) -> None:
    """llama-server ignores the request's `model`: clients that send "gpt-4o" (their default) are served."""
    r = srv.client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}],
                                           max_tokens=3, temperature=0)
    assert r.model == "tiny" and r.usage.completion_tokens == 3
    code, c = srv.http("POST", "/v1/completions", {"model": "davinci-002", "prompt": "x", "max_tokens": 2})
    assert code == 200 and c["model"] == "tiny"


def test_out_of_range_is_a_bad_request_for_the_openai_client(srv: Server) -> None:
    for kw in ({"temperature": 7}, {"top_p": 2}, {"max_tokens": -5}):
        with pytest.raises(openai.BadRequestError) as e:
            srv.client.completions.create(model="tiny", prompt="x", **kw)
        assert e.value.status_code == 400
        err = e.value.body
        assert err["type"] == "invalid_request_error" and err["param"] == next(iter(kw)), err


def test_usage_reports_cached_prompt_tokens(srv: Server) -> None:
    msgs = [{"role": "system", "content": "You answer in Python."}, {"role": "user", "content": "Reverse a string."}]
    r1 = srv.client.chat.completions.create(model="tiny", messages=msgs, max_tokens=8, temperature=0)
    msgs += [{"role": "assistant", "content": r1.choices[0].message.content}, {"role": "user", "content": "Again."}]
    r2 = srv.client.chat.completions.create(model="tiny", messages=msgs, max_tokens=8, temperature=0)
    cached = r2.usage.prompt_tokens_details.cached_tokens
    assert cached == r2.model_extra["timings"]["cache_n"] >= r1.usage.prompt_tokens
    msgs += [{"role": "assistant", "content": r2.choices[0].message.content}, {"role": "user", "content": "Once more."}]
    chunks = list(srv.client.chat.completions.create(model="tiny", messages=msgs, max_tokens=4, temperature=0,
                                                     stream=True, stream_options={"include_usage": True}))
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens >= r2.usage.prompt_tokens  # streamed usage too


def test_cors_preflight_and_origin(srv: Server, plain: Server) -> None:
    """llama-server's default: any origin, echoed back with credentials; a preflight needs no API key."""
    for s in (srv, plain):
        c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=30)
        c.request("OPTIONS", "/v1/chat/completions", headers={
            "Origin": "http://app.example", "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type"})
        r = c.getresponse()
        r.read()
        assert r.status == 200
        assert r.getheader("Access-Control-Allow-Origin") == "http://app.example"
        assert r.getheader("Access-Control-Allow-Credentials") == "true"
        assert "POST" in r.getheader("Access-Control-Allow-Methods", "")
        assert "authorization" in r.getheader("Access-Control-Allow-Headers", "").lower()
        c.close()
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
    c.request("GET", "/v1/models", headers={"Origin": "http://app.example"})
    r = c.getresponse()
    r.read()
    assert r.status == 200 and r.getheader("Access-Control-Allow-Origin") == "http://app.example"
    c.close()


def test_llama_server_native_completion(srv: Server) -> None:
    """POST /completion as llama-server's README shows it: prompt, n_predict, stream; content, stop, timings."""
    p = PROMPTS[0]
    want = srv.client.completions.create(model="tiny", prompt=p, max_tokens=12, temperature=0).choices[0].text
    code, r = srv.http("POST", "/completion", {"prompt": p, "n_predict": 12, "temperature": 0})
    assert code == 200, r
    assert r["content"] == want and r["stop"] is True and r["tokens_predicted"] == 12
    assert r["stop_type"] == "limit" and r["truncated"] is False and r["model"] == "tiny"
    assert r["timings"]["predicted_n"] == 12 and r["tokens_evaluated"] == r["timings"]["prompt_n"] + r["tokens_cached"]
    assert r["generation_settings"]["n_predict"] == 12 and r["generation_settings"]["temperature"] == 0
    stop = want[3:6]
    code, r = srv.http("POST", "/completion", {"prompt": p, "n_predict": 12, "temperature": 0, "stop": [stop]})
    assert r["content"] == want[: want.index(stop)] and r["stop_type"] == "word" and r["stopping_word"] == stop
    # streaming: data events with content and stop, the last one with the timings, and no [DONE] (llama-server's)
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
    c.request("POST", "/completion", json.dumps({"prompt": p, "n_predict": 12, "temperature": 0, "stream": True}),
              {"Content-Type": "application/json"})
    events = [e for e in c.getresponse().read().decode().split("\n\n") if e.strip()]
    c.close()
    data = [json.loads(e.removeprefix("data: ")) for e in events]
    assert all(isinstance(d["stop"], bool) for d in data) and [d["stop"] for d in data][-1] is True
    assert "".join(d["content"] for d in data) == want and data[-1]["timings"]["predicted_n"] == 12
    code, r = srv.http("POST", "/completion", {"prompt": p, "n_predict": 0})
    assert code == 400 and r["error"]["param"] == "n_predict"
    # token ids: with return_tokens, and in every streamed event; they are the tokens of the text
    code, r = srv.http("POST", "/completion", {"prompt": p, "n_predict": 12, "temperature": 0, "return_tokens": True})
    streamed = [t for d in data for t in d["tokens"]]
    assert len(r["tokens"]) == 12 and streamed == r["tokens"] and data[-1]["tokens"] == []
    code, d = srv.http("POST", "/detokenize", {"tokens": r["tokens"]})
    assert d["content"] == want


def test_tokenize_detokenize_apply_template(srv: Server, model: Path) -> None:
    text = "def fibonacci(n):\n    return n"
    code, r = srv.http("POST", "/tokenize", {"content": text})
    assert code == 200
    with MTPSession(model, mtp=False, n_ctx=256, n_threads=1) as s:
        assert r["tokens"] == s.model.tokenize(text, add_special=False)
    code, d = srv.http("POST", "/detokenize", {"tokens": r["tokens"]})
    assert code == 200 and d == {"content": text}
    code, w = srv.http("POST", "/tokenize", {"content": text, "with_pieces": True})
    assert [t["id"] for t in w["tokens"]] == r["tokens"] and "".join(t["piece"] for t in w["tokens"]) == text
    code, e = srv.http("POST", "/detokenize", {"tokens": [1, 10 ** 9]})
    assert code == 400 and e["error"]["param"] == "tokens"
    msgs = [{"role": "user", "content": "hi"}]
    code, t = srv.http("POST", "/apply-template", {"messages": msgs})
    assert code == 200 and "hi" in t["prompt"]
    assert t["prompt"].endswith("assistant\n")  # the generation prompt, as /v1/chat/completions renders it


def test_props_slots_and_embeddings(srv: Server) -> None:
    code, p = srv.http("GET", "/props")
    assert code == 200
    assert p["total_slots"] == 2 and p["model_alias"] == "tiny" and p["model_path"].endswith("tiny.gguf")
    assert p["default_generation_settings"]["n_ctx"] == CTX and p["chat_template"]
    assert p["default_generation_settings"]["params"]["temperature"] == pytest.approx(0.8)
    code, sl = srv.http("GET", "/slots")
    assert code == 200 and [x["id"] for x in sl] == [0, 1] and all(x["n_ctx"] == CTX for x in sl)
    assert all(x["speculative"] is True and x["is_processing"] is False for x in sl)
    with pytest.raises(openai.APIStatusError) as e:  # llama-server's answer without --embeddings: 501
        srv.client.embeddings.create(model="tiny", input="hello")
    assert e.value.status_code == 501 and "does not support embeddings" in e.value.message


def test_one_log_line_per_request(srv: Server, plain: Server) -> None:
    n = len(srv.log)
    srv.client.completions.create(model="tiny", prompt=PROMPTS[1], max_tokens=6, temperature=0)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not any("POST /v1/completions 200" in x for x in srv.log[n:]):
        time.sleep(0.05)
    lines = [x for x in srv.log[n:] if "POST /v1/completions" in x]
    assert len(lines) == 1, srv.log[n:]
    assert re.search(r"prompt \d+ tokens \(\d+ cached.*generated 6 in .* t/s, first token [\d.]+ ms \| "
                     r"drafted \d+, accepted \d+", lines[0]), lines[0]
    m = len(plain.log)
    plain.client.completions.create(model="x", prompt=PROMPTS[1], max_tokens=2)
    time.sleep(0.3)
    assert not [x for x in plain.log[m:] if "POST" in x]  # --log-disable


def test_loading_answers_503_then_serves(model: Path) -> None:
    """The port opens before the model loads: llama-server's 503 "Loading model" on every route, then ready.
    The load is held back here by the test (it loads the real model once released)."""
    from starlette.testclient import TestClient

    from gguf_mtp.server.app import LOADING, ServerState, build_app
    from gguf_mtp.server.cors import CorsPolicy
    from gguf_mtp.server.scheduler import Defaults, Scheduler
    from gguf_mtp.server.loader import Loader
    from gguf_mtp.server.metrics import Metrics

    go = threading.Event()

    def load() -> ServerState:
        assert go.wait(60)
        s = MTPSession(model, n_draft=2, n_ctx=CTX, n_threads=1)
        m = Metrics(1)
        return ServerState(session=s, scheduler=Scheduler(s, m), metrics=m, model_name="tiny", defaults=Defaults(),
                           created=0, log_requests=False)

    loader = Loader(load)
    with TestClient(build_app(loader, CorsPolicy())) as c:
        loader.start()
        for method, path in (("GET", "/health"), ("GET", "/v1/models"), ("POST", "/v1/chat/completions"),
                             ("POST", "/completion"), ("GET", "/props")):
            r = c.request(method, path, json={"prompt": "x"} if method == "POST" else None)
            assert r.status_code == 503 and r.json() == LOADING, (path, r.text)
        assert c.options("/v1/completions", headers={"Origin": "http://a.b",
                                                     "Access-Control-Request-Method": "POST"}).status_code == 200
        go.set()
        assert loader.done.wait(60) and loader.error is None
        assert c.get("/health").json() == {"status": "ok"}
        r = c.post("/v1/completions", json={"prompt": PROMPTS[0], "max_tokens": 3, "temperature": 0})
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3
    assert loader.state is not None
    loader.state.session.close()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_while_loading_exits_cleanly(model: Path, sig: int) -> None:
    """A signal as soon as the port is open (the load under way, or just done: both must end the same way)."""
    s = Server(model, "-c", str(CTX), ready=False)
    assert any("answers 503 until it is loaded" in x for x in s.log), s.log
    t0 = time.monotonic()
    rc = s.stop(sig, timeout=30)
    assert time.monotonic() - t0 < 10
    deadline = time.monotonic() + 10  # the reader thread has the last lines once it has seen the pipe close
    while time.monotonic() < deadline and "stopped" not in "".join(s.log):
        time.sleep(0.05)
    log = "".join(s.log)
    assert rc == 0 and "Traceback" not in log and "Warning" not in log and log.rstrip().endswith("stopped"), log


#: the library's serve() on a session its caller loaded (and keeps: it answers again once serve() returned)
LIBRARY_SERVE = """
import sys
from gguf_mtp.runtime import MTPSession, SamplerConfig
from gguf_mtp.server import serve

with MTPSession(sys.argv[1], n_draft=2, n_ctx=1024, n_threads=1) as s:
    serve(s, "127.0.0.1", 0, name="lib", sampling=SamplerConfig(temp=0.0, top_k=7), n_predict=5)
    print("after serve:", len(s.generate("def f", max_tokens=2).tokens), "tokens", file=sys.stderr, flush=True)
"""


def test_library_serve_takes_a_loaded_session(model: Path) -> None:
    """gguf_mtp.server.serve with an MTPSession: the request defaults and the name it was given, exit 0 on
    SIGTERM as the command, and the session is its caller's (still open after serve returns)."""
    s = Server(model, cmd=[sys.executable, "-c", LIBRARY_SERVE, str(model)])
    # run's MTP: line (MTPSession.describe_mtp): the rollback, then ", drafts chained in one decode" where the library
    # chains them (the proposed mtp-draft-chain patch), then ", last draft verified from the device" where it has the
    # device-draft-tokens patch
    dev = ", last draft verified from the device" if patches.device_tokens() else ""
    feed = "(, first draft decoded behind the verify)?"  # GGUF_MTP_DEVICE_FEED=1 (experimental)
    line = rf"gguf-mtp serve: lib \(MTP bundled, draft 2, rollback [^,]+(, drafts chained in one decode)?{dev}{feed}\), "
    assert any(re.search(line + r"1 slot\(s\)", x) for x in s.log), s.log
    code, r = s.http("POST", "/completion", {"prompt": PROMPTS[0]})
    assert code == 200 and r["tokens_predicted"] == 5 and r["model"] == "lib", r
    settings = r["generation_settings"]
    assert settings["n_predict"] == 5 and settings["temperature"] == 0 and settings["top_k"] == 7, settings
    rc = s.stop(signal.SIGTERM)
    deadline = time.monotonic() + 10  # the reader thread has the last lines once it has seen the pipe close
    while time.monotonic() < deadline and "after serve" not in "".join(s.log):
        time.sleep(0.05)
    log = "".join(s.log)
    assert rc == 0 and "Traceback" not in log and re.search(r"stopped\nafter serve: \d+ tokens", log), log


def test_a_model_llama_cpp_refuses_ends_serve_after_the_port_opened(model: Path, tmp_path: Path) -> None:
    """The header passes the checks made before the port opens; llama.cpp then refuses a tensor's shape: the
    load thread's error ends the server with one line and exit status 2."""
    from gguf import GGUFReader

    bad = tmp_path / "badshape.gguf"
    bad.write_bytes(model.read_bytes())
    r = GGUFReader(bad, "r+")
    field = next(v for k, v in r.fields.items() if k.endswith(".feed_forward_length"))
    field.parts[-1][0] += 8
    del r
    p = subprocess.run([sys.executable, "-m", "gguf_mtp_cli.main", "serve", str(bad), "--port", "0", "-t", "1"],
                       capture_output=True, text=True, timeout=120)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert any("answers 503 until it is loaded" in x for x in lines), p.stderr
    assert lines[-1].startswith("error: ") and "wrong shape" in lines[-1], p.stderr


def test_cors_policies() -> None:
    """--cors-origins as llama-server reads it: * (the Origin echoed, with credentials), localhost, or a list."""
    from gguf_mtp.server.cors import CorsPolicy

    anyone = CorsPolicy()
    assert anyone.allow_origin("https://x.example") == "https://x.example" and anyone.allow_origin("") is None
    assert CorsPolicy(credentials=False).allow_origin("https://x.example") == "*"
    local = CorsPolicy("localhost")
    assert local.allow_origin("http://localhost:3000") == "http://localhost:3000"
    assert local.allow_origin("http://127.0.0.1:5173") == "http://127.0.0.1:5173"
    assert local.allow_origin("http://[::1]:8000") == "http://[::1]:8000"
    assert local.allow_origin("https://evil.example") is None and local.allow_origin("http://localhost.evil") is None
    assert local.allow_origin("http://[bad") is None
    listed = CorsPolicy("https://a.example, https://b.example/")
    assert listed.allow_origin("https://b.example") == "https://b.example"
    assert listed.allow_origin("https://c.example") is None
