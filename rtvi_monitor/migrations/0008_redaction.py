import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("dashboard", "0001_initial"),
        ("rtvi_monitor", "0007_session_end_kind"),
    ]

    operations = [
        migrations.AddField(
            model_name="event",
            name="redacted",
            field=models.TextField(
                blank=True,
                db_default="",
                default="",
                help_text='What redaction removed from it before it was stored, as JSON ({"card": 1}); empty when nothing.',
            ),
        ),
        migrations.CreateModel(
            name="RedactionRule",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                (
                    "name",
                    models.CharField(
                        help_text='What a match becomes, in brackets: "member-id" → [member-id].', max_length=40
                    ),
                ),
                ("pattern", models.CharField(help_text="A Python regular expression.", max_length=500)),
                ("enabled", models.BooleanField(default=True)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "organization",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="redaction_rules",
                        to="dashboard.organization",
                    ),
                ),
            ],
            options={
                "ordering": ["organization", "name"],
                "constraints": [
                    models.UniqueConstraint(fields=("organization", "name"), name="redaction_rule_name_unique")
                ],
            },
        ),
    ]
