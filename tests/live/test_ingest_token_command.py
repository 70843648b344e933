"""create_ingest_token and create_api_key never make an organization by accident; seed_demo prints a token.

A typo in `--org` used to create a new, empty organization: a bot then streamed
its calls where nobody could see them. An unknown name is refused, with the
names there are, unless `--create` asks for a new one.
"""

from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from dashboard.org.models import ApiKey, Organization
from rtvi_monitor.live.models import IngestToken

pytestmark = pytest.mark.django_db

COMMANDS = ["create_ingest_token", "create_api_key"]
MODELS = {"create_ingest_token": IngestToken, "create_api_key": ApiKey}


def run(*args) -> tuple[list[str], str]:
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue().strip().splitlines(), err.getvalue()


def token_of(lines: list[str]) -> str:
    return next(x.removeprefix("Ingest token: ") for x in lines if x.startswith("Ingest token: "))


@pytest.mark.parametrize("command", COMMANDS)
def test_an_unknown_organization_is_refused_with_the_names_there_are(command):
    Organization.objects.create(name="Demo Voice Co")
    Organization.objects.create(name="Initech")
    with pytest.raises(CommandError) as refused:
        run(command, "--org", "Demo Voise Co")
    message = str(refused.value)
    assert "no organization named 'Demo Voise Co'" in message
    assert "'Demo Voice Co', 'Initech'" in message
    assert "--create" in message
    assert Organization.objects.count() == 2
    assert MODELS[command].objects.count() == 0


@pytest.mark.parametrize("command", COMMANDS)
def test_a_name_in_other_case_is_refused_with_the_likely_one(command):
    Organization.objects.create(name="Demo Voice Co")
    with pytest.raises(CommandError, match="Did you mean 'Demo Voice Co'"):
        run(command, "--org", "demo voice co")
    assert list(Organization.objects.values_list("name", flat=True)) == ["Demo Voice Co"]


@pytest.mark.parametrize("command", COMMANDS)
def test_with_no_organization_at_all_it_says_so(command):
    with pytest.raises(CommandError, match=r"There are no organizations yet\. Add --create"):
        run(command, "--org", "Acme")
    assert not Organization.objects.exists()


@pytest.mark.parametrize("command", COMMANDS)
def test_create_makes_the_organization_once_and_the_credential_works_for_it(command):
    lines, err = run(command, "--create", "--org", "Acme")
    assert "Created organization 'Acme'." in err
    found = MODELS[command].objects.find(lines[-1])
    assert found is not None and found.organization.name == "Acme"
    again, err = run(command, "--create", "--org", "Acme")
    assert "Created" not in err and "For organization 'Acme'" in err
    assert Organization.objects.filter(name="Acme").count() == 1
    assert MODELS[command].objects.find(again[-1]).organization.name == "Acme"


def test_an_existing_organization_needs_no_flag():
    org = Organization.objects.create(name="Acme")
    lines, _ = run("create_ingest_token", "--org", "Acme", "--name", "bot-1")
    token = IngestToken.objects.find(lines[-1])
    assert token.organization == org and token.name == "bot-1"


def test_seed_demo_prints_the_organization_and_an_ingest_token_that_stays_the_same(tmp_path, settings):
    settings.BASE_DIR = tmp_path
    first, _ = run("seed_demo")
    second, _ = run("seed_demo")
    org = Organization.objects.get(name="Demo Voice Co")
    assert f"Organization: Demo Voice Co ({org.pk})" in first
    tokens = [token_of(lines) for lines in (first, second)]
    assert tokens[0] == tokens[1] and tokens[0].startswith("it_")
    assert IngestToken.objects.find(tokens[0]).organization == org
    assert IngestToken.objects.filter(organization=org).count() == 1
    assert first[-1].startswith("pk_") and ApiKey.objects.find(first[-1]).organization == org  # the key stays last
    assert oct((tmp_path / "var" / "demo-login.json").stat().st_mode & 0o777) == "0o600"


def test_seed_demo_replaces_a_revoked_demo_token(tmp_path, settings):
    from django.utils import timezone

    settings.BASE_DIR = tmp_path
    first, _ = run("seed_demo")
    token = token_of(first)
    IngestToken.objects.filter(pk=IngestToken.objects.find(token).pk).update(revoked_at=timezone.now())
    second, _ = run("seed_demo")
    renewed = token_of(second)
    assert renewed != token and IngestToken.objects.find(renewed) is not None
