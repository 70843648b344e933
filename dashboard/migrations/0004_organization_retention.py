from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("dashboard", "0003_audit"),
    ]

    operations = [
        migrations.AddField(
            model_name="organization",
            name="keep_alerts_days",
            field=models.PositiveIntegerField(
                blank=True, help_text="Days resolved alerts (and their deliveries) are kept.", null=True
            ),
        ),
        migrations.AddField(
            model_name="organization",
            name="keep_messages_days",
            field=models.PositiveIntegerField(
                blank=True,
                help_text="Days an ended call's messages and transcript are kept (its figures stay).",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="organization",
            name="keep_sessions_days",
            field=models.PositiveIntegerField(blank=True, help_text="Days an ended call is kept at all.", null=True),
        ),
        migrations.AddField(
            model_name="organization",
            name="keep_spans_days",
            field=models.PositiveIntegerField(blank=True, help_text="Days trace spans are kept.", null=True),
        ),
    ]
