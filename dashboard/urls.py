from django.conf import settings
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.templatetags.static import static
from django.urls import include, path, re_path
from django.views.generic import RedirectView

from dashboard.access.auth import public, public_include
from dashboard.access.login import ThrottledAuthenticationForm
from dashboard.agents import api, builtin_api, views
from dashboard.org import audit_views
from dashboard.org import views as org_admin
from dashboard.web import errors
from rtvi_monitor.alerts import views as alert_views
from rtvi_monitor.overview import views as overview_views
from rtvi_monitor.sessions import otlp

urlpatterns = [
    path("", overview_views.home, name="home"),
    path("overview/panel/", overview_views.overview_panel, name="overview_panel"),
    path("alerts/", alert_views.alert_list, name="alert_list"),
    path("api/alerts/", alert_views.alert_list_json, name="api_alert_list"),
    path("api/alerts/rules/", alert_views.alert_rules, name="api_alert_rules"),
    path("alerts/runbook/", alert_views.runbook, name="alert_runbook"),
    path("alerts/<int:pk>/", alert_views.alert_detail, name="alert_detail"),
    path("alerts/<int:pk>/act/", alert_views.alert_act, name="alert_act"),
    path("api/alerts/<int:pk>/", alert_views.alert_detail_json, name="api_alert_detail"),
    path("api/alerts/<int:pk>/acknowledge/", alert_views.alert_acknowledge, name="api_alert_acknowledge"),
    path("api/alerts/<int:pk>/silence/", alert_views.alert_silence, name="api_alert_silence"),
    path("api/alerts/<int:pk>/assign/", alert_views.alert_assign, name="api_alert_assign"),
    path("api/alerts/<int:pk>/notes/", alert_views.alert_note, name="api_alert_notes"),
    path("audit/", audit_views.audit_page, name="audit"),
    path("settings/", include("dashboard.org.urls")),
    path("organization/", org_admin.switch_organization, name="switch_organization"),
    path("invitations/<str:secret>/", org_admin.accept_invitation, name="accept_invitation"),
    path("api/audit/", audit_views.audit_json, name="api_audit"),
    path(
        "login/",
        public("where one signs in")(
            auth_views.LoginView.as_view(
                redirect_authenticated_user=True, authentication_form=ThrottledAuthenticationForm
            )
        ),
        name="login",
    ),
    path("logout/", public("signing out asks nothing of whoever asks")(auth_views.LogoutView.as_view()), name="logout"),
    *(
        [path("oidc/", public_include("mozilla_django_oidc.urls", "single sign-on: the provider's redirects"))]
        if "mozilla_django_oidc" in settings.INSTALLED_APPS
        else []
    ),
    path("agents/", views.agent_list, name="agent_list"),
    path("agents/refresh/", views.agent_refresh, name="agent_refresh"),
    path("agents/<str:agent_id>/", views.agent_detail, name="agent_detail"),
    path("agents/<str:agent_id>/budget/", views.agent_budget, name="agent_budget"),
    path("api/agents/", api.agents_json, name="agents_json"),
    path("v1/agents", builtin_api.agents, name="v1_agents"),
    path("v1/agents/<str:agent_name>", builtin_api.agent_detail, name="v1_agent"),
    path("v1/agents/<str:agent_name>/sessions", builtin_api.agent_session_list, name="v1_agent_sessions"),
    path(
        "v1/agents/<str:agent_name>/sessions/<str:session_id>",
        builtin_api.agent_session_detail,
        name="v1_agent_session",
    ),
    path("v1/agents/<str:agent_name>/logs", builtin_api.agent_logs, name="v1_agent_logs"),
    path("v1/traces", otlp.traces, name="v1_traces"),
    path("", include("rtvi_monitor.urls")),
    path("admin/", admin.site.urls),
    path(
        "favicon.ico",
        public("the site's icon")(RedirectView.as_view(url=static("favicon.svg"), permanent=True)),
    ),
    re_path(r"^(?:v1|api|ingest)/", public("a JSON 404 for a machine path that is none")(errors.machine_not_found)),
]

handler400 = "dashboard.web.errors.bad_request"
handler404 = "dashboard.web.errors.not_found"
handler500 = "dashboard.web.errors.server_error"
