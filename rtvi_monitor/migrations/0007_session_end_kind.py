from django.db import migrations, models


def kinds_of_old_ends(apps, schema_editor):
    # What can be told of sessions that ended before kinds were recorded; the rest stay blank ("ended").
    Session = apps.get_model("rtvi_monitor", "Session")
    Event = apps.get_model("rtvi_monitor", "Event")
    ended = Session.objects.filter(status="ended")
    ended.filter(models.Q(fatal=True) | models.Q(end_reason="fatal error")).update(end_kind="fatal_error")
    ended.filter(end_kind="", end_reason="server restarted").update(end_kind="server_restarted")
    hung_up = Event.objects.filter(type="disconnect-bot").values("session_id")
    ended.filter(end_kind="", pk__in=hung_up).update(end_kind="client_hung_up", end_reason="client hung up")


class Migration(migrations.Migration):
    dependencies = [
        ("rtvi_monitor", "0006_event_stream"),
    ]

    operations = [
        migrations.AddField(
            model_name="session",
            name="end_kind",
            field=models.CharField(
                blank=True,
                choices=[
                    ("client_hung_up", "client hung up"),
                    ("bot_finished", "bot finished"),
                    ("bot_vanished", "bot vanished"),
                    ("fatal_error", "fatal error"),
                    ("server_restarted", "server restarted"),
                ],
                max_length=20,
            ),
        ),
        migrations.AlterField(
            model_name="alertrule",
            name="condition",
            field=models.CharField(
                choices=[
                    ("fatal_error", "a session had a fatal error"),
                    ("error_rate", "share of sessions with errors above threshold %"),
                    ("turn_latency_p95_ms", "an agent's turn latency p95 above threshold ms"),
                    ("no_sessions_minutes", "an agent that usually has sessions has had none"),
                    ("agents_api_down", "the agents API has been failing"),
                    (
                        "ended_badly",
                        "sessions ended badly (bot vanished, server restarted) at least threshold times",
                    ),
                ],
                max_length=32,
            ),
        ),
        migrations.RunPython(kinds_of_old_ends, migrations.RunPython.noop),
    ]
