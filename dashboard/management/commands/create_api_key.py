from dashboard.management.issue import IssueCredentialCommand
from dashboard.org.models import ApiKey


class Command(IssueCredentialCommand):
    help = "Create a private API key for an organization; prints the key alone on the last line."
    model = ApiKey
    command_name = "create_api_key"
