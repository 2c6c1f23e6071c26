"""The live view against a hostile page and broken data, over real HTTP: forged ``Host``
headers (DNS rebinding), the token of a server not on loopback, a store with a corrupt
row, run ids holding ``#`` and ``?``, and a stream resumed from its last event id."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import subprocess
import urllib.parse
from pathlib import Path
from typing import Any

import httpx
import pytest

from innerloop import Harness, HarnessParams
from innerloop.checkpoint import open_checkpointer
from innerloop.testing import ScriptedProvider, reply
from innerloop.ui import Catalog, UIServer
from innerloop.ui._catalog import _counts

from .test_app import _sse


def _store(tmp_path: Path, *run_ids: str) -> str:
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    for run_id in run_ids:
        harness = Harness(
            HarnessParams(model="scripted:m"), [ScriptedProvider([reply("done")])], checkpointer=db
        )
        harness.start("go", run_id=run_id).run_sync()
        assert harness.checkpointer is not None
        harness.checkpointer.close()
    return db


def node_api(location: str, calls: list[str]) -> list[str]:
    """What the page's API helper makes of each of ``calls`` (JS expressions) on a page
    at ``location`` (node runs the helper as the page defines it)."""
    from innerloop.ui._app import STATIC

    script = (STATIC / "app.js").read_text()
    start = script.index("// an API URL")
    helper = script[start : script.index("\n}\n", start) + 3]
    program = (
        f"const window = {{location: new URL({json.dumps(location)})}};\n"
        'const TOKEN = new URL(window.location).searchParams.get("token");\n'
        f"{helper}\n" + "".join(f"console.log({call});\n" for call in calls)
    )
    node = subprocess.run(["node", "-e", program], capture_output=True, text=True, check=True)
    return node.stdout.splitlines()


class TestHosts:
    @pytest.mark.parametrize("host", ["evil.example", "evil.example:{port}", "127.0.0.1.nip.io"])
    def test_a_forged_host_is_refused(self, tmp_path: Path, serve: Any, host: str) -> None:
        server = serve(Catalog(tmp_path))
        forged = host.format(port=server.port)
        for path in ("", "api/runs", "api/events/log:x.jsonl:1"):
            answer = httpx.get(server.url + path, headers={"Host": forged}, timeout=10)
            assert answer.status_code == 403
            assert answer.text == (
                f"host {forged!r} refused: the live view answers only 127.0.0.1, [::1], "
                "localhost (a page elsewhere may not read it); open it by one of those names\n"
            )

    @pytest.mark.parametrize("name", ["127.0.0.1", "localhost", "LOCALHOST"])
    def test_loopback_names_are_answered(self, tmp_path: Path, serve: Any, name: str) -> None:
        server = serve(Catalog(tmp_path))
        for host in (name, f"{name}:{server.port}"):
            answer = httpx.get(server.url + "api/runs", headers={"Host": host}, timeout=10)
            assert answer.status_code == 200
            assert answer.json() == {"runs": [], "offset": 0, "total": 0}

    def test_off_loopback_a_token_is_wanted(
        self, tmp_path: Path, capfd: pytest.CaptureFixture[str]
    ) -> None:
        """Bound to an address not on loopback (here every address), the server warns in
        one line and answers only requests carrying the per-launch token of its URL."""
        with UIServer(Catalog(tmp_path), host="0.0.0.0", port=0) as server:
            assert capfd.readouterr().err == (
                "innerloop ui: warning: listening on 0.0.0.0, not loopback: anyone who can "
                "reach it and has the URL's token can read the runs\n"
            )
            assert server.token is not None
            assert len(server.token) >= 24
            assert server.url == f"http://0.0.0.0:{server.port}/?token={server.token}"
            base = f"http://127.0.0.1:{server.port}/"
            ok = httpx.get(base + "api/runs", params={"token": server.token}, timeout=10)
            assert ok.status_code == 200
            for params in ({}, {"token": "wrong"}):
                refused = httpx.get(base + "api/runs", params=params, timeout=10)
                assert refused.status_code == 403
                assert refused.text == (
                    "token missing or wrong: open the URL the server printed (it holds "
                    "?token=...)\n"
                )
            assert httpx.get(base + "static/app.js", timeout=10).status_code == 200
            # the host it was given is answered too
            named = httpx.get(
                base, params={"token": server.token}, headers={"Host": "0.0.0.0"}, timeout=10
            )
            assert named.status_code == 200

    def test_the_page_keeps_the_token_for_its_calls(self) -> None:
        """The page's every API call goes through one helper that adds the token and
        encodes the run id whole (node runs the helper as the page defines it)."""
        from innerloop.ui._app import STATIC

        script = (STATIC / "app.js").read_text()
        calls = ['api("/api/run/", "db:a#b?c/d")', 'api("/api/runs")']
        assert node_api("http://127.0.0.1:1/?token=T0K&run=x", calls) == [
            "http://127.0.0.1:1/api/run/db%3Aa%23b%3Fc%2Fd?token=T0K",
            "http://127.0.0.1:1/api/runs?token=T0K",
        ]
        calls = [line for line in script.splitlines() if '"/api/' in line]
        assert calls
        assert all("api(" in line for line in calls)


class TestStore:
    def test_a_corrupt_row_is_its_runs_one_line_error(self, tmp_path: Path, serve: Any) -> None:
        db = _store(tmp_path, "good", "bad")
        with contextlib.closing(sqlite3.connect(tmp_path / "runs.db")) as conn, conn:
            conn.execute("UPDATE innerloop_checkpoints SET data = 'garbage' WHERE run_id = 'bad'")
        server = serve(Catalog(store=open_checkpointer(db)))
        bad = httpx.get(server.url + "api/run/db:bad", timeout=10)
        assert bad.status_code == 200
        error = bad.json()["error"]
        assert error.startswith("run 'bad' cannot be read from the store: checkpoint ")
        assert "\n" not in error
        assert httpx.get(server.url + "api/run/db:good", timeout=10).json()["error"] is None
        listed = httpx.get(server.url + "api/runs", timeout=10).json()["runs"]
        assert sorted(r["id"] for r in listed) == ["db:bad", "db:good"]
        assert httpx.get(server.url + "api/diagram/db:bad", timeout=10).status_code == 200
        assert _sse(server.url + "api/events/db:bad")[-1] == ("end", {"status": "finished"})

    def test_run_ids_holding_hash_and_question_mark_open(self, tmp_path: Path, serve: Any) -> None:
        db = _store(tmp_path, "a#b?c")
        server = serve(Catalog(store=open_checkpointer(db)))
        quoted = urllib.parse.quote("db:a#b?c", safe="")
        detail = httpx.get(server.url + "api/run/" + quoted, timeout=10).json()
        assert (detail["id"], detail["status"]) == ("db:a#b?c", "finished")
        assert server.run_url("db:a#b?c").endswith("?run=db:a%23b%3Fc")


class TestIncremental:
    def test_a_stream_resumes_after_its_last_event_id(self, tmp_path: Path, serve: Any) -> None:
        """A client coming back with ``Last-Event-ID`` gets only the rows added since."""
        header = json.dumps({"type": "log_header", "schema": "innerloop.events/1"})
        steps = [
            json.dumps(
                {
                    "type": "transition",
                    "source": f"s{i}",
                    "target": f"s{i + 1}",
                    "guard": None,
                    "t": float(i),
                }
            )
            for i in range(5)
        ]
        path = tmp_path / "run.jsonl"
        path.write_text("\n".join([header, *steps[:3]]) + "\n")
        catalog = Catalog(tmp_path)
        key, first = catalog.update("log:run.jsonl:1", None)
        assert (key, first["append"], len(first["transitions"])) == (
            "1:3.0.0.0.0.3.0.3751981041",
            False,
            3,
        )
        with path.open("a") as f:
            f.write("\n".join(steps[3:]) + "\n")
        server = serve(catalog)
        url = server.url + "api/events/log:run.jsonl:1"
        with httpx.stream("GET", url, headers={"Last-Event-ID": key}, timeout=10) as response:
            lines = iter(response.iter_lines())
            assert next(lines) == "id: 1:5.0.0.0.0.5.0.3751981041"
            assert next(lines) == "event: run"
            sent = json.loads(next(lines).removeprefix("data: "))
        assert sent["append"] is True
        assert [t["source"] for t in sent["transitions"]] == ["s3", "s4"]
        assert sent["totals"]["transitions"] == 5
        # an id of another run, or from the future, gets the latest page again
        assert _counts("2:1.0.0.0.0", "1:5.0.0.0.0.5.0.3751981041") is None
        assert _counts("1:9.0.0.0.0", "1:5.0.0.0.0.5.0.3751981041") is None

    def test_long_lists_are_paged(self, tmp_path: Path, serve: Any) -> None:
        header = json.dumps({"type": "log_header", "schema": "innerloop.events/1"})
        steps = [
            json.dumps({"type": "transition", "source": "a", "target": "b", "guard": None})
            for _ in range(1200)
        ]
        (tmp_path / "long.jsonl").write_text("\n".join([header, *steps]) + "\n")
        server = serve(Catalog(tmp_path))
        detail = httpx.get(server.url + "api/run/log:long.jsonl:1", timeout=10).json()
        assert (len(detail["transitions"]), detail["totals"]["transitions"]) == (500, 1200)
        page = httpx.get(
            server.url + "api/run/log:long.jsonl:1",
            params={"list": "transitions", "offset": 1190, "limit": 50},
            timeout=10,
        ).json()
        assert (page["total"], page["offset"], len(page["transitions"])) == (1200, 1190, 10)
        runs = httpx.get(server.url + "api/runs", params={"offset": 1}, timeout=10).json()
        assert (runs["runs"], runs["total"]) == ([], 1)
        bad = httpx.get(server.url + "api/runs", params={"limit": "-1"}, timeout=10)
        assert (bad.status_code, bad.json()["error"]) == (
            400,
            "?limit= wants a whole number from 0 up, not '-1'",
        )


class TestSecurityHeaders:
    @pytest.mark.parametrize(
        "path", ["", "static/app.js", "static/style.css", "api/runs", "evals", "api/run/zzz"]
    )
    def test_every_answer_carries_them(self, tmp_path: Path, serve: Any, path: str) -> None:
        """The page, its files, its JSON, the report pages and a 404 each say nosniff, no
        framing, and a policy allowing the page's own scripts, styles and API only."""
        server = serve(Catalog(tmp_path))
        answer = httpx.get(server.url + path, timeout=10)
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert answer.headers["x-frame-options"] == "DENY"
        assert answer.headers["content-security-policy"] == (
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
            "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
        )

    def test_a_refusal_carries_them_too(self, tmp_path: Path, serve: Any) -> None:
        server = serve(Catalog(tmp_path))
        answer = httpx.get(server.url, headers={"host": "evil.example"}, timeout=10)
        assert answer.status_code == 403
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert "frame-ancestors 'none'" in answer.headers["content-security-policy"]

    def test_the_pages_hold_no_inline_script_or_style(self) -> None:
        """What the policy refuses is not in the page: its script and style sheet are
        files, and no page of the server writes a style or script element inline."""
        from innerloop.ui import _reports
        from innerloop.ui._app import STATIC

        page = (STATIC / "index.html").read_text()
        assert "<style" not in page
        assert page.count("<script") == page.count('<script src="/static/') == 1
        assert " style=" not in page
        assert "<style" not in Path(_reports.__file__).read_text()
