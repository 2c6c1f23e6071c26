"""Answering from the page, over real HTTP: what a suspended run waits on, the answer that
lands in ``harness.resume`` bound to the question's id, and each refusal (another site's
request, no page key, no token, a wrong id, a question answered already, a run no store
keeps, a server without a harness)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from innerloop import EventLog, Harness, HarnessParams
from innerloop.checkpoint import open_checkpointer
from innerloop.testing import ScriptedProvider, reply
from innerloop.ui import Catalog, UIServer
from innerloop.ui._app import PAGE_HEADER

from .answering import ASKED, LOG, RUN, RUN_ID, TASK, answering_harness, suspended_run


@pytest.fixture
def waiting(tmp_path: Path) -> tuple[Path, str, Any]:
    """A runs folder whose log holds the run waiting on a fan-out branch's approval, the
    store keeping it, and the run's machine."""
    db, spec = suspended_run(tmp_path)
    return tmp_path, db, spec


@pytest.fixture
def answering(waiting: tuple[Path, str, Any]) -> Iterator[UIServer]:
    """The live view of that folder, answering through the run's harness."""
    root, db, spec = waiting
    harness = answering_harness(db)
    with UIServer(Catalog(root, machines=[spec]), port=0, harness=harness) as server:
        yield server
    assert harness.checkpointer is not None
    harness.checkpointer.close()


def page_key(server: UIServer) -> str:
    """The key the server wrote into its page (what the page's answers carry)."""
    page = httpx.get(server.url, timeout=10).text
    found = re.search(r'<meta name="innerloop-page" content="([^"]+)">', page)
    assert found is not None
    return found.group(1)


def post(
    server: UIServer,
    body: Any,
    *,
    run: str = RUN,
    key: str | None = None,
    headers: dict[str, str] | None = None,
    params: dict[str, str] | None = None,
) -> httpx.Response:
    """POST an answer as the page does (its key, JSON), with ``headers`` on top."""
    sent = {"content-type": "application/json", **(headers or {})}
    if key is not None:
        sent[PAGE_HEADER] = key
    url = server.url.split("?")[0] + "api/answer/" + run.replace("#", "%23")
    return httpx.post(url, content=json.dumps(body), headers=sent, params=params, timeout=20)


def approve(server: UIServer, headers: dict[str, str] | None = None) -> httpx.Response:
    """Approve the question the run waits on, with the page's key."""
    return post(server, {"interrupt": ASKED, "answer": True}, key=page_key(server), headers=headers)


def _detail(server: UIServer, **params: str) -> Any:
    return httpx.get(server.url + f"api/run/{RUN}", params=params, timeout=10).json()


class TestWhatItWaitsOn:
    def test_the_run_shows_its_question(self, answering: UIServer) -> None:
        """The suspended run's detail: the question's id, kind, the state and the fan-out
        branch that asks, the call with its tool and arguments; answerable from here."""
        detail = _detail(answering)
        assert (detail["status"], detail["interrupt"]) == ("suspended", ASKED)
        assert detail["interrupts"] == [
            {
                "id": ASKED,
                "kind": "approval",
                "state": "survey",
                "path": "scout#2",
                "calls": [
                    {
                        "id": "call_buy",
                        "tool": "buy_report",
                        "arguments": {"title": "EHPA market report 2025"},
                    }
                ],
                "payload": {
                    "calls": [
                        {
                            "id": "call_buy",
                            "name": "buy_report",
                            "input": {"title": "EHPA market report 2025"},
                        }
                    ]
                },
            }
        ]
        assert (detail["answerable"], detail["answer_note"]) == (True, None)
        assert detail["prompt"] == TASK
        branch = _detail(answering, child="scout#2")
        assert [a["id"] for a in branch["interrupts"]] == [ASKED]  # the run's id: answerable
        assert _detail(answering, child="scout#1")["interrupts"] == []

    def test_a_stored_run_shows_it_too(self, waiting: tuple[Path, str, Any], serve: Any) -> None:
        """From the checkpoint store: the same question, the branch that asks, the call."""
        _, db, spec = waiting
        server = serve(Catalog(store=open_checkpointer(db), machines=[spec]))
        detail = httpx.get(server.url + f"api/run/db:{RUN_ID}", timeout=10).json()
        assert detail["status"] == "suspended"
        (asked,) = detail["interrupts"]
        assert (asked["id"], asked["path"], asked["calls"][0]["tool"]) == (
            ASKED,
            "scout#2",
            "buy_report",
        )
        assert detail["answerable"] is False  # this server has no harness: it says how
        assert detail["answer_note"].startswith("this live view answers no questions")
        (row,) = httpx.get(server.url + "api/runs", timeout=10).json()["runs"]
        assert (row["machine"], row["prompt"], row["status"]) == ("research", TASK, "suspended")


