from django.core.management.base import BaseCommand

from dashboard.models import Organization
from rtvi_monitor.models import IngestToken


class Command(BaseCommand):
    help = "Create an ingest token for an organization's bots (organization created if needed); prints it last."

    def add_arguments(self, parser):
        parser.add_argument("--org", required=True, help="Organization name")
        parser.add_argument("--name", default="", help="A label for the token, e.g. the bot's name")

    def handle(self, *args, org, name, **options):
        organization, created = Organization.objects.get_or_create(name=org)
        if created:
            self.stderr.write(f"Created organization {org!r}.")
        _, secret = IngestToken.issue(organization, name)
        self.stderr.write("Store this token now: only its hash is kept.")
        self.stdout.write(secret)
