"""An organization's own settings, for its admins, inside the dashboard (not Django's site admin).

Members and roles (invitations by a one-time link), private API keys with
scopes and an expiry, ingest tokens, alert rules, prices, retention (the
organization's and an agent's own) and redaction rules. Every page is for
the admin role of the organization the user works in now; every query is
scoped to it, so an admin of one organization can never reach another's.
Every change is in the audit log. Secrets are shown once, on the page that
made them, and stored hashed.

The organization switcher and accepting an invitation are here too: they
are for any signed-in user.
"""

import json
import secrets
from datetime import timedelta
from urllib.parse import urlsplit

from asgiref.sync import async_to_sync
from django import forms
from django.contrib import messages
from django.contrib.auth import get_user_model, login
from django.contrib.auth.forms import UserCreationForm
from django.core.exceptions import BadRequest
from django.core.mail import send_mail
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import transaction
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_http_methods, require_POST

from dashboard.access.auth import ORGANIZATION_SESSION_KEY, member_required, memberships_of, public
from dashboard.agents import service as agents_service
from dashboard.org import audit
from dashboard.org.models import AgentRetention, ApiKey, Invitation, Membership, Organization, Price, Role
from dashboard.web.forms import NumberInput, UnitInput
from dashboard.web.http import whole_number
from rtvi_monitor.alerts import thresholds
from rtvi_monitor.alerts.models import AlertRule
from rtvi_monitor.live.models import IngestToken
from rtvi_monitor.redaction.models import RedactionRule

SECTIONS = [
    ("org_members", "Members"),
    ("org_keys", "Keys and tokens"),
    ("org_alert_rules", "Alert rules"),
    ("org_prices", "Prices"),
    ("org_retention", "Retention"),
    ("org_redaction", "Redaction"),
    ("org_recording", "Recording"),
    ("org_erase", "Erase"),
]


def _render(request, template: str, context: dict, status: int = 200):
    return render(request, f"org/{template}", {"sections": SECTIONS, **context}, status=status)


# A secret just made (a key, a token, an invitation's link) is shown on the answer to the POST that made
# it, never stored (not even in the browser's session) and not cached (no-store). Each form carries a
# one-time nonce, so a reload that sends the POST again makes nothing a second time.
NONCES = "org-admin-nonces"
MAX_ID = 2**63 - 1  # a row's id (a BigAutoField)


def _nonce(request) -> str:
    nonce = secrets.token_urlsafe(12)
    request.session[NONCES] = [*request.session.get(NONCES, [])[-19:], nonce]
    return nonce


def _fresh(request) -> bool:
    """Whether the POST's form was issued here and is sent for the first time."""
    nonce, issued = request.POST.get("nonce", ""), request.session.get(NONCES, [])
    if nonce not in issued:
        return False
    issued.remove(nonce)
    request.session[NONCES] = issued
    return True


def _resent(request, page: str):
    messages.info(request, "That form was sent already; what it made was shown once, on the page it answered with.")
    return redirect(page)


def _secret_page(response):
    response["Cache-Control"] = "no-store"
    return response


def _sent_id(params, name: str) -> int | None:
    """The id of a row a form sent as `name` (request.POST or .GET), None when none was sent. It is
    bounded before it is converted: "abc" or 5,000 digits is a 400 that names it, not a 500."""
    raw = params.get(name)
    if not raw:
        return None
    pk = whole_number(raw, 19)
    if pk is None or pk > MAX_ID:
        raise BadRequest(f"{name}: expected the id of a row on this page (a whole number), got {raw[:40]!r}")
    return pk


def _changed(request, action: str, target: str, **detail) -> None:
    audit.record(request.organization, action, target, request=request, **detail)


# --- the switcher and invitations (any signed-in user) ------------------------------------


