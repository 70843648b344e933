from django.contrib import admin, messages
from django.utils import timezone

from dashboard.agents.models import Agent, Deployment
from dashboard.org import audit
from dashboard.org.models import ApiKey, AuditEntry, Membership, Organization, Price


class AuditedRuleAdmin(admin.ModelAdmin):
    """A rule's creation, change and deletion go to its organization's audit log."""

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        said = {"changed": sorted(form.changed_data)} if change else {"created": True}
        audit.record(
            obj.organization, audit.Action.RULE_CHANGED, f"{obj._meta.verbose_name}: {obj}", request=request, **said
        )

    def delete_model(self, request, obj):
        audit.record(obj.organization, audit.Action.RULE_DELETED, f"{obj._meta.verbose_name}: {obj}", request=request)
        super().delete_model(request, obj)

    def delete_queryset(self, request, queryset):
        for obj in queryset:
            audit.record(
                obj.organization, audit.Action.RULE_DELETED, f"{obj._meta.verbose_name}: {obj}", request=request
            )
        super().delete_queryset(request, queryset)


@admin.register(AuditEntry)
class AuditEntryAdmin(admin.ModelAdmin):
    """Read-only: the audit log is append-only, in the site admin too."""

    list_display = ("at", "organization", "actor", "ip", "action", "target")
    list_filter = ("organization", "action")
    search_fields = ("actor", "target")
    readonly_fields = [f.name for f in AuditEntry._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class SecretAdmin(admin.ModelAdmin):
    """Keys are created here and shown once; only their hash is stored."""

    list_display = ("key_prefix", "name", "organization", "created_at", "last_used_at", "revoked_at")
    list_filter = ("organization", "revoked_at")
    readonly_fields = ("key_prefix", "created_at", "last_used_at")
    fields = ("organization", "name", "key_prefix", "created_at", "last_used_at", "revoked_at")
    actions = ["revoke"]

    def save_model(self, request, obj, form, change):
        if change:
            was_revoked = type(obj).objects.filter(pk=obj.pk, revoked_at__isnull=False).exists()
            super().save_model(request, obj, form, change)
            if obj.revoked_at is not None and not was_revoked:
                self._audit_revoked(request, obj)
            return None
        record, secret = type(obj).issue(obj.organization, obj.name, request=request)
        obj.pk = record.pk
        self.message_user(request, f"New key (copy it now, it is not shown again): {secret}", messages.WARNING)
        return None

    @staticmethod
    def _audit_revoked(request, key) -> None:
        kind = key._meta.verbose_name
        audit.record(key.organization, audit.Action.KEY_REVOKED, f"{key.key_prefix}…", request=request, kind=kind)

    @admin.action(description="Revoke the selected keys")
    def revoke(self, request, queryset):
        revoking = list(queryset.filter(revoked_at__isnull=True))
        count = queryset.filter(pk__in=[key.pk for key in revoking]).update(revoked_at=timezone.now())
        for key in revoking:
            self._audit_revoked(request, key)
        self.message_user(request, f"Revoked {count} key(s).")


admin.site.register(ApiKey, SecretAdmin)


class DeploymentInline(admin.TabularInline):
    model = Deployment
    extra = 0
    fields = ("id", "image", "created_at", "updated_at")
    readonly_fields = ("id", "updated_at")
    show_change_link = True


@admin.register(Organization)
class OrganizationAdmin(admin.ModelAdmin):
    list_display = ("name", "id", "created_at", *Organization.RETENTION_FIELDS)
    search_fields = ("name",)

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        changed = [name for name in Organization.RETENTION_FIELDS if name in form.changed_data]
        if changed:
            kept = {name: getattr(obj, name) for name in changed}
            audit.record(obj, audit.Action.RETENTION_CHANGED, obj.name, request=request, **kept)


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ("user", "organization", "role", "created_at")
    list_filter = ("organization", "role")
    search_fields = ("user__username", "user__email")


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    list_display = ("name", "organization", "active_deployment", "created_at", "deleted_at")
    list_filter = ("organization", "deleted_at")
    search_fields = ("name", "id")
    readonly_fields = ("id", "updated_at")
    inlines = [DeploymentInline]

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name == "active_deployment":
            agent_id = request.resolver_match.kwargs.get("object_id")
            kwargs["queryset"] = Deployment.objects.filter(agent_id=agent_id)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


@admin.register(Deployment)
class DeploymentAdmin(admin.ModelAdmin):
    list_display = ("id", "agent", "image", "created_at")
    list_filter = ("agent__organization",)
    readonly_fields = ("id", "updated_at")


@admin.register(Price)
class PriceAdmin(admin.ModelAdmin):
    list_display = (
        "model",
        "organization",
        "usd_per_million_input_tokens",
        "usd_per_million_output_tokens",
        "usd_per_thousand_characters",
        "usd_per_audio_minute",
        "updated_at",
    )
    list_filter = ("organization",)
    search_fields = ("model",)

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        from rtvi_monitor.sessions.cost import forget_prices

        forget_prices()  # this process prices the next summaries with it at once; others within a minute


admin.site.site_header = "RTVI dashboard administration"
admin.site.site_title = "RTVI dashboard admin"
admin.site.index_title = "Organizations, agents, keys, prices and alert rules"
