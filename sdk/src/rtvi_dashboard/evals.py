"""`rtvi-dashboard-eval`: a CI step's two commands around `pipecat eval` (standard library only).

    # the bots under test stream their calls, tagged, while the suite runs:
    RTVI_DASHBOARD_EVAL_RUN=ci-$BUILD RTVI_DASHBOARD_DEPLOYMENT=v42 pipecat eval ...
    rtvi-dashboard-eval upload results.jsonl --agent support --deployment v42 --run ci-$BUILD
    rtvi-dashboard-eval gate --agent support --candidate v42            # against the active deployment

`upload` sends the run's results.jsonl to the dashboard (POST /api/evals/runs/, a private API key with
"write"), each record naming the call its attempt made (`eval_session_id`: run it where `pipecat eval`
ran); `gate` asks whether the candidate is worse than the baseline (GET /api/evals/<agent>/gate/, "read")
and exits 1 when it is, 2 when the dashboard cannot tell yet (no runs of one side; `--allow-insufficient`
makes that 0), 0 when it is not worse, 3 when the dashboard could not be asked. The dashboard's address is
`--url`, else RTVI_DASHBOARD_API_URL, else RTVI_DASHBOARD_URL's (ws:// read as http://, wss:// as
https://); the key is `--key`, else RTVI_DASHBOARD_API_KEY.
"""

import argparse
import json
import os
import sys
import urllib.error
import urllib.request
import uuid
from urllib.parse import quote, urlencode

PASS, WORSE, INSUFFICIENT, UNREACHABLE = 0, 1, 2, 3
TIMEOUT = 60.0
SESSION_FIELD = "rtvi_dashboard_session"  # what `upload` adds to each record: the call its attempt made


def eval_session_id(log_path: str) -> str:
    """The dashboard session id of the run whose log is `log_path` (a results.jsonl record's `artifacts.log`).

    `pipecat eval suite` (Pipecat 1.14, pipecat/evals/suite.py `_spawn_bot`) starts one bot process per run
    and attempt, its output going to that run's own log file, whose path the run's record names: the bot
    and `upload` both derive the call's id from it, so each result opens exactly the call it made."""
    return "eval-" + uuid.uuid5(uuid.NAMESPACE_URL, "file://" + os.path.realpath(log_path)).hex


def own_eval_session_id() -> str | None:
    """This bot's session id under `pipecat eval suite`: from its output's file, when that is a run's log
    (Linux's /proc; a bot run otherwise, or elsewhere, has none and keeps its own id)."""
    try:
        out = os.readlink("/proc/self/fd/1")
    except OSError:
        return None
    return eval_session_id(out) if out.endswith(".log") and os.path.isfile(out) else None


def with_sessions(data: bytes) -> bytes:
    """The results.jsonl with each record's call named (SESSION_FIELD), from its log's path as written."""
    lines = []
    for line in data.decode("utf-8").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            lines.append(line)  # the dashboard says which line is wrong
            continue
        log = (record.get("artifacts") or {}).get("log") if isinstance(record, dict) else None
        if isinstance(log, str) and log:
            record[SESSION_FIELD] = eval_session_id(log)
        lines.append(json.dumps(record))
    return ("\n".join(lines) + "\n").encode()


def base_url(given: str | None) -> str:
    url = given or os.environ.get("RTVI_DASHBOARD_API_URL") or os.environ.get("RTVI_DASHBOARD_URL", "")
    url = url.rstrip("/")
    if url.startswith("ws://"):
        url = "http://" + url[5:]
    elif url.startswith("wss://"):
        url = "https://" + url[6:]
    if not url.startswith(("http://", "https://")):
        raise SystemExit(
            f"rtvi-dashboard-eval: give the dashboard's address (--url or RTVI_DASHBOARD_API_URL), not {url!r}"
        )
    return url


def _call(method: str, url: str, key: str, body: bytes | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=body, method=method)
    request.add_header("Authorization", f"Bearer {key}")
    request.add_header("Accept", "application/json")
    if body is not None:
        request.add_header("Content-Type", "application/x-ndjson")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as answer:
            return answer.status, json.loads(answer.read() or b"{}")
    except urllib.error.HTTPError as error:
        text = error.read()
        try:
            return error.code, json.loads(text)
        except ValueError:
            return error.code, {"error": text[:300].decode("utf-8", "replace")}