class TestTheAnswer:
    def test_approved_from_the_page_the_run_goes_on_in_one_row(self, answering: UIServer) -> None:
        """202; the run goes on to its end through ``harness.resume`` (the branch runs
        its paid call), its events appended to its log: still one run, one row, its
        children's tree whole, the answer among its messages."""
        answer = approve(answering)
        assert (answer.status_code, answer.json()) == (
            202,
            {"run": RUN, "interrupt": ASKED, "resumed": True},
        )
        assert answering.answers is not None
        assert answering.answers.wait(30)
        runs = httpx.get(answering.url + "api/runs", timeout=10).json()["runs"]
        assert [(r["id"], r["status"], r["exit_reason"]) for r in runs] == [
            (RUN, "finished", "model_complete")
        ]
        detail = _detail(answering)
        assert detail["resumptions"] == 1
        assert [(c["path"], c["status"]) for c in detail["children"]] == [
            ("scout#1", "finished"),
            ("scout#2", "finished"),
        ]
        said = [(m["role"], m["text"]) for m in detail["messages"]]
        assert ("answer", f"{ASKED}: true") in said
        assert said[-1] == ("assistant", "Notes: sales fell 21% in 2024; Poland fell most (-40%).")
        branch = _detail(answering, child="scout#2")
        assert [t["name"] for t in branch["tools"]] == ["buy_report"]  # approved: it ran
        assert answering.catalog.runs_dir is not None
        lines = (answering.catalog.runs_dir / LOG).read_text().splitlines()[1:]
        seqs = [json.loads(line)["seq"] for line in lines]
        assert seqs == list(range(len(seqs)))  # the appended lines count on

    def test_a_typed_answer_lands_as_the_answer(self, answering: UIServer) -> None:
        """A typed answer is the answer as given (here a per-call verdict: deny it)."""
        key = page_key(answering)
        answer = post(answering, {"interrupt": ASKED, "answer": {"call_buy": False}}, key=key)
        assert answer.status_code == 202
        assert answering.answers is not None
        assert answering.answers.wait(30)
        branch = _detail(answering, child="scout#2")
        assert [(t["name"], t["outcome"]) for t in branch["tools"]] == [("buy_report", "error")]
        assert ("answer", f'{ASKED}: {{"call_buy": false}}') in [
            (m["role"], m["text"]) for m in _detail(answering)["messages"]
        ]


