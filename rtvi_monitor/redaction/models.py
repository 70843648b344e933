"""An organization's redaction rules (its own patterns, beside the built-in detectors of core/redaction.py),
and the redactor they make: what every copy of a caller's words passes through before it is kept or shown."""

from django.conf import settings
from django.db import models
from django.utils import timezone

from dashboard.org.models import Organization


class RedactionRule(models.Model):
    """An organization's own pattern, removed from every text its bots send before it is stored.

    Beside the built-in detectors (rtvi_monitor/redaction.py: e-mail, phone numbers, payment cards,
    IBAN, US SSN). A match becomes "[name]". Changes apply to bots that connect after them.
    """

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="redaction_rules")
    name = models.CharField(max_length=40, help_text='What a match becomes, in brackets: "member-id" → [member-id].')
    pattern = models.CharField(max_length=500, help_text="A Python regular expression.")
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["organization", "name"]
        constraints = [models.UniqueConstraint(fields=["organization", "name"], name="redaction_rule_name_unique")]

    def __str__(self) -> str:
        return f"[{self.name}] {self.pattern}"

    def clean(self) -> None:
        from django.core.exceptions import ValidationError

        from rtvi_monitor.core.redaction import compile_rule

        try:
            compile_rule(self.name, self.pattern)
        except ValueError as exc:
            field, _, message = str(exc).partition(": ")
            raise ValidationError({field: message}) from None

    @classmethod
    def redactor_for(cls, organization_id):
        """The organization's redactor: the built-in detectors (unless REDACTION_BUILTIN is off) and its rules."""

        from rtvi_monitor.core.redaction import Redactor, compile_rule

        rules = []
        for name, pattern in cls.objects.filter(organization_id=organization_id, enabled=True).values_list(
            "name", "pattern"
        ):
            try:
                rules.append(compile_rule(name, pattern))
            except ValueError:  # saved around the admin's check: skipped, never the bot's problem
                continue
        return Redactor(rules, builtin=settings.REDACTION_BUILTIN)
