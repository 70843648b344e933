from dashboard.management.issue import IssueCredentialCommand
from rtvi_monitor.live.models import IngestToken


class Command(IssueCredentialCommand):
    help = "Create an ingest token for an organization's bots; prints the token alone on the last line."
    model = IngestToken
    command_name = "create_ingest_token"