class TestRefusals:
    def test_another_id_is_refused(self, answering: UIServer) -> None:
        """An answer for a question the run does not wait on: 409, nothing answered."""
        refused = post(
            answering, {"interrupt": "survey:9", "answer": True}, key=page_key(answering)
        )
        assert refused.status_code == 409
        assert (
            "the answer is for interrupt 'survey:9', which it no longer waits on"
            in (refused.json()["error"])
        )
        assert _detail(answering)["status"] == "suspended"

    def test_a_question_answered_already_is_refused(
        self, answering: UIServer, waiting: tuple[Path, str, Any]
    ) -> None:
        """Answered elsewhere first (another process took the store's claim, as ``innerloop
        runs resume`` does): the page's answer is 409, saying so; and once the run went on
        after the page's own answer, a second one is too late."""
        _, db, _ = waiting
        store = open_checkpointer(db)
        try:
            assert store.claim(RUN_ID, ASKED)
        finally:
            store.close()
        key = page_key(answering)
        refused = post(answering, {"interrupt": ASKED, "answer": True}, key=key)
        assert refused.status_code == 409
        assert (
            f"its interrupt {ASKED!r} was already answered by another resume"
            in (refused.json()["error"])
        )

    def test_a_second_answer_comes_too_late(self, answering: UIServer) -> None:
        key = page_key(answering)
        assert post(answering, {"interrupt": ASKED, "answer": True}, key=key).status_code == 202
        assert answering.answers is not None
        assert answering.answers.wait(30)
        again = post(answering, {"interrupt": ASKED, "answer": False}, key=key)
        assert again.status_code == 409
        assert f"the answer for interrupt {ASKED!r} comes too late" in again.json()["error"]

    @pytest.mark.parametrize(
        ("headers", "says"),
        [
            ({"origin": "http://evil.example"}, "origin 'http://evil.example' refused"),
            ({"sec-fetch-site": "cross-site"}, "a cross-site request refused"),
            ({"sec-fetch-site": "same-site"}, "a same-site request refused"),
        ],
    )
    def test_another_sites_request_is_refused(
        self, answering: UIServer, headers: dict[str, str], says: str
    ) -> None:
        """A browser's request from another page (its Origin, its Sec-Fetch-Site): 403,
        even with the page's key."""
        refused = approve(answering, headers)
        assert refused.status_code == 403
        assert refused.text.startswith(says)
        assert refused.headers["x-frame-options"] == "DENY"
        assert _detail(answering)["status"] == "suspended"

    def test_a_forged_host_is_refused(self, answering: UIServer) -> None:
        """A page elsewhere that rebinds its name to the server (DNS rebinding) cannot
        answer: its Host is refused first, as for every request."""
        refused = approve(answering, {"host": "evil.example"})
        assert refused.status_code == 403
        assert refused.text.startswith("host 'evil.example' refused")
        assert _detail(answering)["status"] == "suspended"

    @pytest.mark.parametrize("key", [None, "not-the-key"])
    def test_without_the_pages_key_it_is_refused(
        self, answering: UIServer, key: str | None
    ) -> None:
        refused = post(answering, {"interrupt": ASKED, "answer": True}, key=key)
        assert refused.status_code == 403
        assert refused.text == (
            f"the page's key is missing or wrong (header {PAGE_HEADER}): answer from the live "
            "view's page (reload it: a key is good for one launch of the server)\n"
        )

    def test_the_same_origin_with_the_key_is_answered(self, answering: UIServer) -> None:
        """What the page's own fetch sends (its origin, same-origin) is taken."""
        own = answering.url.rstrip("/")
        headers = {"origin": own, "sec-fetch-site": "same-origin"}
        assert approve(answering, headers).status_code == 202
        assert answering.answers is not None
        assert answering.answers.wait(30)

    @pytest.mark.parametrize(
        ("body", "says"),
        [
            ({"answer": True}, 'the body is {"interrupt": ID, "answer": VALUE}'),
            ({"interrupt": ASKED}, 'the body has no "answer"'),
        ],
    )
    def test_a_malformed_body_is_refused(self, answering: UIServer, body: Any, says: str) -> None:
        refused = post(answering, body, key=page_key(answering))
        assert refused.status_code == 400
        assert refused.json()["error"].startswith(says)

    def test_off_loopback_the_token_is_wanted_too(self, waiting: tuple[Path, str, Any]) -> None:
        """Off loopback, an answer without the URL's token is refused before anything."""
        root, db, spec = waiting
        harness = answering_harness(db)
        with UIServer(
            Catalog(root, machines=[spec]), host="0.0.0.0", port=0, harness=harness
        ) as server:
            base = f"http://127.0.0.1:{server.port}/"
            page = httpx.get(base, params={"token": server.token}, timeout=10).text
            found = re.search(r'<meta name="innerloop-page" content="([^"]+)">', page)
            assert found is not None
            sent = {"content-type": "application/json", PAGE_HEADER: found.group(1)}
            body = json.dumps({"interrupt": ASKED, "answer": True})
            refused = httpx.post(base + f"api/answer/{RUN}", content=body, headers=sent, timeout=10)
            assert refused.status_code == 403
            assert refused.text.startswith("token missing or wrong")
        assert harness.checkpointer is not None
        harness.checkpointer.close()

    def test_without_a_harness_it_says_how(
        self, waiting: tuple[Path, str, Any], serve: Any
    ) -> None:
        root, _, spec = waiting
        server = serve(Catalog(root, machines=[spec]))
        refused = approve(server)
        assert refused.status_code == 409
        assert refused.json()["error"].startswith(
            "this live view answers no questions: serve it with the run's harness"
        )

    def test_a_run_no_store_keeps_cannot_be_answered_here(
        self, tmp_path: Path, waiting: tuple[Path, str, Any]
    ) -> None:
        """A log's run that records no store run id: not answerable, saying why."""
        _, db, _ = waiting
        folder = tmp_path / "plain"
        harness = Harness(HarnessParams(model="scripted:m"), [ScriptedProvider([reply("hi")])])
        with EventLog(folder / "plain.jsonl") as log:
            for event in harness.start("hello").iter_sync():
                log.write(event)
        answers = answering_harness(db)
        with UIServer(Catalog(folder), port=0, harness=answers) as server:
            refused = post(
                server,
                {"interrupt": "x:1", "answer": True},
                run="log:plain.jsonl:1",
                key=page_key(server),
            )
        assert refused.status_code == 409
        assert "is kept in no checkpoint store" in refused.json()["error"]
        assert answers.checkpointer is not None
        answers.checkpointer.close()


def test_an_appended_log_counts_on(tmp_path: Path) -> None:
    """``EventLog(append=True)`` goes on with an existing log: no second header, its
    ``seq`` counting on; a file that is no log is
    refused (nothing written)."""
    from innerloop.events import Transition

    path = tmp_path / "a.jsonl"
    with EventLog(path, {"command": "test"}) as log:
        log.write(Transition(source="idle", target="assemble", guard=None))
    header = json.loads(path.read_text().splitlines()[0])
    assert isinstance(header["started"], float)
    with EventLog(path, append=True) as log:
        log.write(Transition(source="assemble", target="normalize", guard=None))
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line.get("seq") for line in lines] == [None, 0, 1]
    assert isinstance(lines[2]["t"], float)  # counted from the header's started
    other = tmp_path / "other.jsonl"
    other.write_text('{"type": "note"}\n')
    with pytest.raises(ValueError, match="not an innerloop event log"):
        EventLog(other, append=True)
    assert other.read_text() == '{"type": "note"}\n'