@require_POST
@member_required("account")
def switch_organization(request):
    """POST organization=<id>: work in another of one's organizations from now on (this browser)."""
    chosen = request.POST.get("organization", "")
    if not any(str(m.organization_id) == chosen for m in memberships_of(request.user)):
        raise Http404("You are not a member of that organization.")
    request.session[ORGANIZATION_SESSION_KEY] = chosen
    target = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        target = reverse("home")
    # A page of one organization's session or agent means nothing in another: its list instead.
    path = urlsplit(target).path
    if path.startswith(("/sessions/", "/agents/")) and path.count("/") >= 3:
        target = "/" + path.split("/")[1] + "/"
    return redirect(target)


class SignUpForm(UserCreationForm):
    class Meta(UserCreationForm.Meta):
        model = get_user_model()
        fields = ("username",)


@public("an invitation's secret link is its credential: whoever opens it joins, signed in or signing up")
@require_http_methods(["GET", "POST"])
def accept_invitation(request, secret: str):
    """A one-time invitation: join as a signed-in user, or make an account here and join with it."""
    invitation = Invitation.find(secret)
    if invitation is None:
        return render(request, "org/invitation.html", {"invalid": True}, status=404)
    form = None
    if request.method == "POST":
        user = request.user if request.user.is_authenticated else None
        if user is None:
            form = SignUpForm(request.POST)
        if user is not None or form.is_valid():
            with transaction.atomic():
                # Taken once, while it is still open: a revoke or the expiry in between wins.
                taken = Invitation.objects.select_for_update().filter(
                    pk=invitation.pk, accepted_at__isnull=True, revoked_at__isnull=True, expires_at__gt=timezone.now()
                )
                if not taken.exists():
                    return render(request, "org/invitation.html", {"invalid": True}, status=404)
                if user is None:  # the account is made with the membership, or not at all
                    user = form.save(commit=False)
                    user.email = invitation.email
                    user.save()
                taken.update(accepted_at=timezone.now(), accepted_by=user)
                membership, created = Membership.objects.get_or_create(
                    user=user, organization=invitation.organization, defaults={"role": invitation.role}
                )
                if not created and Role.rank(invitation.role) > Role.rank(membership.role):
                    membership.role = invitation.role  # an invitation never lowers a role one already has
                    membership.save(update_fields=["role"])
            audit.record(
                invitation.organization,
                audit.Action.MEMBER_JOINED,
                user.get_username(),
                request=request,
                actor=user.get_username(),
                role=membership.role,
                invited_as=invitation.email,
            )
            if not request.user.is_authenticated:
                login(request, user, backend="django.contrib.auth.backends.ModelBackend")
            request.session[ORGANIZATION_SESSION_KEY] = str(invitation.organization_id)
            messages.success(request, f"You are now a member of {invitation.organization} ({membership.role}).")
            return redirect("home")
    elif not request.user.is_authenticated:
        form = SignUpForm()
    return render(request, "org/invitation.html", {"invitation": invitation, "form": form})


# --- members ------------------------------------------------------------------------------


class InviteForm(forms.Form):
    email = forms.EmailField(label="E-mail")
    role = forms.ChoiceField(choices=Role.choices, initial=Role.OPERATOR)


def _change_member(request, organization, do: str):
    """A member's new role, or their removal; an organization always keeps an admin (Membership.leaves_no_admin)."""
    with transaction.atomic():
        membership = get_object_or_404(Membership, pk=_sent_id(request.POST, "membership"), organization=organization)
        role = request.POST.get("role", "")
        if membership.leaves_no_admin(None if do == "remove" else role):
            messages.error(request, "An organization keeps at least one admin: make another admin first.")
        elif do == "remove":
            membership.delete()
            _changed(request, audit.Action.MEMBER_REMOVED, membership.user.get_username(), role=membership.role)
            messages.success(request, f"{membership.user.get_username()} is no longer a member.")
        elif role in Role.values and role != membership.role:
            before, membership.role = membership.role, role
            membership.save(update_fields=["role"])
            _changed(request, audit.Action.ROLE_CHANGED, membership.user.get_username(), before=before, after=role)
            messages.success(request, f"{membership.user.get_username()} is now {role}.")
    return redirect("org_members")


