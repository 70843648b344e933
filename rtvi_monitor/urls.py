from django.urls import path

from rtvi_monitor import pages, views

urlpatterns = [
    path("sessions/", pages.session_list, name="session_list"),
    path("sessions/<str:session_id>/", pages.session_detail, name="session_detail"),
    path("api/sessions/", views.session_list, name="api_session_list"),
    path("api/sessions/<str:session_id>/", views.session_detail_json, name="api_session_detail"),
    path("api/sessions/<str:session_id>/events.ndjson", views.session_events_ndjson, name="api_session_events"),
    path("api/sessions/<str:session_id>/events/<int:seq>/", views.session_event, name="api_session_event"),
]