def upload(args) -> int:
    with open(args.results, "rb") as f:
        data = with_sessions(f.read())
    query = {"agent": args.agent, "deployment": args.deployment}
    if args.run:
        query["run"] = args.run
    status, body = _call("POST", f"{base_url(args.url)}/api/evals/runs/?{urlencode(query)}", args.key, data)
    if status != 201:
        print(f"Not uploaded ({status}): {body.get('error', body)}", file=sys.stderr)
        for line in body.get("errors", [])[1:]:
            print(f"  {line}", file=sys.stderr)
        return UNREACHABLE
    print(
        f"Uploaded {body['results']} results ({body['passed']} passed) of {body['agent']} at {body['deployment']};"
        f" {body['linked']} linked to their calls. {body['url']}"
    )
    for why in body.get("unlinked", []):
        print(f"  not linked: {why}")
    return PASS


def _table(verdict: dict) -> list[str]:
    lines = []
    for row in verdict["scenarios"]:
        b, c = row["baseline"], row["candidate"]
        mark = "WORSE" if row["worse"] else row["note"] or "ok"
        lines.append(f"  {row['name']}: {b['passed']}/{b['runs']} -> {c['passed']}/{c['runs']}  {mark}")
    for row in verdict["waits"]:
        b, c = row["baseline"], row["candidate"]
        if b["p50"] is None or c["p50"] is None:
            continue
        mark = "WORSE" if row["worse"] else row["note"] or "ok"
        lines.append(f"  {row['label']}: p50 {b['p50']:.0f} ms -> {c['p50']:.0f} ms  {mark}")
    return lines


def gate(args) -> int:
    query = {"candidate": args.candidate}
    if args.baseline:
        query["baseline"] = args.baseline
    url = f"{base_url(args.url)}/api/evals/{quote(args.agent, safe='')}/gate/?{urlencode(query)}"
    status, body = _call("GET", url, args.key)
    if status != 200:
        print(f"The gate could not be asked ({status}): {body.get('error', body)}", file=sys.stderr)
        return UNREACHABLE
    verdict = body["verdict"]
    print(f"{body['candidate']} against {body['baseline']}: {verdict}")
    for reason in body["reasons"]:
        print(f"  {reason}")
    print("\n".join(_table(body)))
    if verdict == "worse":
        return WORSE
    if verdict == "insufficient":
        return PASS if args.allow_insufficient else INSUFFICIENT
    return PASS


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="rtvi-dashboard-eval", description=__doc__.split("\n\n")[0])
    top.add_argument("--url", help="the dashboard's address (else RTVI_DASHBOARD_API_URL / RTVI_DASHBOARD_URL)")
    top.add_argument("--key", default=os.environ.get("RTVI_DASHBOARD_API_KEY", ""), help="a private API key")
    commands = top.add_subparsers(dest="command", required=True)
    up = commands.add_parser("upload", help="upload a pipecat eval run's results.jsonl")
    up.add_argument("results", help="the results.jsonl `pipecat eval` wrote")
    up.add_argument("--agent", required=True, help="the agent tested (its id or name)")
    up.add_argument("--deployment", required=True, help="what it ran against: a deployment id or an environment")
    up.add_argument("--run", default=os.environ.get("RTVI_DASHBOARD_EVAL_RUN", ""), help="the run's label")
    up.set_defaults(handler=upload)
    check = commands.add_parser("gate", help="exit 1 when the candidate deployment is worse")
    check.add_argument("--agent", required=True)
    check.add_argument("--candidate", required=True, help="the deployment to promote")
    check.add_argument("--baseline", default="", help="compared with (default: the agent's active deployment)")
    check.add_argument("--allow-insufficient", action="store_true", help="exit 0 when there is nothing to compare")
    check.set_defaults(handler=gate)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if not args.key:
        print("rtvi-dashboard-eval: give a private API key (--key or RTVI_DASHBOARD_API_KEY)", file=sys.stderr)
        return UNREACHABLE
    try:
        return args.handler(args)
    except (urllib.error.URLError, OSError, TimeoutError) as error:
        print(f"rtvi-dashboard-eval: could not reach the dashboard: {error}", file=sys.stderr)
        return UNREACHABLE


if __name__ == "__main__":
    sys.exit(main())