def _members_offered(organization) -> list[Membership]:
    """The members, each with the roles it may be given and whether it may be removed, as the change would be
    answered (Membership.leaves_no_admin): the page offers nothing the server would refuse."""
    listed = list(organization.members.select_related("user").order_by("user__username"))
    admins = Membership.admin_ids(organization.pk, lock=False)
    for member in listed:
        member.roles_offered = [(v, label) for v, label in Role.choices if not member.leaves_no_admin(v, admins)]
        member.removable = not member.leaves_no_admin(None, admins)
    return listed


@member_required("org.members")
@require_http_methods(["GET", "POST"])
def members(request):
    organization = request.organization
    form = InviteForm(request.POST if request.POST.get("do") == "invite" else None)
    link = ""
    if request.method == "POST":
        do = request.POST.get("do", "")
        if do == "invite" and not _fresh(request):
            return _resent(request, "org_members")
        if do == "invite" and form.is_valid():
            invitation, secret = Invitation.issue(
                organization, form.cleaned_data["email"], form.cleaned_data["role"], invited_by=request.user
            )
            link = request.build_absolute_uri(reverse("accept_invitation", args=[secret]))
            send_mail(
                f"You are invited to {organization} on the RTVI dashboard",
                f"{request.user.get_username()} invites you to {organization} as {invitation.role}.\n\n"
                f"Open this link within {Invitation.VALID_FOR.days} days (it works once):\n{link}\n",
                None,
                [invitation.email],
                fail_silently=True,
            )
            _changed(request, audit.Action.MEMBER_INVITED, invitation.email, role=invitation.role)
            form = InviteForm()
        elif do in ("role", "remove"):
            return _change_member(request, organization, do)
        elif do == "revoke":
            invitation = get_object_or_404(
                Invitation, pk=_sent_id(request.POST, "invitation"), organization=organization
            )
            if invitation.state == "open":
                invitation.revoked_at = timezone.now()
                invitation.save(update_fields=["revoked_at"])
                _changed(request, audit.Action.INVITATION_REVOKED, invitation.email, role=invitation.role)
            return redirect("org_members")
    response = _render(
        request,
        "members.html",
        {
            "members": _members_offered(organization),
            "invitations": organization.invitations.order_by("-created_at")[:50],
            "form": form,
            "link": link,
            "valid_days": Invitation.VALID_FOR.days,
            "nonce": _nonce(request),
        },
        status=400 if request.method == "POST" and not link else 200,
    )
    return _secret_page(response) if link else response


# --- keys and tokens ----------------------------------------------------------------------


class KeyForm(forms.Form):
    name = forms.CharField(max_length=200, help_text="What uses it, to recognise it later.")
    scopes = forms.MultipleChoiceField(
        choices=[("read", "read (every GET: sessions, messages, metrics, audit)"), ("write", "write (changes)")],
        widget=forms.CheckboxSelectMultiple,
        initial=["read"],
    )
    expires_in_days = forms.IntegerField(
        label="Expires in",
        widget=UnitInput("days"),
        min_value=1,
        max_value=3650,
        required=False,
        help_text="Blank: it never expires.",
    )


class TokenForm(forms.Form):
    name = forms.CharField(max_length=200, help_text="Which bots use it.")


