"""What create_api_key and create_ingest_token share: make a credential, print it last."""

from django.core.management.base import BaseCommand

from dashboard.models import Organization


class IssueCredentialCommand(BaseCommand):
    """Subclasses set `model` (a dashboard.models.Secret) and `help`."""

    model = None

    def add_arguments(self, parser):
        parser.add_argument("--org", required=True, help="Organization name (created if needed)")
        parser.add_argument("--name", default="", help="A label for it")

    def handle(self, *args, org, name, **options):
        organization, created = Organization.objects.get_or_create(name=org)
        if created:
            self.stderr.write(f"Created organization {org!r}.")
        _, secret = self.model.issue(organization, name)
        self.stderr.write("Store it now: only its hash is kept.")
        self.stdout.write(secret)
