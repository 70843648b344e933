"""What a review reason (rtvi_monitor/reviews/models.py `ReviewReason.expects`), given on a bad mark, changes in a
test drafted from the call (scenario.py `apply_marks`): a test that expected what the bot did when it went wrong
would pass the same mistake. Its own module: the reviews' models read it, and the scenario module comes first."""

from django.db import models


class Expects(models.TextChoices):
    NOTHING = "", "nothing of its own"
    FASTER = "faster", "a faster reply"
    REPLY = "reply", "other words"
    TOOL = "tool", "other function calls"