@member_required("org.settings")
@require_http_methods(["GET", "POST"])
def keys(request):
    organization = request.organization
    # Each form its own ids: both have a name, and a label names one input.
    key_form = KeyForm(request.POST if request.POST.get("do") == "key" else None, auto_id="key_%s")
    token_form = TokenForm(request.POST if request.POST.get("do") == "token" else None, auto_id="token_%s")
    shown = None
    if request.method == "POST":
        do = request.POST.get("do", "")
        if do in ("key", "token") and not _fresh(request):
            return _resent(request, "org_keys")
        if do == "key" and key_form.is_valid():
            days = key_form.cleaned_data["expires_in_days"]
            record, secret = ApiKey.issue(organization, key_form.cleaned_data["name"], request=request)
            record.scopes = ",".join(scope for scope in ApiKey.SCOPES if scope in key_form.cleaned_data["scopes"])
            record.expires_at = timezone.now() + timedelta(days=days) if days else None
            record.save(update_fields=["scopes", "expires_at"])
            shown, key_form = ("private API key", secret), KeyForm(auto_id="key_%s")
        elif do == "token" and token_form.is_valid():
            _, secret = IngestToken.issue(organization, token_form.cleaned_data["name"], request=request)
            shown, token_form = ("ingest token", secret), TokenForm(auto_id="token_%s")
        elif do in ("revoke-key", "revoke-token"):
            model = ApiKey if do == "revoke-key" else IngestToken
            record = get_object_or_404(model, pk=_sent_id(request.POST, "id"), organization=organization)
            if record.revoked_at is None:
                record.revoked_at = timezone.now()
                record.save(update_fields=["revoked_at"])
                _changed(request, audit.Action.KEY_REVOKED, f"{record.key_prefix}…", kind=model._meta.verbose_name)
                messages.success(request, f"{record.key_prefix}… is revoked: it is refused from now on.")
            return redirect("org_keys")
    response = _render(
        request,
        "keys.html",
        {
            "api_keys": ApiKey.objects.filter(organization=organization).order_by("-created_at"),
            "tokens": IngestToken.objects.filter(organization=organization).order_by("-created_at"),
            "key_form": key_form,
            "token_form": token_form,
            "shown": shown,
            "nonce": _nonce(request),
        },
    )
    return _secret_page(response) if shown else response


# --- rows of a kind: alert rules, prices, redaction rules ------------------------------


def _agent_choices(organization) -> list[tuple[str, str]]:
    listing = async_to_sync(agents_service.get_agents)(organization)
    return [("", "every agent")] + [(agent.id, agent.name) for agent in listing.agents]


