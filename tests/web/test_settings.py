"""Settings: the default runs with nothing set; production settings pass check --deploy."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION = {
    "DEBUG": "false",
    "SECRET_KEY": "k3!v9Qz_rT7wLp2xNc8bYf4hJm6sDg1aEu5iOo0yWe-ZRnXtVqKjPlHbGcFdSa",
    "ALLOWED_HOSTS": "dashboard.example.com",
}


def manage(*args, env):
    clean = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "SECRET_KEY", "ALLOWED_HOSTS")}
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env={**clean, **env}, capture_output=True, text=True
    )


def test_production_settings_pass_check_deploy_with_no_warnings():
    result = manage("check", "--deploy", "--fail-level", "WARNING", env=PRODUCTION)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_production_refuses_to_start_without_a_secret_key():
    result = manage("check", env={"DEBUG": "false", "ALLOWED_HOSTS": "x.example.com"})
    assert result.returncode != 0
    assert "Set SECRET_KEY" in result.stderr


def test_the_default_settings_run_with_nothing_set():
    result = manage("check", env={})
    assert result.returncode == 0, result.stderr


def test_single_sign_on_asks_its_provider_at_first_use_not_when_the_settings_load():
    """The endpoints OIDC_ISSUER's discovery gives are read when first used (dashboard/net/openid.py): a provider
    that is down (nothing listens on port 9) no longer stops every process at start, and its first use says why."""
    sso = {"OIDC_RP_CLIENT_ID": "rtvi-dashboard", "OIDC_ISSUER": "http://127.0.0.1:9"}
    assert manage("check", env=sso).returncode == 0
    code = "from django.conf import settings; print(settings.OIDC_OP_TOKEN_ENDPOINT)"
    result = manage("shell", "--no-imports", "-c", code, env=sso)
    assert result.returncode != 0
    assert "OIDC_ISSUER: could not read http://127.0.0.1:9/.well-known/openid-configuration" in result.stderr


def test_a_malformed_boolean_is_named():
    result = manage("check", env={"DEBUG": "maybe"})
    assert "DEBUG must be true or false" in result.stderr


def test_the_server_process_takes_what_it_loaded_at_start_out_of_full_garbage_collections():
    # In a fresh interpreter: the ASGI entry point the server loads leaves its start-up objects frozen.
    code = "import gc, dashboard.asgi; print(gc.get_freeze_count())"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) > 10_000
