from django.core.management.base import BaseCommand

from dashboard.models import ApiKey, Organization


class Command(BaseCommand):
    help = "Create a private API key for an organization (created if needed); prints the key on the last line."

    def add_arguments(self, parser):
        parser.add_argument("--org", required=True, help="Organization name")
        parser.add_argument("--name", default="", help="A label for the key")

    def handle(self, *args, org, name, **options):
        organization, created = Organization.objects.get_or_create(name=org)
        if created:
            self.stderr.write(f"Created organization {org!r}.")
        _, secret = ApiKey.issue(organization, name)
        self.stderr.write("Store this key now: only its hash is kept.")
        self.stdout.write(secret)
