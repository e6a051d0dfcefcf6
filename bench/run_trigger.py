"""How fast ``POST /v1/agents/{handle}/runs`` answers: the run is queued, nothing runs yet.

One ``bosun serve --dev`` over a temporary SQLite file (its run dispatcher on, a scripted
model that answers at once); the client creates an agent, then takes turns between the
trigger and ``GET /healthz`` (the baseline: auth-free, one database read) for ``--runs``
rounds. The agent allows 60 runs a minute, so rounds are paced to stay under it. Reported:
median and p95 wall time per request (client-observed, an upper bound on the server's
time), and the ratio trigger / baseline. Issue 14 asks for a 202 within 100 ms of server
time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from _harness import free_port
from bosun.settings import DEV_JWT_SECRET
from stream import TokenConfig, mint_token

TARGET_MS = 100.0
SCRIPT = """
repeat: true
steps:
  - match: "You are the planner"
    text: '{"strategy": "simple", "reasoning": "r"}'
  - text: "Done."
"""


def _serve(workdir: Path, port: int) -> subprocess.Popen[bytes]:
    (workdir / "script.yaml").write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("BOSUN_")}
    env["BOSUN_DATABASE_URL"] = f"sqlite+aiosqlite:///{workdir / 'bench.db'}"
    env["BOSUN_LOG_LEVEL"] = "warning"
    command = [
        str(Path(sys.executable).with_name("bosun")), "serve", "--dev", "--port", str(port),
        "--model", f"scripted:{workdir / 'script.yaml'}",
    ]  # fmt: skip
    return subprocess.Popen(
        command, env=env, cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def _ms(client: httpx.Client, method: str, path: str, **kwargs: object) -> float:
    start = time.perf_counter()
    response = client.request(method, path, **kwargs)  # type: ignore[arg-type]
    elapsed = (time.perf_counter() - start) * 1000
    assert response.status_code in (200, 202), response.text
    return elapsed


def measure(url: str, runs: int) -> dict[str, list[float]]:
    token = mint_token(TokenConfig(DEV_JWT_SECRET), user="dev", org="dev-org", role="owner",
                       ttl_s=3600)  # fmt: skip
    headers = {"Authorization": f"Bearer {token}"}
    times: dict[str, list[float]] = {"GET /healthz": [], "POST /v1/agents/bench/runs": []}
    with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if client.get("/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        agent = {"handle": "bench", "name": "Bench", "runs_per_minute": 60}
        assert client.post("/v1/agents", json=agent).status_code == 201
        for _ in range(3):  # warm-up
            _ms(client, "GET", "/healthz")
        for i in range(runs):
            times["GET /healthz"].append(_ms(client, "GET", "/healthz"))
            body = {"task": f"Bench task {i}"}
            times["POST /v1/agents/bench/runs"].append(
                _ms(client, "POST", "/v1/agents/bench/runs", json=body)
            )
            time.sleep(1.05)  # stay under the agent's 60 runs a minute
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bosun-bench-") as tmp:
        port = free_port()
        server = _serve(Path(tmp), port)
        try:
            times = measure(f"http://127.0.0.1:{port}", args.runs)
        finally:
            server.terminate()
            server.wait(timeout=30)
    rows = {
        name: {"median_ms": statistics.median(v), "p95_ms": sorted(v)[int(len(v) * 0.95) - 1]}
        for name, v in times.items()
    }
    trigger, base = rows["POST /v1/agents/bench/runs"], rows["GET /healthz"]
    result = {
        "bench": "run_trigger", "runs": args.runs, "rows": rows,
        "ratio_trigger_to_healthz": round(trigger["median_ms"] / base["median_ms"], 2),
        "target_ms": TARGET_MS, "target_met": trigger["p95_ms"] <= TARGET_MS,
    }  # fmt: skip
    if not args.json:
        for name, row in rows.items():
            print(f"{name:32} median {row['median_ms']:7.2f} ms   p95 {row['p95_ms']:7.2f} ms")
        print(f"ratio trigger / healthz (medians): {result['ratio_trigger_to_healthz']}")
        print(f"target: p95 <= {TARGET_MS:g} ms: {'met' if result['target_met'] else 'NOT met'}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