class AlertRuleForm(forms.ModelForm):
    """A rule as a person types it: its threshold in the unit shown beside it (seconds for a latency, percent
    for a share), stored in its condition's own measure by rtvi_monitor/alerts/thresholds.py, the one rule."""

    agent_choice = forms.ChoiceField(label="Agent", required=False)
    threshold = forms.DecimalField(required=False, min_value=0, max_value=thresholds.TYPED_MOST, widget=UnitInput())
    field_order = ["name", "condition", "agent_choice", "threshold", "window_minutes", "severity"]

    class Meta:
        model = AlertRule
        fields = (
            "name",
            "condition",
            "threshold",
            "window_minutes",
            "severity",
            "runbook_url",
            "renotify_minutes",
            "webhook_url",
            "email",
            "enabled",
        )
        labels = {
            "window_minutes": "Window",
            "runbook_url": "Runbook link",
            "renotify_minutes": "Re-notify every",
            "webhook_url": "Webhook URL",
            "email": "E-mail",
        }
        widgets = {"window_minutes": UnitInput("min"), "renotify_minutes": UnitInput("min")}

    def __init__(self, *args, organization=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.organization = organization
        self.fields["agent_choice"].choices = _agent_choices(organization)
        self.fields["webhook_url"].assume_scheme = "https"
        for name in ("renotify_minutes", "window_minutes"):  # 0 minutes is no window: at least 1
            self.fields[name].validators.append(MinValueValidator(1))
            self.fields[name].widget.attrs["min"] = 1
        self.fields["severity"].help_text = "Blank: by the condition (fatal errors critical, latency a warning…)."
        self.fields["condition"].choices = [("", "choose a condition")] + [  # its unit is beside the threshold
            (value, thresholds.condition_text(value)) for value in AlertRule.Condition.values
        ]
        self.fields["severity"].choices = [("", "by the condition"), *AlertRule.Severity.choices]
        self.fields["threshold"].help_text = "In the unit beside it. Blank: the condition's default."
        if self.instance.pk and not self.is_bound:
            self.initial["threshold"] = thresholds.typed(self.instance.condition, self.instance.threshold)
        self._say_units(self["condition"].value() or "")

    def _say_units(self, condition: str) -> None:
        """The threshold's unit and the defaults of the condition chosen, and every condition's for the page's
        script (static/js/alert_rule_form.js), which says them again when another condition is chosen."""
        units = thresholds.units()
        said = units.get(condition, {"unit": "", "default": "", "none": "", "window": ""})
        threshold, window = self.fields["threshold"].widget, self.fields["window_minutes"].widget
        threshold.unit = said["none"] or said["unit"]
        threshold.attrs.update({"data-units": json.dumps(units), "placeholder": said["default"]})
        if said["none"]:
            threshold.attrs["disabled"] = True
        window.attrs["placeholder"] = said["window"]

    def clean(self):
        cleaned = super().clean()
        condition, entered = cleaned.get("condition"), cleaned.get("threshold")
        if condition and entered is not None:
            value = thresholds.stored(condition, entered)
            if condition in thresholds.FIRES_WITHOUT:
                self.add_error("threshold", "This condition takes no threshold: leave it blank.")
            elif refused := thresholds.refusal(condition, value):
                self.add_error("threshold", refused[:1].upper() + refused[1:] + ".")
            cleaned["threshold"] = value
        return cleaned

    def clean_runbook_url(self):
        from rtvi_monitor.alerts import notify as alert_channels

        try:
            return alert_channels.check_runbook(self.cleaned_data.get("runbook_url") or "")
        except ValueError as exc:
            raise forms.ValidationError(str(exc).removeprefix("runbook_url: ")) from None

    def clean_webhook_url(self):
        from rtvi_monitor.alerts import notify as alert_channels

        url = self.cleaned_data.get("webhook_url") or ""
        try:
            return alert_channels.check_url(url, "webhook_url", 200) if url else ""
        except ValueError as exc:
            raise forms.ValidationError(str(exc).removeprefix("webhook_url: ")) from None

    def save(self, commit=True):
        from dashboard.agents.models import Agent

        rule = super().save(commit=False)
        rule.organization = self.organization
        chosen = self.cleaned_data.get("agent_choice") or ""
        names = dict(self.fields["agent_choice"].choices)
        built_in = Agent.objects.filter(organization=self.organization, pk=chosen).first() if _uuid(chosen) else None
        rule.agent = built_in
        rule.agent_key = "" if built_in or not chosen else chosen  # an agents API agent with no built-in row
        rule.agent_label = "" if built_in or not chosen else names.get(chosen, chosen)
        if commit:
            rule.save()
        return rule


def _uuid(value: str) -> bool:
    import uuid

    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


class PriceForm(forms.ModelForm):
    class Meta:
        model = Price
        fields = (
            "model",
            "usd_per_million_input_tokens",
            "usd_per_million_output_tokens",
            "usd_per_thousand_characters",
            "usd_per_audio_minute",
        )
        labels = {
            "usd_per_million_input_tokens": "USD per million input tokens",
            "usd_per_million_output_tokens": "USD per million output tokens",
            "usd_per_thousand_characters": "USD per thousand characters",
            "usd_per_audio_minute": "USD per audio minute",
        }
        widgets = {name: NumberInput(attrs={"step": "any"}) for name in labels}

    # A price is 0 or more, and less than any model costs: a negative one made costs read "$0.00", and one of
    # 1e308 took calls' costs past what a float holds (infinity, read as "no price").
    MOST = 1_000_000

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for name in self.Meta.labels:
            field = self.fields[name]
            field.validators += [MinValueValidator(0), MaxValueValidator(self.MOST)]
            field.widget.attrs.update({"min": 0, "max": self.MOST})


class RedactionRuleForm(forms.ModelForm):
    class Meta:
        model = RedactionRule
        fields = ("name", "pattern", "enabled")


KINDS = {
    # url name: (model, form, title, audit action on save, what it is called in the log)
    "org_alert_rules": (AlertRule, AlertRuleForm, "Alert rules", audit.Action.RULE_CHANGED, "alert rule"),
    "org_prices": (Price, PriceForm, "Prices", audit.Action.PRICE_CHANGED, "price"),
    "org_redaction": (RedactionRule, RedactionRuleForm, "Redaction", audit.Action.RULE_CHANGED, "redaction rule"),
}


def _label(row) -> str:
    return getattr(row, "name", None) or getattr(row, "model", "")


def _form(form_class, request, data=None, instance=None):
    kwargs = {"organization": request.organization} if form_class is AlertRuleForm else {}
    form = form_class(data, instance=instance, **kwargs)
    if instance is None:  # a unique (organization, name) is checked by the form, which needs the organization
        form.instance.organization = request.organization
    elif form_class is AlertRuleForm and not form.is_bound:
        form.initial["agent_choice"] = instance.target_agent or ""
    return form


def _rows_page(request, kind: str):
    model, form_class, title, action, called = KINDS[kind]
    organization = request.organization
    rows = model.objects.filter(organization=organization)
    editing = None
    if pk := _sent_id(request.GET, "edit") or _sent_id(request.POST, "id"):
        editing = get_object_or_404(model, pk=pk, organization=organization)
    status = 200
    if request.method == "POST":
        if request.POST.get("do") == "delete" and editing is not None:
            editing.delete()
            _changed(request, audit.Action.RULE_DELETED, f"{called}: {_label(editing)}")
            _after_change(model)
            messages.success(request, f"Deleted the {called} {_label(editing)}.")
            return redirect(kind)
        form = _form(form_class, request, request.POST, editing)
        if form.is_valid():
            row = form.save()
            said = {"changed": form.changed_data} if editing else {"created": True}
            _changed(request, action, f"{called}: {_label(row)}", **said)
            _after_change(model)
            messages.success(request, f"Saved the {called} {_label(row)}.")
            return redirect(kind)
        status = 400
    else:
        form = _form(form_class, request, None, editing)
    a_called = f"{'an' if called[0] in 'aeiou' else 'a'} {called}"
    context = {"kind": kind, "title": title, "called": called, "a_called": a_called, "rows": rows, "form": form}
    context["editing"] = editing
    if kind == "org_alert_rules":  # its own page: each rule's channels, their test-send buttons
        return _render(request, "alert_rules.html", {**context, **_channels_context(editing)}, status=status)
    return _render(request, "rows.html", context, status=status)


def _after_change(model) -> None:
    if model is Price:
        from rtvi_monitor.sessions.cost import forget_prices

        forget_prices()  # this process prices with it at once; the others within a minute


@member_required("org.settings")
@require_http_methods(["GET", "POST"])
def alert_rules(request):
    if request.method == "POST" and request.POST.get("do") in ("add-channel", "delete-channel", "test-channel"):
        return _channel_action(request, request.POST["do"])
    return _rows_page(request, "org_alert_rules")


# --- an alert rule's channels: Slack, webhooks, e-mail, PagerDuty, Opsgenie -----------------


def _channels_context(rule) -> dict:
    from rtvi_monitor.alerts import notify as alert_channels
    from rtvi_monitor.alerts.models import AlertChannel

    return {
        "targets": alert_channels.targets(rule) if rule is not None else [],
        "channel_kinds": AlertChannel.Kind.choices,
        "asks": alert_channels.ASKS,
    }


def _channel_action(request, do: str):
    """Add or delete one of a rule's channels, or send a test through one now and show what its receiver said."""
    from rtvi_monitor.alerts import notify as alert_channels
    from rtvi_monitor.alerts import rules as alerts
    from rtvi_monitor.alerts.models import AlertChannel

    rule = get_object_or_404(AlertRule, pk=_sent_id(request.POST, "rule"), organization=request.organization)
    back = f"{reverse('org_alert_rules')}?edit={rule.pk}#channels"
    if do == "add-channel":
        kind = request.POST.get("kind", "")
        try:
            channel = alert_channels.new_channel(rule, kind, request.POST.get("value", ""))
        except ValueError as exc:
            messages.error(request, f"The channel was not added: {exc}.")
            return redirect(back)
        channel.save()
        _changed(request, audit.Action.RULE_CHANGED, f"alert rule: {rule.name}", channel_added=kind)
        messages.success(request, f"Added {channel} to {rule.name}.")
        return redirect(back)
    if do == "delete-channel":
        channel = get_object_or_404(AlertChannel, pk=_sent_id(request.POST, "channel"), rule=rule)
        channel.delete()
        _changed(request, audit.Action.RULE_CHANGED, f"alert rule: {rule.name}", channel_removed=channel.kind)
        messages.success(request, f"Removed {channel} from {rule.name}.")
        return redirect(back)
    # test-channel: the rule's own webhook or e-mail ("webhook", "email"), or a channel by its id
    which = request.POST.get("channel", "")
    target = next((t for t in alert_channels.targets(rule) if _target_key(t) == which), None)
    if target is None:
        raise Http404("No such channel on this rule.")
    body = alerts.test_payload(rule, request.user.get_username())
    error, answers = async_to_sync(alerts.send_test)(target, body)
    said = "; ".join(answers) or "no answer"
    _changed(
        request,
        audit.Action.ALERT_TEST_SENT,
        f"alert rule: {rule.name}",
        channel=target.kind,
        to=target.shown,
        outcome=error or "sent",
    )
    if error:
        messages.error(request, f"The test to {target.kind} {target.shown} failed: {error} ({said})")
    else:
        messages.success(request, f"Test sent to {target.kind} {target.shown}: {said}")
    return redirect(back)


def _target_key(target) -> str:
    return f"c{target.channel.pk}" if target.channel is not None else target.kind


@member_required("org.settings")
@require_http_methods(["GET", "POST"])
def prices(request):
    return _rows_page(request, "org_prices")


@member_required("org.settings")
@require_http_methods(["GET", "POST"])
def redaction(request):
    return _rows_page(request, "org_redaction")


# --- retention ----------------------------------------------------------------------------


KEPT = {  # the days each kind of data is kept, as the retention and recording forms name them
    "keep_messages_days": "Messages and transcripts",
    "keep_sessions_days": "Calls",
    "keep_spans_days": "Trace spans",
    "keep_alerts_days": "Resolved alerts",
    "keep_audio_days": "Recordings",
}


def _days(fields) -> dict:
    return {name: UnitInput("days") for name in fields if name in KEPT}


class RetentionForm(forms.ModelForm):
    class Meta:
        model = Organization
        fields = Organization.RETENTION_FIELDS
        labels = KEPT
        widgets = _days(Organization.RETENTION_FIELDS)


class AgentRetentionForm(forms.ModelForm):
    agent_id = forms.ChoiceField(label="Agent")

    class Meta:
        model = AgentRetention
        fields = ("agent_id", "keep_messages_days", "keep_sessions_days")
        labels = KEPT
        widgets = _days(fields)

    def __init__(self, *args, organization=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.instance.organization = organization
        self.fields["agent_id"].choices = _agent_choices(organization)[1:]

    def clean(self):
        cleaned = super().clean()
        if cleaned.get("keep_messages_days") is None and cleaned.get("keep_sessions_days") is None:
            raise forms.ValidationError("Give the agent at least one number of days.")
        return cleaned


@member_required("org.settings")
@require_http_methods(["GET", "POST"])
def retention(request):
    organization = request.organization
    do = request.POST.get("do", "")
    form = RetentionForm(request.POST if do == "organization" else None, instance=organization)
    agent_form = AgentRetentionForm(  # its own ids: the organization's form above has the same fields
        request.POST if do == "agent" else None, organization=organization, auto_id="agent_%s"
    )
    status = 200
    if request.method == "POST":
        if do == "organization" and form.is_valid():
            form.save()
            kept = {name: getattr(organization, name) for name in form.changed_data}
            if kept:
                _changed(request, audit.Action.RETENTION_CHANGED, organization.name, **kept)
            messages.success(request, "Saved: the next purge keeps to it.")
            return redirect("org_retention")
        if do == "agent" and agent_form.is_valid():
            names = dict(agent_form.fields["agent_id"].choices)
            agent_id = agent_form.cleaned_data["agent_id"]
            AgentRetention.objects.update_or_create(
                organization=organization,
                agent_id=agent_id,
                defaults={
                    "agent_name": names.get(agent_id, ""),
                    "keep_messages_days": agent_form.cleaned_data["keep_messages_days"],
                    "keep_sessions_days": agent_form.cleaned_data["keep_sessions_days"],
                },
            )
            _changed(
                request,
                audit.Action.RETENTION_CHANGED,
                f"agent: {names.get(agent_id, agent_id)}",
                keep_messages_days=agent_form.cleaned_data["keep_messages_days"],
                keep_sessions_days=agent_form.cleaned_data["keep_sessions_days"],
            )
            return redirect("org_retention")
        if do == "forget-agent":
            own = get_object_or_404(AgentRetention, pk=_sent_id(request.POST, "id"), organization=organization)
            own.delete()
            _changed(request, audit.Action.RETENTION_CHANGED, f"agent: {own.agent_name or own.agent_id}", own=None)
            return redirect("org_retention")
        status = 400
    return _render(
        request,
        "retention.html",
        {"form": form, "agent_form": agent_form, "own": organization.agent_retention.all()},
        status=status,
    )


# --- recording ----------------------------------------------------------------------------


class RecordingForm(forms.ModelForm):
    class Meta:
        model = Organization
        fields = ("record_audio", "audio_agents", "audio_role", "keep_audio_days")
        labels = {"record_audio": "Record calls", "audio_agents": "Only these agents", "audio_role": "Who may listen"}
        labels["keep_audio_days"] = "Keep recordings"
        widgets = {"audio_agents": forms.Textarea(attrs={"rows": 3}), **_days(fields)}


@member_required("org.settings")
@require_http_methods(["GET", "POST"])
def recording(request):
    """Whether calls' audio is kept (off until an admin turns it on), for which agents, who may hear it, how long."""
    organization = request.organization
    form = RecordingForm(request.POST or None, instance=organization)
    if request.method == "POST":
        if form.is_valid():
            form.save()
            changed = {name: getattr(organization, name) for name in form.changed_data}
            if changed:
                _changed(request, audit.Action.SETTINGS_CHANGED, "recording", **changed)
            messages.success(request, "Saved: bots learn it when their next call starts.")
            return redirect("org_recording")
        return _render(request, "recording.html", {"form": form}, status=400)
    return _render(request, "recording.html", {"form": form})


class EraseForm(forms.Form):
    session_id = forms.CharField(
        max_length=200, required=False, label="A session's id", help_text="One call, as its page names it. Or:"
    )
    caller = forms.CharField(
        max_length=200,
        required=False,
        strip=False,  # as the bot sent it
        label="A caller's user_id",
        help_text="As the bot reports it (user-transcription's user_id): every session of theirs.",
    )

    def clean(self):
        cleaned = super().clean()
        if bool(cleaned.get("session_id")) == bool(cleaned.get("caller")):
            raise forms.ValidationError("Give a session's id or a caller's user_id (one of them).")
        return cleaned


@member_required("sessions.erase")
@require_http_methods(["GET", "POST"])
def erase(request):
    """Erase on request: one session, or every session of one caller; what went is said and audited."""
    from rtvi_monitor.privacy.erase import erase_caller, erase_session
    from rtvi_monitor.sessions.models import Session, caller_keys

    organization = request.organization
    form = EraseForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        if session_id := form.cleaned_data["session_id"]:
            session = Session.objects.find(organization, session_id)
            if session is None:
                form.add_error("session_id", f"No session {session_id!r} in {organization}.")
            elif (result := erase_session(session)) is None:
                form.add_error("session_id", "It is live: erase it once the call has ended.")
            else:
                _changed(request, audit.Action.SESSION_ERASED, session.session_id, **result)
                messages.success(request, f"Erased {session.session_id}: {result['messages']} messages.")
                return redirect("org_erase")
        else:
            caller = form.cleaned_data["caller"]
            result = erase_caller(organization, caller)
            key = caller_keys(organization.pk, caller)[0][:12]
            _changed(request, audit.Action.SESSION_ERASED, f"caller {key}…", **result)
            said = f"Erased {len(result['erased'])} sessions of that caller ({result['messages']} messages)."
            if result["live"]:
                said += f" {len(result['live'])} still live, kept: erase again once they end."
            messages.success(request, said)
            return redirect("org_erase")
    return _render(request, "erase.html", {"form": form}, status=400 if request.method == "POST" else 200)


@member_required("org.settings")
def index(request):
    return redirect("org_members")
