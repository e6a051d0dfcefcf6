"""``serve --dev``'s development secrets key: made in its working directory when
``BOSUN_SECRETS_KEY`` is unset, reused at the next start, used by the commands run beside
it in a development setup, and never read by a server without ``--dev``."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from bosun.settings import DEV_JWT_SECRET
from conftest import free_port
from stream import TokenConfig, mint_token

BOSUN = [sys.executable, "-m", "bosun.cli"]
KEY_FILE = ".bosun-dev-secrets-key"
MODEL_FILE = ".bosun-dev-model"
HELLO = Path(__file__).parents[2] / "examples" / "hello.yaml"
SAFE_SECRET = "a-real-jwt-secret-of-at-least-32-bytes-0123456789"
HEADER = ("--header", "Authorization: Bearer tok-never-printed")


def environment(tmp_path: Path, **settings: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("BOSUN_")}
    return clean | {"BOSUN_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'dev.db'}", **settings}


def bosun(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*BOSUN, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


@contextmanager
def serving(env: dict[str, str], cwd: Path, *flags: str) -> Iterator[tuple[str, list[str]]]:
    """A real ``bosun serve`` in ``cwd``; yields its URL and, once it stops, its output."""
    port = free_port()
    process = subprocess.Popen(
        [*BOSUN, "serve", "--port", str(port), "--model", "scripted:none.yaml", *flags],
        env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    url, output = f"http://127.0.0.1:{port}", []
    try:
        for _ in range(400):
            try:
                if httpx.get(f"{url}/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                if process.poll() is not None:
                    raise AssertionError(process.communicate()[0]) from None
                time.sleep(0.05)
        yield url, output
    finally:
        process.terminate()
        output.append(process.communicate(timeout=30)[0])


def owner_token(secret: str = DEV_JWT_SECRET) -> str:
    """The token ``serve --dev`` prints (signed in this process: no extra ``bosun token``)."""
    return mint_token(TokenConfig(secret), user="dev", org="dev-org", role="owner", ttl_s=600)


def add_webhook(url: str, token: str) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/webhooks",
        json={"url": "http://127.0.0.1:9/hook", "event_types": ["run_finished"]},
        headers={"Authorization": f"Bearer {token}"},
    )


def test_serve_dev_makes_the_key_once_and_a_webhook_needs_no_environment(tmp_path: Path) -> None:
    """``make serve``'s case: no BOSUN_SECRETS_KEY anywhere, and adding a webhook over HTTP
    works; a second start reuses the same file, so what was encrypted stays readable; a
    command run beside it (no key, no JWT secret of its own) encrypts with that key."""
    (tmp_path / "none.yaml").write_text("steps: []\n")
    env = environment(tmp_path)
    token = owner_token()
    with serving(env, tmp_path, "--dev") as (url, first):
        made = add_webhook(url, token)
    key_file = tmp_path / KEY_FILE
    assert made.status_code == 201, made.text
    key = key_file.read_text()
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert f"Development secrets key (BOSUN_SECRETS_KEY is unset): made {key_file}" in first[0]
    assert f'export BOSUN_SECRETS_KEY="$(cat {key_file})"' in first[0]
    assert key.strip() not in first[0]  # said where it is, never printed

    with serving(env, tmp_path, "--dev") as (url, second):
        listed = httpx.get(f"{url}/v1/webhooks", headers={"Authorization": f"Bearer {token}"})
        again = add_webhook(url, token)
    assert key_file.read_text() == key
    assert f"reused {key_file}" in second[0]
    assert listed.status_code == 200 and again.status_code == 201, again.text

    beside = bosun(["mcp", "add", "t", "--url", "http://127.0.0.1:9/", *HEADER], env, tmp_path)
    assert beside.returncode == 0, beside.stderr
    assert f"using the development secrets key in {key_file}" in beside.stderr
    # A deployment's environment (a JWT secret of its own) never picks the file up.
    deployed = env | {"BOSUN_JWT_SECRET": SAFE_SECRET}
    refused = bosun(
        ["mcp", "add", "u", "--url", "http://127.0.0.1:9/", *HEADER], deployed, tmp_path
    )
    assert refused.returncode == 2 and "this command's environment" in refused.stderr


def test_serve_without_dev_never_reads_the_key(tmp_path: Path) -> None:
    (tmp_path / "none.yaml").write_text("steps: []\n")
    env = environment(tmp_path, BOSUN_JWT_SECRET=SAFE_SECRET, BOSUN_EGRESS__ALLOW_LOOPBACK="true")
    planted = tmp_path / KEY_FILE
    planted.write_text("fqQYSy0EadMCsTtKsbo-SBTcQWhs1hjp9VYcR5WNtG0=\n")
    token = owner_token(SAFE_SECRET)
    with serving(env, tmp_path) as (url, output):
        refused = add_webhook(url, token)
    assert refused.status_code == 400
    assert "set BOSUN_SECRETS_KEY on the server" in refused.json()["error"]["message"]
    assert "Development secrets key" not in output[0]
    assert not (tmp_path / MODEL_FILE).exists()  # nor leaves its model for the commands
    assert planted.read_text() == "fqQYSy0EadMCsTtKsbo-SBTcQWhs1hjp9VYcR5WNtG0=\n"


def test_a_broken_key_file_stops_serve_dev_and_is_kept(tmp_path: Path) -> None:
    (tmp_path / "none.yaml").write_text("steps: []\n")
    (tmp_path / KEY_FILE).write_text("not a key\n")
    env = environment(tmp_path)
    broken = bosun(["serve", "--dev", "--port", str(free_port())], env, tmp_path)
    assert broken.returncode == 2
    assert f"{tmp_path / KEY_FILE} holds no Fernet key: delete it" in broken.stderr
    assert (tmp_path / KEY_FILE).read_text() == "not a key\n"  # never overwritten


def test_run_wait_beside_serve_dev_runs_with_the_servers_model(tmp_path: Path) -> None:
    """``make serve`` gives the model on serve's command line, which another process cannot
    read: ``serve --dev`` leaves it beside its key, and ``bosun run --wait`` there (no
    model of its own, no JWT secret) runs with it; a deployment's environment never does."""
    (tmp_path / "hello.yaml").write_text(HELLO.read_text())
    env = environment(tmp_path)
    with serving(env, tmp_path, "--dev", "--model", "scripted:hello.yaml"):
        pass
    assert (tmp_path / MODEL_FILE).read_text() == "scripted:hello.yaml\n"

    waited = bosun(["run", "default", "Say hello", "--wait"], env, tmp_path)
    assert waited.returncode == 0, waited.stderr
    assert waited.stdout.splitlines()[0].startswith("run_")  # RUN=$(…) still holds the id
    assert f"serve --dev's model scripted:hello.yaml (from {tmp_path / MODEL_FILE})" in (
        waited.stderr
    )
    assert ": completed" in waited.stderr.splitlines()[-1]

    deployed = env | {"BOSUN_JWT_SECRET": SAFE_SECRET, "BOSUN_SECRETS_KEY": read_key(tmp_path)}
    refused = bosun(["run", "default", "Say hello", "--wait"], deployed, tmp_path)
    assert refused.returncode == 2 and "pass --model SPEC" in refused.stderr


def read_key(directory: Path) -> str:
    return (directory / KEY_FILE).read_text().strip()


def test_a_start_without_a_model_forgets_the_last(tmp_path: Path) -> None:
    from bosun._dev_key import cli_model, remember_model

    remember_model(tmp_path, "scripted:hello.yaml")
    assert cli_model(tmp_path) == ((tmp_path / MODEL_FILE).resolve(), "scripted:hello.yaml")
    remember_model(tmp_path, None)
    assert cli_model(tmp_path) is None and not (tmp_path / MODEL_FILE).exists()
