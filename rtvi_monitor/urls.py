from django.urls import path

from rtvi_monitor import api, views

urlpatterns = [
    path("sessions/", views.session_list, name="session_list"),
    path("sessions/<str:session_id>/", views.session_detail, name="session_detail"),
    path("api/sessions/", api.session_list, name="api_session_list"),
    path("api/sessions/<str:session_id>/", api.session_detail_json, name="api_session_detail"),
    path("api/sessions/<str:session_id>/traces/", api.session_traces_json, name="api_session_traces"),
    path("api/sessions/<str:session_id>/platform/", api.session_platform_json, name="api_session_platform"),
    path("api/sessions/<str:session_id>/events.ndjson", api.session_events_ndjson, name="api_session_events"),
    path("api/sessions/<str:session_id>/events/", api.session_events_page, name="api_session_events_page"),
    path("api/sessions/<str:session_id>/events/<int:seq>/", api.session_event, name="api_session_event"),
    path("metrics", api.prometheus, name="metrics"),
]
