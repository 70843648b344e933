"""What create_api_key and create_ingest_token share: make a credential, print it last."""

from django.core.management.base import BaseCommand, CommandError

from dashboard.org.models import Organization


def find_organization(name: str, create: bool) -> tuple[Organization, bool]:
    """The organization named `name`; a new one only when asked for (`create`).

    A typo must not make a new, empty organization that a bot then streams into
    where nobody can see: an unknown name is refused with the names there are.
    """
    organization = Organization.objects.filter(name=name).first()
    if organization is not None:
        return organization, False
    if create:
        return Organization.objects.create(name=name), True
    names = sorted(Organization.objects.values_list("name", flat=True))
    alike = [n for n in names if n.casefold() == name.strip().casefold()]
    message = f"There is no organization named {name!r}."
    if alike:
        message += f" Did you mean {alike[0]!r}?"
    message += f" Organizations: {', '.join(repr(n) for n in names)}." if names else " There are no organizations yet."
    message += " Add --create to create it."
    raise CommandError(message)


class IssueCredentialCommand(BaseCommand):
    """Subclasses set `model` (a dashboard.models.Secret) and `help`."""

    model = None
    command_name = ""  # for the audit log: who made it

    def add_arguments(self, parser):
        parser.add_argument("--org", required=True, help="The organization's exact name")
        parser.add_argument("--create", action="store_true", help="Create the organization if there is none so named")
        parser.add_argument("--name", default="", help="A label for it")

    def handle(self, *args, org, create, name, **options):
        organization, created = find_organization(org, create)
        if created:
            self.stderr.write(f"Created organization {org!r}.")
        _, secret = self.model.issue(organization, name, actor=f"manage.py {self.command_name}")
        self.stderr.write(f"For organization {organization.name!r}. Store it now: only its hash is kept.")
        self.stdout.write(secret)
